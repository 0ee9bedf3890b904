"""Leakage check: unit rules, and a round whose optimizer copies a gold answer into the skill."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harnessopt.config import ChecksConfig
from harnessopt.ledger import store as ledger
from harnessopt.protocols import Task
from harnessopt.round import driver
from harnessopt.round.leakage import check_candidate, screen
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import MOTTO, leaky_workspace

TEMPLATE = "Read the following question carefully and answer with one word only please:"


def _tasks() -> list[Task]:
    return [
        Task("harbour-motto", "Recite the harbour office motto.", MOTTO, "train"),
        Task("france", "What is the capital of France?", "Paris", "val"),
        Task("q1", f"{TEMPLATE} colour of the sky?", "blue", "train"),
        Task("q2", f"{TEMPLATE} colour of grass?", "green", "train"),
        Task("q3", f"{TEMPLATE} colour of snow?", "white", "val"),
    ]


def _pair(tmp_path: Path, added: str) -> tuple[Path, Path]:
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        (root / "skill").mkdir(parents=True)
        (root / "harness").mkdir()
        (root / "harness" / "run.py").write_text("print('hi')\n")
    base = "---\nname: s\ndescription: d\n---\n\nAnswer briefly.\n"
    (old / "skill" / "SKILL.md").write_text(base)
    (new / "skill" / "SKILL.md").write_text(base + added)
    return old, new


def _check(tmp_path: Path, added: str, **cfg: Any):
    old, new = _pair(tmp_path, added)
    return check_candidate(_tasks(), ChecksConfig(**cfg), old, new, ("skill", "harness"))


def test_a_short_gold_answer_alone_is_not_leakage(tmp_path: Path) -> None:
    report = _check(tmp_path, "Paris, Tokyo and Rome are well-known capitals.\n")
    assert report.findings == [] and report.added_lines == 1


def test_a_copied_long_gold_answer_is_leakage(tmp_path: Path) -> None:
    report = _check(tmp_path, "Tip: every ship that enters the HARBOUR must signal twice before sunset!\n")
    [f] = report.findings
    assert (f.task_id, f.kind, f.path, f.line) == ("harbour-motto", "answer", "skill/SKILL.md", 7)
    assert "leakage" in report.summary() and "harbour-motto" in report.summary()


def test_a_task_id_is_leakage_on_token_boundaries_only(tmp_path: Path) -> None:
    [f] = _check(tmp_path, "For FRANCE say the obvious.\n").findings
    assert (f.task_id, f.kind, f.split) == ("france", "id", "val")
    assert _check(tmp_path / "b", "Frances and franceville are not ids.\n").findings == []
    # q1 is shorter than id_min_chars: it occurs by chance and is not looked for
    assert _check(tmp_path / "c", "Step q1 then q2.\n").findings == []
    assert _check(tmp_path / "d", "Step q1 then q2.\n", id_min_chars=2)


def test_the_task_sets_shared_template_is_not_any_tasks_content(tmp_path: Path) -> None:
    assert _check(tmp_path, f"Tasks say: {TEMPLATE}\n").findings == []


def test_only_added_lines_count_and_n_is_configurable(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, "")
    (old / "skill" / "SKILL.md").write_text((old / "skill" / "SKILL.md").read_text() + MOTTO + "\n")
    (new / "skill" / "SKILL.md").write_text((old / "skill" / "SKILL.md").read_text() + "More advice.\n")
    assert check_candidate(_tasks(), ChecksConfig(), old, new, ("skill",)).findings == []
    # a harness file is checked like the skill; a shorter n-gram catches a part of the motto
    (new / "harness" / "run.py").write_text("print('hi')\nPROMPT = 'ship that enters the harbour must'\n")
    got = check_candidate(_tasks(), ChecksConfig(ngram_words=5, ngram_chars=20), old, new, ("harness",))
    assert [(f.path, f.kind) for f in got.findings] == [("harness/run.py", "answer")]


def test_screen_warn_says_it_and_goes_on_off_looks_at_nothing(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, MOTTO + "\n")
    said: list[str] = []
    rec, reason = screen(3, _tasks(), ChecksConfig(leakage="warn"), old, new, ("skill",), said.append)
    assert (
        reason is None and rec is not None and rec["action"] == "warn" and rec["tasks"] == ["harbour-motto"]
    )
    assert said and said[0].startswith("round 3: warning: leakage")
    assert screen(3, _tasks(), ChecksConfig(leakage="off"), old, new, ("skill",), said.append) == (None, None)
    rec, reason = screen(3, _tasks(), ChecksConfig(), old, new, ("skill",), said.append)
    assert (
        reason is not None and reason.startswith("leakage:") and rec is not None and rec["action"] == "reject"
    )


# --------------------------------------------------------------------------- end to end


def _phases(ws: Path) -> list[str]:
    lines = (ws / ".harnessopt" / "journal.jsonl").read_text().splitlines()
    return [json.loads(x).get("phase") for x in lines]


def test_a_round_that_copies_a_gold_answer_is_rejected_before_any_val_run(tmp_path: Path) -> None:
    leak = f"Reply with only the city name. Note: {MOTTO.lower()}."
    ws = leaky_workspace(tmp_path, leak)
    head = git(ws, "rev-parse", "HEAD")
    said: list[str] = []
    [result] = driver.run(Workspace.open(ws), 1, said.append)
    assert result.status == "rejected" and result.reason.startswith("leakage:"), result.reason
    assert "harbour-motto" in result.reason and "gold answer" in result.reason
    rec = ledger.find(Workspace.open(ws).repo, 1)
    assert rec.manifest.checks.leakage.tasks == ["harbour-motto"]
    assert rec.manifest.checks.leakage.findings[0]["kind"] == "answer"
    phases = _phases(ws)
    assert "check" in phases and "smoke" not in phases and "incumbent_val" not in phases
    assert git(ws, "rev-parse", "HEAD") == head  # the incumbent stays
    assert git(ws, "rev-parse", "refs/harnessopt/rejected/round-1")
    log = subprocess.run([sys.executable, "-m", "harnessopt", "log", str(ws)], capture_output=True, text=True)
    assert "leakage" in log.stdout, log.stdout


def test_a_warned_leak_is_shown_in_the_log(tmp_path: Path) -> None:
    """checks.leakage: warn lets the round through; `harnessopt log` still says what it copied."""
    ws = leaky_workspace(tmp_path, "unused", small=True)
    opened = Workspace.open(ws)
    parent = git(ws, "rev-parse", "HEAD")
    overlay = tmp_path / "overlay"
    (overlay / "skill").mkdir(parents=True)
    (overlay / "skill" / "SKILL.md").write_text((ws / "skill" / "SKILL.md").read_text() + MOTTO + "\n")
    leak = {"action": "warn", "added_lines": 1, "tasks": ["harbour-motto"], "findings": []}
    m = ledger.RoundManifest(
        round=1, status="rejected", reason="rejected: +0.000 inside dead zone", checks={"leakage": leak}
    )
    ledger.record_other(opened.repo, parent, overlay, ["skill"], m)
    log = subprocess.run([sys.executable, "-m", "harnessopt", "log", str(ws)], capture_output=True, text=True)
    assert "leakage warning: copies task(s) harbour-motto" in " ".join(log.stdout.split()), log.stdout
    rows = json.loads(
        subprocess.run(
            [sys.executable, "-m", "harnessopt", "log", str(ws), "--json"], capture_output=True, text=True
        ).stdout
    )
    assert rows[0]["checks"]["leakage"]["action"] == "warn"
