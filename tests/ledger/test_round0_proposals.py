"""ledger.round0: the round-0 proposal and a person's decision on it, as commits on main."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.ledger import round0 as proposals
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import make_ws


def _propose(ws: Workspace, text: str) -> str:
    (ws.root / "proposals").mkdir(exist_ok=True)
    (ws.root / "proposals" / "round-0.md").write_text(text)
    return proposals.record_proposal(
        ws.repo, text, ws.root / "trajectories", {"round": 0, "status": "proposal"}
    )


def test_the_commit_title_says_round_0_proposal_once(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path, mode="harness"))
    sha = _propose(ws, "# Round 0 proposal: Add a retry on empty answers\n\nwhy\n")
    subject = git(ws.root, "log", "-1", "--format=%s", sha)
    assert subject == "harnessopt round 0: proposal: Add a retry on empty answers"
    assert proposals._title("# Plan\n") == "Plan" and proposals._title("Round-0 proposal - x") == "x"


def test_two_diagnoses_and_a_second_decision(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path, mode="harness"))
    _propose(ws, "# First plan\n")
    proposals.record_decision(ws.repo, False, "too broad", by="tester")
    _propose(ws, "# Second plan\n")
    line = proposals.spend_line(ws.repo)
    assert line is not None and line.startswith("round 0 (diagnoses, 2):")
    proposals.record_decision(ws.repo, True, "", by="tester")
    run = f"harnessopt run {ws.root} -c mode=harness"
    with pytest.raises(
        UserError, match="was already approved; `harnessopt run .* -c mode=harness` continues"
    ):
        proposals.record_decision(ws.repo, True, "", by="tester", run=run)
