"""Codex against Claude Code on the same tasks: per-task time, model calls and input tokens.

Runs the ``codex`` and ``claude-code`` templates' run.py on this host (no container: this
measures the agents, not Docker) through the real gateway, whose upstream is a fake model that
answers every task the same way for both agents: first a tool call that reads the skill
(Codex: ``exec_command cat .../SKILL.md``; Claude Code: its ``Skill`` tool), then the answer.
Codex speaks the Responses API to the gateway, Claude Code the Messages API. Per agent it prints
the median and max wall time of a task, the calls per task, the input tokens per call (the
gateway's chars/4 estimate of the canonical body: instructions, messages, tool definitions, the
same estimator for both) and whether the skill check said loaded.
Usage: python benchmarks/agent_cli_calls.py [--tasks N]  (needs both CLIs on PATH)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.config import BudgetConfig  # noqa: E402
from harnessopt.gateway.http import estimate_input_tokens  # noqa: E402
from harnessopt.gateway.server import Gateway  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "claude-sonnet-4-5"
SKILL = (
    "---\nname: geo-facts\ndescription: Answers questions about capitals.\n---\nReply with the city only.\n"
)
CITIES = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"), ("Peru", "Lima")]


class SameAnswers:
    """A Model: read the skill with the agent's own tool, then answer the city."""

    def create(self, request: dict[str, Any], role: str, *, forward: Any = None) -> dict[str, Any]:
        messages = request.get("messages") or []
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        tools = {t.get("name") for t in request.get("tools") or []}
        if not tools:  # a side call (Claude Code's title)
            content: list[dict[str, Any]] = [{"type": "text", "text": "Capital question"}]
        elif turns == 0:
            call: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{time.time_ns()}"}
            if "exec_command" in tools:
                call |= {
                    "name": "exec_command",
                    "input": {"cmd": 'cat "$CODEX_HOME/skills/geo-facts/SKILL.md"'},
                }
            else:
                call |= {"name": "Skill", "input": {"skill": "geo-facts"}}
            content = [call]
        else:
            said = json.dumps(messages)
            city = next((c for country, c in CITIES if country in said), "?")
            content = [{"type": "text", "text": city}]
        stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
        return {
            "id": f"msg_{time.time_ns()}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": estimate_input_tokens(request), "output_tokens": 5},
        }


def run_task(gw: Gateway, template: str, country: str, tmp: Path) -> tuple[float, list[int], bool, int]:
    """(wall seconds, input tokens per call, skill loaded, exit code) of one task."""
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / "skill").mkdir()
    (work / "skill" / "SKILL.md").write_text(SKILL)
    (work / "task.json").write_text(
        json.dumps({"id": country, "input": f"What is the capital of {country}?"})
    )
    lease = gw.lease("target", 1, country)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HARNESSOPT_TARGET_MODEL": MODEL,
        "ANTHROPIC_BASE_URL": lease.base_url,
        "ANTHROPIC_API_KEY": lease.token,
        "OPENAI_BASE_URL": lease.base_url + "/v1",
        "OPENAI_API_KEY": lease.token,
    }
    argv = [sys.executable, str(ROOT / "workspace_templates" / template / "run.py")]
    argv += ["--task", "task.json", "--skill", "skill", "--out", "out"]
    t0 = time.monotonic()
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    exchanges = gw.release(lease.token)
    events = [json.loads(x) for x in (work / "out" / "trajectory.jsonl").read_text().splitlines()]
    check: dict[str, Any] = next((e for e in events if e["event"] == "skill_check"), {})
    return wall, [e.input_tokens for e in exchanges], bool(check.get("loaded")), done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3, help="tasks per agent (at most 5)")
    args = parser.parse_args()
    for cli in ("codex", "claude"):
        if shutil.which(cli) is None:
            raise SystemExit(f"the {cli} CLI is not installed")
    versions = [
        subprocess.run([c, "--version"], capture_output=True, text=True).stdout.strip()
        for c in ("codex", "claude")
    ]
    print(
        f"{versions[0]} and Claude Code {versions[1]}; {args.tasks} tasks each, answered after reading the skill"
    )
    with Gateway(SameAnswers(), BudgetConfig()) as gw, tempfile.TemporaryDirectory() as tmp:  # type: ignore[arg-type]
        for template in ("codex", "claude-code"):
            rows = [run_task(gw, template, country, Path(tmp)) for country, _ in CITIES[: args.tasks]]
            walls = [r[0] for r in rows]
            calls = [len(r[1]) for r in rows]
            tokens = [t for r in rows for t in r[1]]
            if not tokens:  # the CLI made no call through the gateway: say why instead of a ValueError
                raise SystemExit(
                    f"{template}: no call reached the gateway; exit codes {[r[3] for r in rows]}"
                )
            print(
                f"{template}: wall per task median {statistics.median(walls):.2f} s, max {max(walls):.2f} s; "
                f"calls per task {calls}; input tokens per call ~{min(tokens):,}-{max(tokens):,}; "
                f"skill loaded {sum(r[2] for r in rows)}/{len(rows)}; exit codes {[r[3] for r in rows]}"
            )


if __name__ == "__main__":
    main()
