"""`touch WS/.harnessopt/STOP` ends a run at the next phase boundary, through the real CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harnessopt.ledger import store as ledger
from harnessopt.round import stop
from harnessopt.workspace.core import Workspace
from tests.support.cli import git, start_cli, wait_for_phase
from tests.support.workspace import make_ws


def _workspace(tmp_path: Path) -> Path:
    # manual optimizer: it waits for a person, so the run is reliably inside round 1's propose step
    return make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 120})


def _journal(ws: Path) -> list[dict]:
    path = ws / ".harnessopt" / "journal.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _plant(path: Path, kind: str) -> None:
    """A STOP entry of ``kind``: what a user (or a script gone wrong) may leave there."""
    if kind == "file":
        path.touch()
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_text("x")
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block until a writer comes: never
    elif kind == "unreadable":
        path.write_text("x")
        path.chmod(0)
    elif kind == "dangling-symlink":
        path.symlink_to(path.parent / "nowhere")


KINDS = ["file", "directory", "fifo", "unreadable", "dangling-symlink"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stop_entry_of_any_kind_is_a_request_and_is_removed(tmp_path: Path, kind: str) -> None:
    (tmp_path / ".harnessopt").mkdir()
    assert not stop.requested(tmp_path)
    _plant(stop.stop_path(tmp_path), kind)
    assert stop.requested(tmp_path)
    assert "found and removed" in stop.honour(tmp_path)
    assert not os.path.lexists(stop.stop_path(tmp_path)) and not stop.requested(tmp_path)


def test_a_stop_entry_that_cannot_be_removed_is_said_not_raised(tmp_path: Path) -> None:
    (tmp_path / ".harnessopt").mkdir()
    stop.stop_path(tmp_path).mkdir()
    (tmp_path / ".harnessopt" / "STOP" / "inside").mkdir()
    os.chmod(tmp_path / ".harnessopt", 0o500)  # root ignores it: then it is removed, which is fine
    try:
        line = stop.honour(tmp_path)
    finally:
        os.chmod(tmp_path / ".harnessopt", 0o700)
    assert line.startswith("stopped at your request")
    if stop.requested(tmp_path):
        assert "remove it yourself" in line


@pytest.mark.parametrize("kind", KINDS)
def test_stop_file_ends_the_run_at_the_next_phase_boundary(tmp_path: Path, kind: str) -> None:
    """A STOP of any kind, left from an earlier run and made during this one: the leftover is
    removed, the new one honoured, the run ends cleanly (a directory used to crash every run)."""
    ws = _workspace(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    (ws / ".harnessopt").mkdir(exist_ok=True)
    _plant(ws / ".harnessopt" / "STOP", kind)  # left from before this run: removed, not honoured
    proc = start_cli("run", ws, "--rounds", "3", "--sandbox", "local")
    try:
        view = Path(wait_for_phase(ws, proc, "propose")["view"])
        skill = view / "skill" / "SKILL.md"
        skill.write_text(skill.read_text().replace("Explain your answer", "Reply with only the city name"))
        _plant(ws / ".harnessopt" / "STOP", kind)  # during the person's turn: it ends, the round stops
        # The edit may land before the manual optimizer watches the view (then it would wait out its
        # wall clock): DONE ends its wait either way, as a person who has finished would.
        (view / "DONE").touch()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "removed a STOP file left from before this run" in out
    assert "stopped at your request" in out and "Traceback" not in err
    assert not os.path.lexists(ws / ".harnessopt" / "STOP")  # honoured, so removed
    # main stays on the incumbent; the partial round is recorded as failed: stopped, with its candidate
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "status", "--porcelain") == ""
    repo = Workspace.open(ws).repo
    (r1,) = ledger.past_rounds(repo)
    assert (r1.round, r1.status, r1.manifest.reason) == (1, "failed", "stopped")
    assert r1.ref == "refs/harnessopt/failed/round-1"
    assert "Reply with only the city name" in git(ws, "show", f"{r1.commit}:skill/SKILL.md")
    assert "validation" not in r1.manifest.phases  # no batch started after the STOP file was seen
    assert not any(e["round"] == 2 and e["phase"] == "start" for e in _journal(ws))
    assert ledger.next_round(repo) == 2


@pytest.mark.parametrize("explore", [0, None], ids=["one-proposal", "a-chain"])
@pytest.mark.parametrize("edited", [True, False], ids=["after-an-edit", "before-any-edit"])
def test_stop_ends_a_persons_turn_without_done(tmp_path: Path, edited: bool, explore: int | None) -> None:
    """--optimizer manual waits for a person: STOP ends that wait (it waited for DONE or its wall
    clock). The edits made so far are kept on the round's failed ref for review; before any edit
    the round is stopped, not a no-op."""
    manual = {"backend": "manual", "settle_s": 60, "wall_s": 120}  # no settling: only STOP ends the turn
    ws = make_ws(tmp_path, optimizer=manual, search={"explore": explore})  # null: a person's chain of 3
    head = git(ws, "rev-parse", "HEAD")
    proc = start_cli("run", ws, "--rounds", "3", "--sandbox", "local")
    try:
        view = Path(wait_for_phase(ws, proc, "propose")["view"])
        if edited:
            skill = view / "skill" / "SKILL.md"
            skill.write_text(
                skill.read_text().replace("Explain your answer", "Reply with only the city name")
            )
        _plant(ws / ".harnessopt" / "STOP", "file")  # no DONE: the wall clock is 120 s
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "stopped at your request" in out and not os.path.lexists(ws / ".harnessopt" / "STOP")
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "status", "--porcelain") == ""
    repo = Workspace.open(ws).repo
    (r1,) = ledger.past_rounds(repo)
    assert (r1.round, r1.status, r1.manifest.reason) == (1, "failed", "stopped")
    if edited:  # the edits so far: on the round's failed ref
        assert "Reply with only the city name" in git(ws, "show", f"{r1.commit}:skill/SKILL.md")
    assert explore == 0 or "this run chains 3 steps" in out
