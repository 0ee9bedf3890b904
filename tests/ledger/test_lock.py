"""One command that changes a workspace at a time; a dead holder's lock is taken over."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.ledger.lock import workspace_lock
from harnessopt.optimizer.manual import DONE_NAME
from tests.support.cli import cli, git, start_cli, wait_for_phase
from tests.support.workspace import make_ws


def test_second_holder_is_refused_and_named(tmp_path: Path) -> None:
    said: list[str] = []
    with (
        workspace_lock(tmp_path, "run", said.append),
        pytest.raises(UserError, match=r"in use by 'harnessopt run' \(pid \d+"),
        workspace_lock(tmp_path, "audit", said.append),
    ):
        pass
    with workspace_lock(tmp_path, "audit", said.append):  # released on exit
        pass
    assert said == []


def test_a_dead_holder_is_taken_over_with_a_message(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from harnessopt.ledger.lock import workspace_lock\n"
         f"with workspace_lock(__import__('pathlib').Path({str(tmp_path)!r}), 'run', print):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(UserError, match=f"pid {holder.pid}"), workspace_lock(tmp_path, "rollback", print):
        pass
    holder.kill()
    holder.wait()
    said: list[str] = []
    with workspace_lock(tmp_path, "rollback", said.append):
        pass
    assert len(said) == 1 and f"pid {holder.pid}" in said[0] and "no longer running" in said[0]


def test_a_second_run_on_a_busy_workspace_is_refused_by_the_cli(tmp_path: Path) -> None:
    ws = make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 30, "wall_s": 60})
    first = subprocess.Popen(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--sandbox", "local"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        lock = ws / ".harnessopt" / "lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        holder = json.loads(lock.read_text())
        assert holder["pid"] == first.pid and holder["command"] == "run"
        second = cli("run", ws, "--sandbox", "local")
        assert second.returncode == 2 and f"pid {first.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert cli("rollback", ws, "0").returncode == 2
    finally:
        first.kill()
        first.wait()


def test_check_held_refuses_once_the_held_lock_file_is_removed_or_replaced(tmp_path: Path) -> None:
    from harnessopt.ledger.lock import check_held

    check_held(tmp_path)  # no lock held here: nothing to say
    lock = tmp_path / ".harnessopt" / "lock"
    with workspace_lock(tmp_path, "run", print):
        check_held(tmp_path)
        lock.unlink()  # `rm -rf .harnessopt` by hand: a second run would make and lock a new file
        with pytest.raises(UserError, match="was removed during the run, so another command may be using"):
            check_held(tmp_path)
        lock.write_text("")  # the new file another command made
        with pytest.raises(UserError, match="was removed during the run"):
            check_held(tmp_path)
    check_held(tmp_path)  # released


@pytest.mark.parametrize("removed", ["lock", "folder"])
def test_a_run_whose_lock_file_went_records_nothing_more(tmp_path: Path, removed: str) -> None:
    """A second run could take the workspace with a lock of its own once the first's file is gone,
    and the two would overwrite each other's round records: the first stops before its record.
    With all of .harnessopt/ gone, it wrote a new journal there (an error line, a spend line),
    which another command holding the workspace would have read as its own (QA)."""
    ws = make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 60})
    head = git(ws, "rev-parse", "HEAD")
    run = start_cli("run", ws, "--rounds", "1", "--sandbox", "local")
    try:
        view = Path(wait_for_phase(ws, run, "propose", timeout=120)["view"])
        if removed == "lock":
            (ws / ".harnessopt" / "lock").unlink()
        else:
            (ws / ".harnessopt").rename(tmp_path / "gone")  # `rm -rf`, at once: the run still writes
        skill = view / "skill" / "SKILL.md"  # the person's edit: the round goes on to its record
        skill.write_text(skill.read_text().replace("Explain your answer", "Reply with only the city name"))
        (view / DONE_NAME).touch()  # gating starts now, not after the optimizer's wall clock
        out, err = run.communicate(timeout=300)
    finally:
        run.kill()
    assert run.returncode == 2, (out, err)
    assert "was removed during the run" in err and "Traceback" not in err
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "for-each-ref", "refs/harnessopt/", "refs/tags/ho/round-1") == ""
    if removed == "folder":
        assert not (ws / ".harnessopt" / "journal.jsonl").exists()


def test_a_copy_of_a_workspace_in_use_has_no_live_holder(tmp_path: Path) -> None:
    """`cp -a` of a workspace while a run held it: status and log on the copy named the original's
    run as running there, and said to touch a STOP file the run never reads (QA). The lock file's
    text names a live pid, but nobody holds the copy's flock."""
    import shutil

    from harnessopt.ledger.lock import live_holder

    ws = tmp_path / "ws"
    (ws / ".harnessopt").mkdir(parents=True)
    with workspace_lock(ws, "run", lambda _m: None):
        held = live_holder(ws)
        assert held is not None and held["command"] == "run"  # the process that holds it sees itself
        shutil.copytree(ws, tmp_path / "copy")
        assert live_holder(tmp_path / "copy") is None
        for _ in range(50):  # a status probing it does not make a command that starts refuse
            assert live_holder(ws) is not None
    assert live_holder(ws) is None
