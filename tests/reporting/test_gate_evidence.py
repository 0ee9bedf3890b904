"""log and status show the gate's evidence: confirmations, the noise floor, the run-level budget."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from harnessopt.gate.noise_floor import NoiseFloorStore
from harnessopt.ledger import store as ledger
from harnessopt.ledger.journal import STATE_DIR
from harnessopt.reporting import log as report
from harnessopt.reporting.gate_evidence import confirmation_note
from harnessopt.workspace.core import Workspace
from tests.support.workspace import make_ws

CONFIRMED = {"on": "val", "n": 14, "gain": 0.3, "confirmed": True, "interval": [0.1, 0.5]}


def _overlay(ws: Workspace, where: Path, more: str) -> Path:
    """A round's candidate as the loop builds it: main's skill with ``more``, in a folder of its own
    (a round never writes into the workspace's tree, and main only moves over a clean one)."""
    (where / "skill").mkdir(parents=True)
    text = (ws.root / "skill" / "SKILL.md").read_text() + more
    (where / "skill" / "SKILL.md").write_text(text)
    return where


def test_status_and_log_show_confirmation_noise_floor_and_spent_alpha(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path))
    repo, head = ws.repo, ws.repo.head.commit.hexsha
    rejected = ledger.RoundManifest(
        round=1, status="rejected", reason="rejected: inside", gate={"alpha": 0.05}
    )
    ledger.record_other(repo, head, ws.root, ["skill"], rejected)
    overlay = _overlay(ws, tmp_path / "round-2", "\nbetter\n")
    accepted = ledger.RoundManifest(
        round=2, status="accepted", reason="accepted: +0.500 > dead zone 0.371 (n=14)", parent=head,
        delta=0.5, val_score=0.5, n=14, gate={"alpha": 0.05}, confirmation=CONFIRMED,
    )  # fmt: skip
    ledger.record_accepted(repo, ws.journal, head, overlay, ["skill"], accepted, new_best=True)
    NoiseFloorStore(ws.root / STATE_DIR).put(
        "env",
        {"m": 14, "epochs": 1, "flip_rate": 0.1, "paired_sd": 0.2, "detectable": 0.4, "target_effect": 0.05,
         "reach": {"tasks": 700, "epochs": None}, "measured_round": 1},
    )  # fmt: skip
    lines = "\n".join(report.status_lines(Workspace.open(ws.root)))
    assert "best, on runs that did not select it: confirmed: +0.300 on 14 val tasks" in lines
    assert "(claimed on the runs that selected it: +0.500)" in lines
    assert (
        "noise floor (incumbent against itself on 14 val tasks" in lines and "(measured in round 1)" in lines
    )
    assert "about 700 val tasks (now 14)" in lines
    assert (
        "gate decisions: 2, false-accept budget spent 0.100" in lines
        and "(nothing caps it: gate.run_alpha would)" in lines
    )
    out = io.StringIO()
    report.print_log(ws, Console(file=out, width=200))
    assert "confirmed: +0.300 on 14 val tasks" in out.getvalue()
    rows = report.log_rows(ws)
    assert rows[1]["confirmation"] == CONFIRMED and rows[0]["confirmation"] is None


def test_an_unconfirmed_accept_says_ho_best_did_not_move() -> None:
    note = confirmation_note({**CONFIRMED, "gain": -0.02, "confirmed": False, "on": "holdout", "n": 8})
    assert note == "NOT confirmed (ho/best did not move): -0.020 on 8 holdout tasks, fresh runs"
    assert confirmation_note(None) == ""


def test_the_audit_adds_up_the_confirmed_gains_along_ho_best(tmp_path: Path) -> None:
    from harnessopt.commands.audit import claimed_gain, confirmed_gain

    ws = Workspace.open(make_ws(tmp_path))
    repo = ws.repo
    for k, conf in ((1, CONFIRMED), (2, {**CONFIRMED, "gain": 0.1})):
        parent = repo.head.commit.hexsha
        overlay = _overlay(ws, tmp_path / f"round-{k}", f"\nround {k}\n")
        m = ledger.RoundManifest(round=k, status="accepted", parent=parent, delta=0.5, confirmation=conf)
        ledger.record_accepted(repo, ws.journal, parent, overlay, ["skill"], m, new_best=True)
    best = ledger.best(repo).commit
    assert claimed_gain(ws, best) == 1.0 and confirmed_gain(ws, best) == 0.4
    parent = repo.head.commit.hexsha
    overlay = _overlay(ws, tmp_path / "round-3", "\nround 3\n")
    m = ledger.RoundManifest(
        round=3, status="accepted", parent=parent, delta=0.2
    )  # recorded before confirmations
    ledger.record_accepted(repo, ws.journal, parent, overlay, ["skill"], m, new_best=True)
    assert confirmed_gain(ws, ledger.best(repo).commit) is None
