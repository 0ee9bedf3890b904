"""The tool-agent template as harnessopt runs it: a sandbox, the gateway, the scorer, and the
trajectory file that records every tool call (the template's own tool tests: test_templates.py)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from harnessopt import flags
from harnessopt.config import BudgetConfig, Config, RolloutConfig
from harnessopt.gateway import Gateway
from harnessopt.models import ScriptedModel
from harnessopt.protocols import Task
from harnessopt.rollout import Candidate, Runner
from harnessopt.sandbox import make_sandbox
from harnessopt.trajectory import render
from tests.test_templates import TEMPLATES, make_skill

SCRIPT = {
    "rules": [
        {
            "turn": 1,
            "tool_use": [{"name": "bash", "input": {"command": "python3 skill/scripts/lookup.py France"}}],
        },
        {
            "turn": 2,
            "last_user": "^(?P<city>\\w+)\\n\\[exit code 0\\]",
            "tool_use": [{"name": "write_file", "input": {"path": "answer-draft.txt", "content": "{city}"}}],
        },
        {"turn": 3, "tool_use": [{"name": "read_file", "input": {"path": "answer-draft.txt"}}]},
        {
            "turn": 4,
            "last_user": "^(?P<city>\\w+)$",
            "tool_use": [{"name": "finish", "input": {"answer": "{city}"}}],
        },
    ]
}


@pytest.mark.parametrize(
    "sandbox",
    [
        "local",
        pytest.param(
            "docker", marks=[pytest.mark.docker, pytest.mark.skipif(os.geteuid() != 0, reason="root")]
        ),
    ],
)
def test_tool_agent_runs_its_tools_and_the_trajectory_records_every_call(
    tmp_path: Path, sandbox: str, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "scratch" / "round-1" / "incumbent"
    skill = make_skill(tmp_path)
    (skill / "scripts").mkdir()
    (skill / "scripts" / "lookup.py").write_text(
        "import sys\nprint({'France': 'Paris'}[sys.argv[1]])\n"  # the skill's script, run by bash
    )
    shutil.copytree(skill, root / "skill")
    shutil.copytree(
        TEMPLATES / "tool-agent", root / "harness", ignore=shutil.ignore_patterns("template.yaml")
    )
    assert [f.name for f in flags.registered(root / "harness")] == ["api", "max_turns"]
    cfg = Config(rollout=RolloutConfig(sandbox=sandbox, timeout_s=60, concurrency=1))
    socket_dir = None
    if sandbox == "docker":  # the image is there (or the test skips); containers reach the gateway by socket
        request.getfixturevalue("docker_client")
        socket_dir = Path(tempfile.mkdtemp(prefix="ho-gwt-"))
    box = make_sandbox(cfg.rollout, announce=lambda _m: None)
    try:
        gateway = Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=socket_dir)
        with gateway as gw:
            runner = Runner(
                cfg, box, gw, lambda task, answer, out: float(answer == task["answer"]), tmp_path / "scratch"
            )
            [result] = runner.run(
                Candidate(root, "incumbent", "c0"), [Task("t1", "Capital of France?", "Paris", "train")], 1
            )
    finally:
        box.close()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
    assert result.passed and result.answer == "Paris", (result.stderr_tail, result.notes)
    assert result.steps == 4  # four model calls through the gateway
    tools = [e for e in result.harness_events if e["event"] == "tool"]
    assert [(e["name"], e["is_error"]) for e in tools] == [
        ("bash", False),
        ("write_file", False),
        ("read_file", False),
    ]
    assert tools[0]["result"] == "Paris\n[exit code 0]"
    start = result.harness_events[0]
    assert start["event"] == "start" and start["flags_read"] == {
        "api": "messages",
        "max_turns": "12",
    }  # flags.yaml
    assert not any("skipped" in n for n in result.notes)  # no link left in the task's output
    text = render(result, harness_commit="c0", target_model="claude-haiku-4-5")
    events = [
        json.loads(line[2:])
        for line in text.split("# Harness events", 1)[1].splitlines()
        if line.startswith("- {")
    ]
    assert [e.get("name") for e in events if e["event"] == "tool"] == ["bash", "write_file", "read_file"]
    assert "python3 skill/scripts/lookup.py France" in text and "answer-draft.txt" in text
