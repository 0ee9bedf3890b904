"""A trigger round end to end with the tool-agent template: the skill offered in a catalogue
among distractors, a fake upstream that loads a skill when its description fits the query, the
optimizer's description edit gated and committed, its body edit discarded field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harnessopt.ledger import store as ledger
from harnessopt.reporting.data import report_data
from harnessopt.workspace.core import Workspace
from tests.support.claude_code import claude_code_image
from tests.support.cli import cli, git
from tests.support.trigger_run import BODY_NEW, BODY_OLD, run_trigger
from tests.support.trigger_ws import NEW_DESCRIPTION


def test_a_trigger_round_widens_recall_keeps_precision_and_discards_the_body_edit(tmp_path: Path) -> None:
    ws, run, fit, audit = run_trigger(
        tmp_path, "tool-agent", "--sandbox", "local", "--batch-size", "8", "-c", "optimizer.unsafe_host=true",
        audit=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    one, two = ledger.past_rounds(Workspace.open(ws).repo)
    assert one.status == "accepted", one.manifest.reason
    assert one.manifest.changed == ["skill/SKILL.md"]
    assert "skill/SKILL.md: body" in one.manifest.violations  # the body edit: a discarded write
    committed = git(ws, "show", f"{one.commit}:skill/SKILL.md")
    assert NEW_DESCRIPTION in committed and BODY_OLD in committed and BODY_NEW not in committed
    t = one.manifest.trigger
    assert t is not None
    assert t.incumbent.recall is not None and t.candidate.recall is not None
    assert t.candidate.recall > t.incumbent.recall  # should-trigger queries now load the skill
    assert t.candidate.precision == t.incumbent.precision == 1.0  # near misses still go elsewhere
    assert t.description_chars > t.incumbent_description_chars
    assert two.status == "noop" and "skill/SKILL.md: body" in two.manifest.violations
    # the model saw the distractors and picked them for near misses (the catalogue reached it)
    assert {"yaml-tools", "chart-maker", "pdf-tools"} <= {p for _, p in fit.decisions if p}
    rows = json.loads(cli("log", ws, "--json").stdout)
    assert rows[0]["trigger"]["candidate"]["recall"] == t.candidate.recall
    table = cli("log", ws).stdout
    assert f"recall {t.incumbent.recall:.2f}->{t.candidate.recall:.2f}" in " ".join(table.split())
    report = cli("report", ws, "--out", tmp_path / "report")
    assert report.returncode == 0, report.stderr
    assert 'id="plot-triggering"' in (tmp_path / "report" / "report.html").read_text()
    data = report_data(Workspace.open(ws))
    (rule,) = data["adoption"]["rules"]  # the description, seen in every later run's catalogue
    assert rule["text"] == NEW_DESCRIPTION and rule["trajectories"] > 0
    assert rule["saw"] == rule["trajectories"] and rule["showed"] is None
    flags = {f["name"]: f["values"] for f in data["adoption"]["flags"]}
    assert set(flags["skill_loading"]) == {"catalogue"} and set(flags["max_turns"]) == {"1"}  # as run
    failures = {k for r in data["taxonomy"]["rounds"] for k in r["failures"]}
    assert failures and failures <= {"trigger missed", "false trigger"}  # not format errors
    # held out: the test split's trigger tasks, precision and recall of round 0 and of ho/best
    assert audit.returncode == 0, audit.stderr[-2000:]
    assert "triggering of round-0 on test: precision -, recall 0.00" in audit.stdout
    assert "triggering of best on test: precision 1.00, recall 1.00" in audit.stdout


@pytest.mark.docker
@pytest.mark.claude_code
@pytest.mark.timeout(1800)
def test_a_trigger_round_with_the_real_claude_code_cli(tmp_path: Path, docker_client: Any) -> None:
    """The same round with the skill and the distractors installed as project skills of the real
    CLI: the fake upstream reads the skills the CLI offers its Skill tool and loads by fit."""
    image = claude_code_image(docker_client)
    ws, run, fit, _ = run_trigger(
        tmp_path, "claude-code", "--sandbox", "docker",
        "-c", f"rollout.image={image}", "-c", "rollout.memory_mb=1024", "-c", "rollout.pids=256",
        "-c", "gate.epochs=1", "-c", "gate.confirm=none", "-c", "gate.confirm_flips=false",
        "--batch-size", "4", rounds=1, small=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (one,) = ledger.past_rounds(Workspace.open(ws).repo)
    assert one.status == "accepted", one.manifest.reason
    assert "skill/SKILL.md: body" in one.manifest.violations
    t = one.manifest.trigger
    assert t is not None and t.candidate.recall is not None and t.incumbent.recall is not None
    assert t.candidate.recall == 1.0 and t.incumbent.recall == 0.0  # 4 of 4 should-trigger, was 0
    assert t.candidate.precision == 1.0 and t.candidate.fp == t.incumbent.fp == 0  # near misses kept
    assert {"yaml-tools", "chart-maker"} <= {p for _, p in fit.decisions if p}


def test_a_round_of_objective_both_gates_each_family_at_half_alpha(tmp_path: Path) -> None:
    """Task tasks beside the trigger tasks, the skill offered as a catalogue in task runs too: the
    description edit raises triggering and keeps the task score, so it is accepted on triggering
    at alpha/2, with the pass rate of task runs by whether the skill loaded in the manifest. (The
    small workspace: 4 of its 6 val trigger queries missed before; on the full one, +0.400 stays
    inside the dead zone at alpha/2, the price of splitting the round's alpha, docs/gate.md.)"""
    queries = [
        "Convert my CSV to JSON please",
        "Convert this JSON file to YAML",
        "Export rows of this CSV file",
    ]
    extra = [
        {"id": f"job-{i:02d}", "input": f"{q} (job {i})", "answer": "done", "split": split}
        for i, (q, split) in enumerate((queries[i % 3], s) for i, s in enumerate(["train"] * 3 + ["val"] * 6))
    ]
    ws, run, _fit, _ = run_trigger(
        tmp_path, "tool-agent", "--sandbox", "local", "--batch-size", "8", "-c", "optimizer.unsafe_host=true",
        rounds=1, task_tasks=extra, flags={"skill_loading": "catalogue"}, small=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (one,) = ledger.past_rounds(Workspace.open(ws).repo)
    objectives = one.manifest.gate.objectives
    assert set(objectives) == {"task", "trigger"}, one.manifest.gate
    assert objectives["trigger"]["accept"] and one.status == "accepted", one.manifest.reason
    assert abs(objectives["task"]["alpha"] - 0.025) < 1e-9 and abs(one.manifest.gate.alpha - 0.05) < 1e-9
    t = one.manifest.trigger
    assert t is not None and t.objective == "both" and t.runs_loaded > 0 and t.pass_when_loaded == 1.0
