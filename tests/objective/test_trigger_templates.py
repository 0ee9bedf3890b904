"""The chat and tool-agent templates in a trigger run: a catalogue of the skill and the distractors
(names and descriptions, no body) and a load_skill tool, against the description-fit upstream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harnessopt.objective.trigger import read_distractors
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.templates import TEMPLATES
from tests.support.trigger_upstream import DescriptionFit
from tests.support.trigger_ws import write_trigger_inputs


def _run(tmp: Path, template: str, query: str, env: dict[str, str], trigger: bool = True) -> Path:
    skill, _, distractors = write_trigger_inputs(tmp)
    meta = {"trigger": {"distractors": read_distractors(distractors)}} if trigger else {}
    (tmp / "task.json").write_text(json.dumps({"id": "t", "input": query, "metadata": meta}))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "HO_FLAG_"))}
    argv = [sys.executable, str(TEMPLATES / template / "run.py"), "--task", str(tmp / "task.json")]
    proc = subprocess.run(
        [*argv, "--skill", str(skill), "--out", str(tmp / "out")],
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return tmp / "out"


@pytest.mark.parametrize("template", ["chat", "tool-agent"])
def test_a_trigger_run_offers_a_catalogue_and_stops_at_the_decision(tmp_path: Path, template: str) -> None:
    fit = DescriptionFit()
    with FakeAnthropicServer(fit) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "k", "HARNESSOPT_TARGET_MODEL": "m"}
        _run(tmp_path / "a", template, "Convert my CSV to JSON please", env)
        _run(tmp_path / "b", template, "Convert this JSON file to YAML", env)
        requests = [r["body"] for r in fake.requests]
    assert fit.decisions == [
        ("Convert my CSV to JSON please", "csv-to-json"),
        ("Convert this JSON file to YAML", "yaml-tools"),
    ]
    assert len(requests) == 2  # one request each: a trigger run ends at its decision
    system = requests[0]["system"]
    assert "- csv-to-json: Converts CSV files to JSON." in system and "- yaml-tools:" in system
    assert "Read the rows" not in system  # no skill body before it is loaded
    assert "load_skill" in [t["name"] for t in requests[0]["tools"]]


def test_the_chat_template_answers_after_a_load_in_catalogue_mode(tmp_path: Path) -> None:
    fit = DescriptionFit(answer="[]")
    with FakeAnthropicServer(fit) as fake:
        env = {
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": "k",
            "HARNESSOPT_TARGET_MODEL": "m",
            "HO_FLAG_SKILL_LOADING": "catalogue",
        }
        out = _run(tmp_path, "chat", "Convert my CSV to JSON please", env, trigger=False)
        second = fake.requests[-1]["body"]
    assert len(fake.requests) == 2 and (out / "answer.txt").read_text() == "[]"
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and "Read the rows" in result["content"]  # the body, loaded
    events = [json.loads(x) for x in (out / "trajectory.jsonl").read_text().splitlines()]
    assert any(e["event"] == "skill_loaded" and e["name"] == "csv-to-json" for e in events)


@pytest.mark.parametrize("template", ["chat", "tool-agent"])
def test_a_trigger_run_reports_the_flags_it_used(tmp_path: Path, template: str) -> None:
    with FakeAnthropicServer(DescriptionFit()) as fake:
        env = {
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": "k",
            "HARNESSOPT_TARGET_MODEL": "m",
            "HO_FLAG_SKILL_LOADING": "system",  # configured, and overridden by the trigger run
            "HO_FLAG_MAX_TURNS": "12",
        }
        out = _run(tmp_path, template, "Convert my CSV to JSON please", env)
    events = [json.loads(x) for x in (out / "trajectory.jsonl").read_text().splitlines()]
    read = next(e["flags_read"] for e in events if "flags_read" in e)
    assert read["skill_loading"] == "catalogue"
    if template == "tool-agent":
        assert read["max_turns"] == "1"  # the trigger run's turns (HO_FLAG_TRIGGER_TURNS, default 1)
