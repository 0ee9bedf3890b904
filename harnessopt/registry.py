"""One registry of swappable parts: sandboxes, optimizers, models, gate policies and executors.

A part is chosen by a short name from the config (``rollout.sandbox: docker``) or by a dotted
path ``package.module:factory`` naming a user's own part, so nobody has to fork harnessopt to
plug one in. Every name maps to a *factory* with one signature per kind (below); a user's
factory (a class is fine) is called the same way and must return an object of the kind's class
in ``harnessopt.protocols`` (``Sandbox``, ``Optimizer``, ``Model``, ``GatePolicy``, ``Executor``): subclass it,
and its optional members keep their defaults where yours leaves them out. A part that lacks a
member is refused when it is built, with the members it lacks. Nothing is imported until a part
is built, so reading the registry costs nothing at start-up.

Factory signatures, by kind:

* ``sandbox``: ``(cfg: RolloutConfig, *, announce) -> Sandbox``
* ``optimizer``: ``(cfg: OptimizerConfig, *, client_factory, shell_factory, announce,
  transcript_dir, lease_factory, **kwargs) -> Optimizer`` (accept ``**kwargs``: later versions
  may pass more)
* ``model``: ``(cfg: ModelConfig, *, root: Path) -> Model``
* ``gate``: ``(cfg: GateConfig) -> GatePolicy``
* ``executor``: ``(cfg: Config, *, sandbox: Sandbox, gateway_url: str) -> Executor`` (``sandbox``
  is the run's own, for executors that run tasks here; ``gateway_url`` the head's gateway)
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, Literal

from harnessopt import protocols
from harnessopt.errors import UserError

Kind = Literal["sandbox", "optimizer", "model", "gate", "executor"]

PARTS: dict[str, dict[str, str]] = {
    "sandbox": {
        "auto": "harnessopt.sandbox:auto_sandbox",
        "docker": "harnessopt.sandbox:docker_sandbox",
        "local": "harnessopt.sandbox:local_sandbox",
    },
    "optimizer": {
        "anthropic": "harnessopt.optimizer:anthropic_optimizer",
        "command": "harnessopt.optimizer:command_optimizer",
        "claude-code": "harnessopt.optimizer:claude_code_optimizer",  # a preset of command
        "codex": "harnessopt.optimizer:codex_optimizer",  # a preset of command
        "manual": "harnessopt.optimizer:manual_optimizer",
    },
    "model": {
        "anthropic": "harnessopt.gateway.models:anthropic_model",
        "openai": "harnessopt.gateway.models:openai_model",
        "scripted": "harnessopt.gateway.models:scripted_model",
    },
    "gate": {
        "banked": "harnessopt.gate.banked:BankedGate",
        "paired": "harnessopt.gate.policy:PairedGate",
    },
    "executor": {
        "local": "harnessopt.rollout.executors:local_executor",
        "ray": "harnessopt.rollout.ray.executor:ray_executor",
    },
}


# What a part of each kind is called in messages: a "model" part is a provider (model.provider),
# whose models are named by model.target
NOUN = {"model": "model provider"}


def known(kind: Kind) -> list[str]:
    return list(PARTS[kind])


def is_dotted(name: str) -> bool:
    module, _, attr = name.partition(":")
    return bool(module and attr) and all(p.isidentifier() for p in module.split(".") + attr.split("."))


def check(kind: Kind, name: str) -> str:
    """``name`` if it is a known part or a well-formed dotted path, else ValueError (for config)."""
    if name in PARTS[kind] or is_dotted(name):
        return name
    raise ValueError(f"unknown {NOUN.get(kind, kind)} {name!r}; {_available(kind)}")


def resolve(kind: Kind, name: str) -> Callable[..., Any]:
    """The factory of part ``name`` of ``kind``; a UserError that lists what is available."""
    target = PARTS[kind].get(name)
    if target is None:
        if not is_dotted(name):
            raise UserError(f"unknown {NOUN.get(kind, kind)} {name!r}; {_available(kind)}")
        target = name
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ImportError as e:
        raise UserError(f"{kind} {name!r}: cannot import {module_name} ({e}); {_available(kind)}") from None
    except AttributeError:
        raise UserError(f"{kind} {name!r}: {module_name} has no {attr}; {_available(kind)}") from None
    if not callable(obj):
        raise UserError(f"{kind} {name!r} is not callable; name a class or a factory function")
    return obj


# The class in ``protocols`` whose members a part of each kind must have.
CONTRACTS: dict[str, type] = {
    "sandbox": protocols.Sandbox,
    "optimizer": protocols.Optimizer,
    "model": protocols.Model,
    "gate": protocols.GatePolicy,
    "executor": protocols.Executor,
}


# How each kind's factory is called (the module docstring): the config, then these keywords.
CALLED_WITH: dict[str, tuple[str, ...]] = {
    "sandbox": ("announce",),
    "optimizer": ("client_factory", "shell_factory", "announce", "transcript_dir", "lease_factory"),
    "model": ("root",),
    "gate": (),
    "executor": ("sandbox", "gateway_url"),
}


def _called_as(kind: str) -> str:
    return f"factory(cfg{''.join(f', {k}=...' for k in CALLED_WITH[kind])})"


def check_factory(kind: Kind, name: str) -> None:
    """A user's part (a dotted path) imports and takes the arguments its kind's factory is called
    with, checked without calling it (``run --dry-run``, which builds nothing): else one UserError."""
    if name in PARTS[kind]:
        return
    factory = resolve(kind, name)
    try:
        inspect.signature(factory).bind(None, **dict.fromkeys(CALLED_WITH[kind]))
    except TypeError as e:
        raise UserError(
            f"{kind} {name!r} cannot be called as {_called_as(kind)} ({e}); see harnessopt/registry.py"
        ) from None
    except ValueError:  # no signature to read (a builtin): building it says
        return


def build(kind: Kind, name: str, *args: Any, **kwargs: Any) -> Any:
    """Resolve and call the factory of ``name``; a UserError when the part lacks a member, or when a
    user's factory (a dotted path) raises: its traceback was the run's end, exit 1 (QA)."""
    factory = resolve(kind, name)
    if name in PARTS[kind]:
        part = factory(*args, **kwargs)
    else:
        try:
            part = factory(*args, **kwargs)
        except UserError:
            raise
        except Exception as e:
            raise UserError(
                f"{kind} {name!r}: calling it as {_called_as(kind)} raised {type(e).__name__}: {e}; "
                "fix the factory (harnessopt/registry.py gives each kind's signature)"
            ) from e
    contract = CONTRACTS[kind]
    if lacking := missing_members(part, contract):
        raise UserError(
            f"{kind} {name!r}: {type(part).__name__} has no {', '.join(lacking)}; subclass "
            f"harnessopt.protocols.{contract.__name__}, which gives every optional member its default"
        )
    return part


def members(contract: type) -> list[str]:
    """The public members a protocol class declares: its annotated fields, methods and properties."""
    names = set(getattr(contract, "__annotations__", {}))
    names |= {n for n, v in vars(contract).items() if callable(v) or isinstance(v, property)}
    return sorted(n for n in names if not n.startswith("_"))


def missing_members(part: object, contract: type) -> list[str]:
    """The members of ``contract`` that ``part`` has neither on its class nor on itself (properties
    are not evaluated: a sandbox's ``identity`` may ask an engine)."""
    own = getattr(part, "__dict__", {})
    return [
        n for n in members(contract) if n not in own and not any(n in vars(c) for c in type(part).__mro__)
    ]


def _available(kind: Kind) -> str:
    return f"known: {', '.join(PARTS[kind])} (or a dotted path package.module:Factory)"
