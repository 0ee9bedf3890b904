"""Optimizers: who edits the view (``anthropic`` tool loop, a ``command`` CLI agent such as
``claude-code``, ``codex``, or ``manual``).

The view and the whitelist copy-back live in ``view``; the brief and history in ``brief``.
Enforcement is outside the optimizer: whatever it does in the view, only ``copy_back`` writes
to the workspace.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harnessopt.config import OptimizerConfig
from harnessopt.errors import UserError
from harnessopt.optimizer.brief import render_brief, render_history
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot, build_view, copy_back, matches_any
from harnessopt.protocols import GatewayLease, Optimizer, Shell

if TYPE_CHECKING:
    import anthropic

__all__ = [
    "HOST_EXPOSURE",
    "CopyBackResult",
    "ViewSnapshot",
    "build_view",
    "check_placement",
    "copy_back",
    "make_optimizer",
    "matches_any",
    "render_brief",
    "render_history",
]


# What an optimizer running on this host can reach (named by the warning and the refusal).
HOST_EXPOSURE = (
    "any API key held in harnessopt's memory and environment, the workspace (tasks/ with the gold "
    "answers, scorer.py, .git and its hooks), and the network"
)


def make_optimizer(
    cfg: OptimizerConfig,
    *,
    client_factory: Callable[[int], anthropic.Anthropic],
    shell_factory: Callable[[Path], Shell] | None = None,
    announce: Callable[[str], None] = print,
    transcript_dir: Path | None = None,
    lease_factory: Callable[[int], GatewayLease] | None = None,
    shell_on_host: bool | None = None,
    output_cap: int | None = None,
) -> Optimizer:
    """Build the optimizer named by ``cfg.backend`` (a registry name or a dotted path).

    ``client_factory(round_no)`` returns an Anthropic client pointed at the model gateway with the
    optimizer role's token for that round; ``lease_factory(round_no)`` that round's lease itself
    (token, URL and Unix socket: a CLI agent in a container reaches the gateway through the
    socket; default: the client's token and URL). ``shell_factory(view)`` gives the optimizer's
    ``Shell`` (``sandbox.shell``); it defaults to the local shell on the host. Whether that
    shell runs on this host (``shell_on_host``; default: when no ``shell_factory`` is given)
    decides ``check_placement``. ``output_cap``: the most one optimizer call may ask for
    (``budget.optimizer_max_output_tokens``), for the backends that choose their calls' size
    (``anthropic``, ``claude-code``).
    """
    from harnessopt import registry
    from harnessopt.sandbox.local.sandbox import LocalShell

    check_placement(
        cfg, on_host=shell_factory is None if shell_on_host is None else shell_on_host, announce=announce
    )
    optimizer: Optimizer = registry.build(
        "optimizer",
        cfg.backend,
        cfg,
        client_factory=client_factory,
        shell_factory=shell_factory or LocalShell,
        announce=announce,
        transcript_dir=transcript_dir,
        lease_factory=lease_factory or _lease_of_client(client_factory),
        # the built-in's only: a factory of one's own (a dotted path) takes the documented ones
        **({"output_cap": output_cap} if output_cap and cfg.backend in ("anthropic", "claude-code") else {}),
    )
    return optimizer


def check_placement(cfg: OptimizerConfig, *, on_host: bool, announce: Callable[[str], None]) -> None:
    """An optimizer whose tools would run on this host needs ``optimizer.unsafe_host``, and is
    announced with what it can reach; otherwise a UserError that says what to do. ``manual``
    is a person at their own machine: nothing to check."""
    if not on_host or cfg.backend == "manual":
        return
    if not cfg.unsafe_host:
        # a CLI agent runs in the image variant that holds it (the plain image has no such CLI)
        docker = (
            f"--sandbox docker -c rollout.image=harnessopt-sandbox:{cfg.backend} (after `harnessopt "
            f"sandbox build --with {cfg.backend}`)"
            if cfg.backend in ("claude-code", "codex")
            else "--sandbox docker (after `harnessopt sandbox build`)"
        )
        raise UserError(
            f"the {cfg.backend} optimizer would run its tools on this host (no Docker sandbox), where they "
            f"can reach {HOST_EXPOSURE}: use {docker}, or pass "
            "--unsafe-host-optimizer (optimizer.unsafe_host: true) to accept that"
        )
    announce(
        f"WARNING: optimizer {cfg.backend} runs its tools on this host as uid {os.getuid()} "
        f"(--unsafe-host-optimizer): it can reach {HOST_EXPOSURE}"
    )


def import_in_background(module: str) -> threading.Thread:
    """Import ``module`` on a thread of its own and return the thread. The anthropic SDK's import is 1-2 s
    of CPU (docs/performance.md); a run needs it at the round's first optimizer call, after the
    train batch, so it loads while that batch runs instead of before the run starts. An import of
    the module meanwhile waits for this one (the import system's lock per module); one that fails
    here is left to fail again, with its message, where the module is used. Not a daemon: a run
    that ends within the import (one that starts no round) waits for it at exit; a daemon thread
    is stopped there mid-import, inside the SDK's compiled modules, and the process aborted with
    "FATAL: exception not rethrown" (exit 134)."""

    def load() -> None:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)

    thread = threading.Thread(target=load, name=f"import-{module}", daemon=False)
    thread.start()
    return thread


def _lease_of_client(client_factory: Callable[[int], anthropic.Anthropic]) -> Callable[[int], GatewayLease]:
    def lease(round_no: int) -> GatewayLease:
        client = client_factory(round_no)
        return GatewayLease(client.api_key or "", str(client.base_url).rstrip("/"), None)

    return lease


def anthropic_optimizer(
    cfg: OptimizerConfig,
    *,
    client_factory: Callable[[int], anthropic.Anthropic],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None = None,
    output_cap: int | None = None,
    **_: object,
) -> Optimizer:
    """``anthropic``: the built-in Claude tool loop over the view, each call asking 8,192 output
    tokens or the role's ``output_cap`` if lower. The SDK's import starts here, in the background
    (``import_in_background``)."""
    from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer, output_ask

    import_in_background("anthropic")

    return AnthropicOptimizer(
        client_factory,
        cfg.model,
        cfg,
        shell_factory,
        transcript_dir=transcript_dir,
        max_output_tokens=output_ask(output_cap),
    )


def command_optimizer(
    cfg: OptimizerConfig,
    *,
    lease_factory: Callable[[int], GatewayLease],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None = None,
    **_: object,
) -> Optimizer:
    """``command``: a CLI coding agent run in the view where the shell runs, through the gateway."""
    from harnessopt.optimizer.command import CommandOptimizer

    return CommandOptimizer(
        list(cfg.command or []),
        cfg.wall_s,
        lease_factory=lease_factory,
        shell_factory=shell_factory,
        transcript_dir=transcript_dir,
    )


def claude_code_optimizer(
    cfg: OptimizerConfig,
    *,
    lease_factory: Callable[[int], GatewayLease],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None = None,
    output_cap: int | None = None,
    **_: object,
) -> Optimizer:
    """``claude-code``: the ``command`` backend running Claude Code headless, able to edit the view,
    its calls asking at most ``output_cap`` output tokens (the role's cap)."""
    from harnessopt.optimizer import claude_code

    optimizer: Optimizer = claude_code.make(
        cfg,
        lease_factory=lease_factory,
        shell_factory=shell_factory,
        transcript_dir=transcript_dir,
        output_cap=output_cap,
    )
    return optimizer


def codex_optimizer(
    cfg: OptimizerConfig,
    *,
    lease_factory: Callable[[int], GatewayLease],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None = None,
    **_: object,
) -> Optimizer:
    """``codex``: the ``command`` backend running the Codex CLI (``codex exec``), able to edit the view."""
    from harnessopt.optimizer import codex

    optimizer: Optimizer = codex.make(
        cfg, lease_factory=lease_factory, shell_factory=shell_factory, transcript_dir=transcript_dir
    )
    return optimizer


def manual_optimizer(cfg: OptimizerConfig, *, announce: Callable[[str], None], **_: object) -> Optimizer:
    """``manual``: a person or an IDE agent edits the view."""
    from harnessopt.optimizer.manual import ManualOptimizer

    return ManualOptimizer(cfg.settle_s, cfg.wall_s, announce)
