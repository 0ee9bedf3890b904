"""Models the gateway forwards to, chosen by a short name: ``anthropic`` or ``scripted``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harnessopt.config import ModelConfig
from harnessopt.errors import UserError
from harnessopt.models.anthropic_api import AnthropicModel
from harnessopt.models.scripted import ScriptedModel
from harnessopt.protocols import Model

PROVIDERS = ("anthropic", "scripted")

__all__ = ["PROVIDERS", "AnthropicModel", "ScriptedModel", "make_model", "model_for"]


def make_model(
    provider: str, *, script_path: Path | None = None, env: Mapping[str, str] | None = None
) -> Model:
    """The model for ``provider``.

    ``anthropic`` reads ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` from ``env`` (default:
    this process's environment); ``scripted`` loads ``script_path``. Problems are UserErrors.
    """
    environ = os.environ if env is None else env
    if provider == "anthropic":
        return AnthropicModel(environ.get("ANTHROPIC_API_KEY"), environ.get("ANTHROPIC_BASE_URL") or None)
    if provider == "scripted":
        if script_path is None:
            raise UserError(
                "the scripted model needs a script: set model.script in harnessopt.yaml (see docs/models.md)"
            )
        return ScriptedModel.from_yaml(script_path)
    raise UserError(f"unknown model provider {provider!r}; known providers: {', '.join(PROVIDERS)}")


def anthropic_model(cfg: ModelConfig, *, root: Path) -> Model:
    """``anthropic``: the Messages API, with the key from this process's environment."""
    return make_model("anthropic")


def scripted_model(cfg: ModelConfig, *, root: Path) -> Model:
    """``scripted``: replies replayed from ``model.script`` (a path relative to the workspace)."""
    return make_model("scripted", script_path=(root / cfg.script) if cfg.script else None)


def model_for(cfg: ModelConfig, root: Path) -> Model:
    """The model named by ``cfg.provider`` (a registry name or a dotted path)."""
    from harnessopt import registry

    model: Model = registry.build("model", cfg.provider, cfg, root=root)
    return model
