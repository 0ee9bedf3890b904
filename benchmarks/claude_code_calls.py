"""What one task of Claude Code asks of the model: calls, side calls, input tokens, max_tokens.

Runs the real ``claude`` CLI on this host against the fake Messages API (tests/support/fake_anthropic.py)
for one task that answers in one model turn, twice: as ``claude -p`` with its default tools, and
as the claude-code template runs it (seven tools, the prompt on stdin). Per call it prints
whether it had tools (a call without tools is a side call, e.g. a title), the input tokens as the
gateway estimates them (text / 4: system prompt, messages and tool definitions) and max_tokens.
Usage: python benchmarks/claude_code_calls.py  (needs the CLI: npm install -g @anthropic-ai/claude-code)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.gateway.http import estimate_input_tokens
from tests.support.claude_code import CliScript, text  # noqa: E402
from tests.support.fake_anthropic import FakeAnthropicServer  # noqa: E402

PROMPT = "What is the capital of France? Reply with the city only."
TEMPLATE_TOOLS = "Bash,Read,Edit,Write,Glob,Grep,Skill"
MODEL = "claude-sonnet-4-5"


def measure(label: str, args: list[str], stdin: str | None, extra_env: dict[str, str] | None = None) -> None:
    script = CliScript([text("Paris")])
    with FakeAnthropicServer(script) as fake, tempfile.TemporaryDirectory() as tmp:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": tmp,
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": "k",
            **{name: MODEL for name in ("ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL")},
            **(extra_env or {}),
        }
        argv = ["claude", "-p", *args, "--model", MODEL]
        done = subprocess.run(
            argv, input=stdin, cwd=tmp, env=env, capture_output=True, text=True, timeout=300
        )
        calls = [r["body"] for r in fake.requests if r["path"] == "/v1/messages"]
    if done.returncode != 0:
        raise SystemExit(f"{label}: claude exited {done.returncode}: {done.stderr[-500:]}")
    rows = [
        f"{'main' if b.get('tools') else 'side'} ({len(b.get('tools') or [])} tools): "
        f"~{estimate_input_tokens(b):,} input tokens, max_tokens {b.get('max_tokens')}"
        for b in calls
    ]
    print(f"{label}: {len(calls)} call(s); " + "; ".join(rows))


def main() -> None:
    if shutil.which("claude") is None:
        raise SystemExit("the claude CLI is not installed: npm install -g @anthropic-ai/claude-code")
    version = subprocess.run(["claude", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"Claude Code {version}, one task answered in one model turn, against the fake API")
    measure("claude -p PROMPT (default tools)", [PROMPT], None)
    quiet = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    measure("claude -p PROMPT (default tools, nonessential traffic off)", [PROMPT], None, quiet)
    template = ["--output-format", "stream-json", "--verbose", "--tools", TEMPLATE_TOOLS]
    measure("claude-code template (7 tools, prompt on stdin)", template, PROMPT, quiet)


if __name__ == "__main__":
    main()
