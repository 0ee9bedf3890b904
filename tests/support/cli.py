"""Helpers for tests that drive the real CLI: a small example skill, tasks, and a fake upstream script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REAL_KEY = "sk-ant-test-REAL-KEY-never-inside"

SKILL_MD = """---
name: echo-word
description: Repeats the word the user asks for. Use when asked to say a word.
---

# Echo

Respond politely to the user.
"""

WORDS = {
    "train": ["apple", "river", "stone", "cloud", "maple", "tiger"],
    "val": ["amber", "cedar", "delta", "ember", "flint", "grove", "haven", "ivory"],
    "test": ["jade", "kelp", "lotus", "mango"],
}

ROUND1_EDIT = "Reply with the word only."
ROUND2_EDIT = "End every reply with a period."


def write_example(root: Path) -> tuple[Path, Path]:
    skill = root / "echo-word"  # the spec: a skill's folder is named as the skill
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    tasks = root / "tasks.jsonl"
    lines = [
        json.dumps({"id": f"{split}-{w}", "input": f"Say the word: {w}", "answer": w, "split": split})
        for split, words in WORDS.items()
        for w in words
    ]
    tasks.write_text("\n".join(lines) + "\n")
    return skill, tasks


def _edit(round_no: int, old: str, new: str) -> list[dict[str, Any]]:
    first = rf"# Round {round_no}:"
    return [
        {
            "first_user": first,
            "turn": 1,
            "tool_use": [
                {"name": "bash", "input": {"command": "grep -h '^feedback:' trajectories/*.md | head -3"}}
            ],
        },
        {
            "first_user": first,
            "turn": 2,
            "tool_use": [
                {
                    "name": "str_replace_based_edit_tool",
                    "input": {
                        "command": "str_replace",
                        "path": "skill/SKILL.md",
                        "old_str": old,
                        "new_str": new,
                    },
                }
            ],
        },
        {"first_user": first, "turn": 3, "reply": f"Edit of round {round_no}\n\nShared pattern."},
    ]


def upstream_script() -> dict[str, Any]:
    """The fake upstream: round 1's edit fixes every task, round 2's breaks every task.

    The upstream cannot see roles (the gateway forwards plain requests), so the optimizer's rules
    match its brief ("# Round K:") and the target's rules match the task text.
    """
    say = r"Say\s+the\s+word:\s+(?P<w>\w+)"  # whitespace does not change the task, as for a real model
    return {
        "rules": [
            *_edit(1, "Respond politely to the user.", ROUND1_EDIT),
            *_edit(2, ROUND1_EDIT, f"{ROUND1_EDIT}\n{ROUND2_EDIT}"),
            {"first_user": r"# Round \d+:", "reply": "No change\n\nNothing shared."},
            {"system": "period", "last_user": say, "reply": "{w}."},
            {"system": "word only", "last_user": say, "reply": "{w}"},
            {"last_user": say, "reply": "Sure! The word you asked for is {w}."},
        ],
        "default": "?",
    }


def cli(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``python -m harnessopt ARGS`` as a user would, with a controlled environment."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "HO_"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "harnessopt", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def start_cli(*args: str | Path, tmpdir: Path | None = None) -> subprocess.Popen:
    """``python -m harnessopt ARGS`` started in the background (a run to watch, stop or query);
    its temporary folders in ``tmpdir`` when given."""
    return subprocess.Popen(
        [sys.executable, "-m", "harnessopt", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None,
    )


def wait_for_phase(ws: Path, proc: subprocess.Popen, phase: str, timeout: float = 300) -> dict[str, Any]:
    """The first journal entry of ``phase`` of the run ``proc``, waiting up to ``timeout`` seconds."""
    import time

    path = ws / ".harnessopt" / "journal.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        entries = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if found := next((e for e in entries if e.get("phase") == phase), None):
            return found
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
