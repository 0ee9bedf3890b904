"""Models the gateway forwards to, chosen by a short name (the registry's ``model`` parts:
``anthropic``, ``openai``, ``scripted``) or a dotted path to a model of your own.

Each role has its upstream: the target's is ``model:`` in harnessopt.yaml, the optimizer's is
``optimizer:`` (``provider``, ``base_url``, ``api_key_env``), defaulting to the target's.
Building a model is where a run learns, before any rollout, that a key is missing or that a
configured ``base_url`` does not answer (one-line ``UserError`` s).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from harnessopt import registry
from harnessopt.config import Config, ModelConfig, url_problem
from harnessopt.errors import UserError
from harnessopt.gateway.models.anthropic_api import DEFAULT_BASE_URL as ANTHROPIC_URL
from harnessopt.gateway.models.anthropic_api import AnthropicModel
from harnessopt.gateway.models.openai_api import DEFAULT_BASE_URL as OPENAI_URL
from harnessopt.gateway.models.openai_api import OpenAIModel
from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.protocols import Model

DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
DEFAULT_URL_ENV = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}
PROBE_TIMEOUT_S = 5.0

__all__ = [
    "AnthropicModel",
    "OpenAIModel",
    "ScriptedModel",
    "make_model",
    "model_for",
    "optimizer_model_config",
    "optimizer_model_for",
]


def key_env(provider: str, api_key_env: str | None) -> str:
    """The environment variable an ``anthropic``/``openai`` model reads its key from."""
    return api_key_env or DEFAULT_KEY_ENV[provider]


def make_model(
    provider: str,
    *,
    script_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    api_key_env: str | None = None,
    wire_api: str = "chat",
) -> Model:
    """The model for ``provider``.

    ``anthropic`` and ``openai`` read their key from the variable ``api_key_env`` (default
    ``ANTHROPIC_API_KEY`` / ``OPENAI_API_KEY``) of ``env`` (default: this process's
    environment), and their endpoint from ``base_url``, else ``ANTHROPIC_BASE_URL`` /
    ``OPENAI_BASE_URL``, else the official API; ``scripted`` loads ``script_path``.
    Problems are UserErrors.
    """
    environ = os.environ if env is None else env
    if provider in DEFAULT_KEY_ENV:
        key_name = key_env(provider, api_key_env)
        key = environ.get(key_name)
        url = base_url or environ.get(DEFAULT_URL_ENV[provider]) or None
        if url and not base_url and (problem := url_problem(url)):  # the config checked its own
            raise UserError(f"{DEFAULT_URL_ENV[provider]}={url!r} {problem}; fix or unset it")
        if provider == "openai":
            return OpenAIModel(key, url, key_name=key_name, wire_api=wire_api)
        if not key and api_key_env:
            raise UserError(f"set {key_name} in the environment (api_key_env) to call the Anthropic API")
        return AnthropicModel(key, url)
    if provider == "scripted":
        if script_path is None:
            raise UserError(
                "the scripted model needs a script: set model.script in harnessopt.yaml (see docs/models.md)"
            )
        return ScriptedModel.from_yaml(script_path)
    raise UserError(
        f"unknown model provider {provider!r}; known providers: {', '.join(registry.known('model'))}"
    )


def anthropic_model(cfg: ModelConfig, *, root: Path) -> Model:
    """``anthropic``: the Messages API, with the key from this process's environment."""
    return make_model("anthropic", base_url=cfg.base_url, api_key_env=cfg.api_key_env)


def openai_model(cfg: ModelConfig, *, root: Path) -> Model:
    """``openai``: an OpenAI-compatible endpoint (``model.base_url``), in ``model.wire_api``."""
    return make_model("openai", base_url=cfg.base_url, api_key_env=cfg.api_key_env, wire_api=cfg.wire_api)


def scripted_model(cfg: ModelConfig, *, root: Path) -> Model:
    """``scripted``: replies replayed from ``model.script`` (a path relative to the workspace)."""
    return make_model("scripted", script_path=(root / cfg.script) if cfg.script else None)


def model_for(
    cfg: ModelConfig,
    root: Path,
    *,
    setting: str = "model",
    needs_tools: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Model:
    """The model named by ``cfg.provider`` (a registry name or a dotted path).

    A built-in upstream whose endpoint is not the official one must accept a TCP connection
    within PROBE_TIMEOUT_S, else a UserError naming ``setting``.base_url. An ``openai`` one
    must list the model among its ``/models`` when it has that list, and, with
    ``needs_tools`` (the tool-agent template), seem to read ``tools`` (llama.cpp's default chat
    format drops them), else ``warn`` hears what to configure.
    """
    try:
        model: Model = registry.build("model", cfg.provider, cfg, root=root)
    except UserError as e:  # the built-ins name the target's settings: say the optimizer's
        if setting == "model":
            raise
        settings = "|".join(ModelConfig.model_fields)
        raise UserError(re.sub(rf"\bmodel\.({settings})\b", rf"{setting}.\1", str(e))) from None
    if isinstance(model, AnthropicModel | OpenAIModel) and model.base_url not in (ANTHROPIC_URL, OPENAI_URL):
        probe(model.base_url, f"{setting}.base_url")
        if isinstance(model, OpenAIModel):  # a local server: is the model one it serves?
            name_setting = "model.target" if setting == "model" else "optimizer.model"
            model.check_model_name(cfg.target, name_setting)
            if needs_tools and (said := model.check_tools(cfg.target, name_setting)) and warn is not None:
                warn(f"warning: {said}")
    return model


def missing_key(cfg: ModelConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The environment variable ``make_model`` would want an API key in and find empty, or None
    (no SDK import, no connection: ``run --dry-run`` asks it)."""
    if cfg.provider not in DEFAULT_KEY_ENV:
        return None
    key_name = key_env(cfg.provider, cfg.api_key_env)
    return None if (os.environ if env is None else env).get(key_name) else key_name


def optimizer_model_config(cfg: Config) -> ModelConfig:
    """The optimizer's upstream as a ``ModelConfig``: ``optimizer.provider/base_url/api_key_env``.

    Without ``optimizer.provider`` all three are the target's; with the target's provider, unset
    ``base_url``/``api_key_env`` are the target's; with another provider they are its defaults.
    """
    m, o = cfg.model, cfg.optimizer
    same = o.provider is None or o.provider == m.provider
    return m.model_copy(
        update={
            "provider": cfg.optimizer_provider,
            "target": o.model,
            "base_url": o.base_url or (m.base_url if same else None),
            "api_key_env": o.api_key_env or (m.api_key_env if same else None),
        }
    )


def optimizer_model_for(cfg: Config, root: Path, target: Model) -> Model:
    """The optimizer's upstream: ``target`` itself when its settings are the target's."""
    mc = optimizer_model_config(cfg)
    if (mc.provider, mc.base_url, mc.api_key_env) == (
        cfg.model.provider,
        cfg.model.base_url,
        cfg.model.api_key_env,
    ):
        return target
    return model_for(mc, root, setting="optimizer")


def probe(url: str, setting: str) -> None:
    """UserError unless ``url``'s host accepts a TCP connection (nothing is sent)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise UserError(
            f"the model endpoint {url} ({setting}) is unreachable ({why}); start the server or fix {setting}"
        ) from None
