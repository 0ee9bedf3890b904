"""Optimizer preset ``codex``: the Codex CLI as a ``command`` optimizer that edits the view.

Codex runs non-interactively (``codex exec --json``, the brief on stdin) in the optimizer's
container, cwd the view, through the optimizer's gateway lease: a config.toml written to its
HOME (a tmpfs, never the view) names the gateway as its one model provider (``base_url`` the
bridged ``ANTHROPIC_BASE_URL`` plus ``/v1``, ``wire_api = "responses"``, the lease's token from
``ANTHROPIC_API_KEY``) and ``optimizer.model`` as its model. Its own sandbox and approvals are
off (``--dangerously-bypass-approvals-and-sandbox``: the container is the boundary, and the
copy-back whitelist decides what of its edits counts), and so are its features that need
OpenAI's servers (web search, multi-agent, goals; the gateway refuses hosted tools). Its JSON
event stream is the round's transcript: the last agent message is the summary, ``turn.completed``
gives the tokens, ``turn.failed`` or an ``error`` event says why a round stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.config import OptimizerConfig
from harnessopt.protocols import AgentResult, GatewayLease, Proposal, Shell

MISSING_HINT = (  # in the Docker sandbox; on this host (--sandbox local)
    "build the image with `harnessopt sandbox build --with codex` and set rollout.image: harnessopt-sandbox:codex",
    "install the CLI on this host: npm install -g @openai/codex",
)
# Codex flags shared with the codex template: no hosted tools, no sub-agents, no goals.
CODEX_FLAGS = ["--disable", "multi_agent", "--disable", "goals", "-c", 'web_search="disabled"']
_SCRIPT = """set -e
mkdir -p "$HOME/.codex"
cat > "$HOME/.codex/config.toml" <<EOF
model = "$1"
model_provider = "harnessopt"
[model_providers.harnessopt]
name = "harnessopt gateway"
base_url = "$ANTHROPIC_BASE_URL/v1"
env_key = "ANTHROPIC_API_KEY"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1
EOF
shift
exec codex exec "$@"
"""


def codex_argv(model: str) -> list[str]:
    """``sh -c`` writing the provider config, then ``codex exec --json`` reading the brief from stdin."""
    flags = ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", *CODEX_FLAGS]
    return ["sh", "-c", _SCRIPT, "codex-optimizer", model, *flags, "-m", model, "-"]


def make(
    cfg: OptimizerConfig,
    *,
    lease_factory: Callable[[int], GatewayLease],
    shell_factory: Callable[[Path], Shell],
    transcript_dir: Path | None,
) -> Any:
    """The ``command`` optimizer running Codex; ``optimizer.command`` must be unset."""
    from harnessopt.optimizer.command import PRESETS, preset

    return preset(
        "codex",
        codex_argv(cfg.model),
        cfg.command,
        cfg.wall_s,
        lease_factory=lease_factory,
        shell_factory=shell_factory,
        transcript_dir=transcript_dir,
        report=proposal,
        missing_hint=MISSING_HINT,
        executable=PRESETS["codex"],
    )


def proposal(result: AgentResult) -> Proposal:
    """The Proposal a Codex run amounts to, from its JSON events."""
    events = []
    for line in result.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
    messages = [str(i.get("text", "")) for i in items if i.get("type") == "agent_message"]
    usage: dict[str, Any] = {}
    for e in events:
        if e.get("type") == "turn.completed":
            usage = e.get("usage") or {}
    errors = [
        str((e.get("error") or {}).get("message") or e.get("message") or "")
        for e in events
        if e.get("type") in ("turn.failed", "error")
    ]
    tokens_in, tokens_out = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    turns = sum(1 for i in items if i.get("type") in ("command_execution", "agent_message", "file_change"))
    if result.timed_out:
        return Proposal(
            summary=(messages or ["codex timed out"])[-1],
            turns=turns,
            stopped_by="wall_clock",
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )
    if errors or result.exit_code not in (0, None) or not messages:
        # each error once: Codex reports a refused call as an error event and again as turn.failed (QA)
        detail = "; ".join(dict.fromkeys(e for e in errors if e)) or result.stderr.strip()[-500:]
        detail = detail or result.note or "no agent message"
        return Proposal(
            summary=f"codex stopped (exit {result.exit_code}): {detail}",
            turns=turns,
            stopped_by="error",
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )
    summary = messages[-1].strip() or "(codex wrote no summary)"
    return Proposal(
        summary=summary, turns=turns, stopped_by="done", input_tokens=tokens_in, output_tokens=tokens_out
    )
