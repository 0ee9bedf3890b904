"""The projection before any round is measured: what round 1 runs follows from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.reporting.projection import project
from harnessopt.workspace.core import Workspace
from tests.support.workspace import make_ws

UNBANKED = {"incumbent_epochs": 1, "second_look": 2, "first_look_share": 0.2}  # set explicitly: these
# tests were written for a gate without a bank (the default banks since issue 21)


def _runs(ws: Workspace, memorised: str = "reject", **gate: object) -> list[float]:
    checks = ws.cfg.checks.model_copy(update={"memorised": memorised})
    cfg = ws.cfg.model_copy(
        update={"gate": ws.cfg.gate.model_copy(update={**UNBANKED, **gate}), "checks": checks}
    )
    return [r.target_runs for r in project(ws, 2, cfg).rounds]


def test_round_one_counts_the_aa_test_and_later_rounds_the_cached_incumbent(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path))
    n_val = len(ws.tasks("val"))
    first, second = _runs(ws)
    assert first - second == pytest.approx(2 * n_val)  # the incumbent twice (A/A), then cached
    banked_first, banked_second = _runs(ws, incumbent_epochs=5)
    assert banked_first - banked_second == pytest.approx(
        5 * n_val
    )  # five runs a task; the A/A test reads two of them
    assert banked_second < second  # the bank pays the incumbent's side of the reruns


def test_reruns_and_the_confirmation_follow_the_gate_settings(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path))
    n_val = len(ws.tasks("val"))
    base = _runs(ws)[1]
    assert _runs(ws, confirm="none")[1] < base  # no confirmation of an accept
    assert _runs(ws, memorised="off")[1] < base  # no memorised-answer check of an accept
    no_reruns = _runs(ws, memorised="off", confirm_flips=False, confirm="none")[1]
    # the train batch, val once, and the incumbent's probe (its smoke rerun made ahead)
    assert no_reruns == pytest.approx(min(ws.cfg.rollout.batch_size, len(ws.tasks("train"))) + n_val + 1)
    assert _runs(ws, "off", confirm_flips=False, confirm="none", smoke=0)[1] == pytest.approx(no_reruns - 1)
    assert _runs(ws, second_look=4)[1] > base


def test_harness_mode_projects_round_zero_until_a_proposal_is_approved(tmp_path: Path) -> None:
    from harnessopt.ledger import round0 as proposals

    ws = Workspace.open(make_ws(tmp_path, mode="harness"))
    p = project(ws, 2)
    n_train = len(ws.tasks("train"))
    assert p.round0 is not None and p.round0.target_runs == n_train  # the whole train split
    assert p.total().calls == pytest.approx(p.round0.calls + sum(r.calls for r in p.rounds))
    assert "round 0 (the diagnosis) first" in p.line() and p.table()[1].lstrip().startswith("0 ")
    assert project(Workspace.open(make_ws(tmp_path / "skill")), 2).round0 is None  # skill mode: none
    (ws.root / "proposals").mkdir()
    (ws.root / "proposals" / "round-0.md").write_text("# Plan\n")
    proposals.record_proposal(ws.repo, "# Plan\n", ws.root / "trajectories", {})
    proposals.record_decision(ws.repo, True, "", by="tester")
    assert project(ws, 2).round0 is None  # approved: the rounds run, no diagnosis
