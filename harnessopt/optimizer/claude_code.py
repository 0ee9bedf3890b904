"""Optimizer preset ``claude-code``: the Claude Code CLI as a ``command`` optimizer that can edit.

``claude -p`` alone edits nothing headless: it asks for a permission nobody grants, and the
round is a silent no-op. The preset runs it with permissions that let it work on the view and
nothing else: ``--permission-mode acceptEdits``, the tools cut down to Bash, Read, Edit, Write,
Glob and Grep (``--tools``, also pre-approved with ``--allowedTools``, so nothing prompts; that
pre-approves writes on any path, so the sandbox it runs in, the optimizer's container or bwrap's
read-only host, is what keeps its writes off the host, and the whitelisted copy-back what keeps
them off the workspace), ``--model optimizer.model``,
and every model alias the CLI uses for side work pointed at that model too (the gateway lets
the optimizer lease call that one model only). Its ``stream-json`` output is the round's
transcript; the ``result`` event gives the summary, the turns and the tokens, and permission
denials are named in the summary, so a round that could not edit says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.config import OptimizerConfig
from harnessopt.protocols import AgentResult, GatewayLease, Proposal, Shell

TOOLS = ("Bash", "Read", "Edit", "Write", "Glob", "Grep")
MISSING_HINT = (  # in the Docker sandbox; on this host (--sandbox local)
    "build the image with `harnessopt sandbox build --with claude-code` and set "
    "rollout.image: harnessopt-sandbox:claude-code",
    "install the CLI on this host: npm install -g @anthropic-ai/claude-code",
)


def claude_code_argv(model: str) -> list[str]:
    """The CLI's argv: headless, stream-json transcript, the model, the tools, edit permissions."""
    tools = ",".join(TOOLS)
    return [
        "claude",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        "--permission-mode",
        "acceptEdits",
        "--tools",
        tools,
        "--allowedTools",
        tools,
        "--no-session-persistence",
    ]


def claude_code_env(cfg: OptimizerConfig, output_cap: int | None = None) -> dict[str, str]:
    """Every model the CLI may pick is ``cfg.model``; no updater, telemetry or other side traffic;
    its calls ask at most ``output_cap`` output tokens (the gateway refuses a call asking more:
    on claude-opus-4-8 the CLI asks 64,000, over the default cap of 32,000)."""
    model = cfg.model
    bash_ms = str(int(cfg.bash_timeout_s * 1000))
    return ({"CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(output_cap)} if output_cap else {}) | {
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "BASH_DEFAULT_TIMEOUT_MS": bash_ms,
        "BASH_MAX_TIMEOUT_MS": bash_ms,
    }


def make(
    cfg: OptimizerConfig,
    *,
    lease_factory: Callable[[int], GatewayLease],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None,
    output_cap: int | None = None,
) -> Any:
    """The ``command`` optimizer running Claude Code; ``optimizer.command`` must be unset."""
    from harnessopt.optimizer.command import preset

    return preset(
        "claude-code",
        claude_code_argv(cfg.model),
        cfg.command,
        cfg.wall_s,
        lease_factory=lease_factory,
        shell_factory=shell_factory,
        env=claude_code_env(cfg, output_cap),
        transcript_dir=transcript_dir,
        report=proposal,
        missing_hint=MISSING_HINT,
    )


def stream_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream-json transcript (lines that are not JSON are skipped)."""
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def proposal(result: AgentResult) -> Proposal:
    """The Proposal a Claude Code run amounts to, from its ``result`` event."""
    events = stream_events(result.stdout)
    final = next((e for e in reversed(events) if e.get("type") == "result"), None)
    if final is None:
        detail = result.stderr.strip()[-500:] or result.note or "no result event in its output"
        stopped = "wall_clock" if result.timed_out else "error"
        return Proposal(
            summary=f"claude-code ended without a result (exit {result.exit_code}): {detail}",
            stopped_by=stopped,
        )
    usage = final.get("usage") or {}
    tokens_in = sum(
        int(usage.get(k) or 0)
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    summary = str(final.get("result") or "").strip() or "(claude-code wrote no summary)"
    denials = final.get("permission_denials") or []
    if denials:
        names = ", ".join(sorted({str(d.get("tool_name", "?")) for d in denials if isinstance(d, dict)}))
        summary += f"\n\n[harnessopt: {len(denials)} tool call(s) were denied permission: {names}]"
    failed = (
        bool(final.get("is_error")) or final.get("subtype") != "success" or result.exit_code not in (0, None)
    )
    stopped = "wall_clock" if result.timed_out else ("error" if failed else "done")
    if failed and not result.timed_out:
        # an API error ends the CLI with subtype "success" and is_error: "stopped: success" misleads
        why = final.get("subtype") if final.get("subtype") != "success" else "error"
        summary = f"claude-code stopped: {why}: {summary}"
    return Proposal(
        summary=summary,
        turns=int(final.get("num_turns") or 0),
        input_tokens=tokens_in,
        output_tokens=int(usage.get("output_tokens") or 0),
        stopped_by=stopped,
    )
