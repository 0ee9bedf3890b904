"""Models the gateway forwards to, chosen by a short name: ``anthropic`` or ``scripted``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from harnessopt.errors import UserError
from harnessopt.models.anthropic_api import AnthropicModel
from harnessopt.models.scripted import ScriptedModel
from harnessopt.protocols import Model

PROVIDERS = ("anthropic", "scripted")

__all__ = ["PROVIDERS", "AnthropicModel", "ScriptedModel", "make_model"]


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
