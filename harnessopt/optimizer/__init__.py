"""Optimizers: who edits the view (``anthropic`` tool loop, a ``command`` CLI agent, or ``manual``).

The view and the whitelist copy-back live in ``view``; the brief and history in ``brief``.
Enforcement is outside the optimizer: whatever it does in the view, only ``copy_back`` writes
to the workspace.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harnessopt.config import OptimizerConfig
from harnessopt.errors import UserError
from harnessopt.optimizer.brief import render_brief, render_history
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot, build_view, copy_back, matches_any
from harnessopt.protocols import Optimizer, Shell

if TYPE_CHECKING:
    import anthropic

BACKENDS = ("anthropic", "command", "manual")

__all__ = [
    "BACKENDS",
    "CopyBackResult",
    "ViewSnapshot",
    "build_view",
    "copy_back",
    "make_optimizer",
    "matches_any",
    "render_brief",
    "render_history",
]


def make_optimizer(
    cfg: OptimizerConfig,
    *,
    client_factory: Callable[[int], anthropic.Anthropic],
    shell_factory: Callable[[Path], Shell] | None = None,
    announce: Callable[[str], None] = print,
    transcript_dir: Path | None = None,
) -> Optimizer:
    """Build the optimizer named by ``cfg.backend``.

    ``client_factory(round_no)`` returns an Anthropic client pointed at the model gateway with the
    optimizer role's token for that round; the ``command`` backend hands its base_url and key to the CLI agent as
    ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY. ``shell_factory(view)`` gives the optimizer's
    ``Shell`` (``sandbox.shell``); it defaults to the local shell on the host.
    """
    if cfg.backend == "anthropic":
        from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer
        from harnessopt.sandbox.local import LocalShell

        return AnthropicOptimizer(
            client_factory,
            cfg.model,
            cfg,
            shell_factory or LocalShell,
            transcript_dir=transcript_dir,
        )
    if cfg.backend == "command":
        from harnessopt.optimizer.command import CommandOptimizer

        def lease_env(round_no: int) -> dict[str, str]:
            client = client_factory(round_no)
            return {
                "ANTHROPIC_BASE_URL": str(client.base_url).rstrip("/"),
                "ANTHROPIC_API_KEY": client.api_key or "",
            }

        return CommandOptimizer(list(cfg.command or []), cfg.wall_s, env_factory=lease_env)
    if cfg.backend == "manual":
        from harnessopt.optimizer.manual import ManualOptimizer

        return ManualOptimizer(cfg.settle_s, cfg.wall_s, announce)
    raise UserError(f"unknown optimizer backend {cfg.backend!r}; known: {', '.join(BACKENDS)}")
