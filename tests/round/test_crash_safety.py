"""SIGKILL at each phase of a round, then run again: the run completes, main never holds an
unvalidated change, git is consistent, and no journal line written before the kill is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harnessopt.ledger import store as ledger
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import make_ws

RUN = ["--rounds", "1", "--sandbox", "local", "--unsafe-host-optimizer"]


def _journal(ws: Path) -> list[str]:
    path = ws / ".harnessopt" / "journal.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def _killed_at(ws: Path, phase: str) -> None:
    """A run of round 1 SIGKILLed as soon as its journal has a ``phase`` line (or when it ends)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harnessopt", "run", str(ws), *RUN],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and proc.poll() is None:
        if any(json.loads(x).get("phase") == phase for x in _journal(ws) if x.strip()):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("phase", ["start", "propose", "check", "smoke", "gate", "applying"])
def test_sigkill_at_each_phase_then_rerun(tmp_path: Path, phase: str) -> None:
    ws = make_ws(tmp_path)
    base = git(ws, "rev-parse", "HEAD")
    _killed_at(ws, phase)
    before = _journal(ws)
    assert any(phase in line for line in before), f"phase {phase} was not reached"
    # Whatever the kill interrupted, main is the base or a validated, tagged round.
    head = git(ws, "rev-parse", "HEAD")
    assert head == base or head == git(ws, "rev-parse", "ho/round-1")

    again = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), *RUN],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode in (0, 3), (again.stdout, again.stderr)
    assert "Traceback" not in again.stderr
    after = _journal(ws)
    assert after[: len(before)] == before or after[: len(before) - 1] == before[:-1]  # a torn last line
    repo = Workspace.open(ws).repo
    rounds = ledger.past_rounds(repo)
    assert rounds and rounds[-1].status in ("accepted", "rejected", "noop", "failed")
    for r in rounds:  # an accepted round is on main and tagged; nothing else ever is
        on_main = subprocess.run(["git", "-C", str(ws), "merge-base", "--is-ancestor", r.commit, "HEAD"])
        assert (on_main.returncode == 0) == (r.status == "accepted"), r
    assert git(ws, "status", "--porcelain") == ""
    fsck = subprocess.run(["git", "-C", str(ws), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_stop_just_after_main_moved_still_records_what_the_next_run_needs(
    tmp_path: Path, monkeypatch
) -> None:
    """SIGTERM the moment the accept's swap is done: the run stops, but only after the new
    incumbent's val runs are cached and the round's recorded line is written, so the next round
    does not pay for the incumbent's runs again nor finish a round that was finished; and after
    the round's line is said (the run ended on "main is unchanged past the last recorded round"
    without saying the round had just been recorded and applied)."""
    from harnessopt.rollout.val_cache import ValCache
    from harnessopt.round import driver
    from harnessopt.util import interrupts
    from tests.support.interrupts import handlers_restored

    ws = Workspace.open(make_ws(tmp_path))
    real = ledger.record_accepted

    def swap_then_sigterm(*args, **kwargs) -> str:
        sha = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered at once, to the main thread: this one
        return sha

    monkeypatch.setattr(ledger, "record_accepted", swap_then_sigterm)
    cached_before = len(ValCache(ws.root / ".harnessopt")._load())
    said: list[str] = []
    with handlers_restored():
        interrupts.install()
        with pytest.raises(interrupts.Terminated):
            driver.run(ws, 1, said.append)
    assert said[-1].startswith("round 1: accepted: "), said[-3:]
    phases = [json.loads(x)["phase"] for x in _journal(ws.root) if x.strip()]
    assert phases[phases.index("applying") + 1] == "recorded"
    assert git(ws.root, "rev-parse", "HEAD") == git(ws.root, "rev-parse", "ho/round-1^{commit}")
    # the round's incumbent's val runs, and the new incumbent's (none before the round)
    assert cached_before == 0 and len(ValCache(ws.root / ".harnessopt")._load()) == 2


def test_the_next_run_moves_what_a_killed_round_had_spent_into_the_journal(tmp_path: Path) -> None:
    """A run SIGKILLed in round 1 left .harnessopt/spend-live.json (its keeper's last count); the next
    run says what it was, writes it as round 1's spend line before it starts, and removes the file."""
    from harnessopt.ledger import live_spend
    from harnessopt.round import driver

    ws = Workspace.open(make_ws(tmp_path))
    left = {"1": {"cost_usd": 0.42, "tokens": {"optimizer": {"calls": 3, "input": 900, "output": 90}}}}
    live_spend.path(ws.root).parent.mkdir(exist_ok=True)
    live_spend.path(ws.root).write_text(json.dumps({"pid": 1, "rounds": left}))
    said: list[str] = []
    driver.run(ws, 1, said.append)
    assert said[0] == "a run killed in round 1 had spent $0.4200 there (at its last count); `status` shows it"
    entries = [json.loads(x) for x in _journal(ws.root) if x.strip()]
    killed = [e for e in entries if e.get("killed")]
    assert [(e["round"], e["phase"], e["cost_usd"]) for e in killed] == [(1, "spend", 0.42)]
    assert entries.index(killed[0]) < next(i for i, e in enumerate(entries) if e["phase"] == "run_start")
    assert not live_spend.path(ws.root).exists()
    # once round 1 is recorded, status still says the killed attempt's count is a lower bound (QA)
    from harnessopt.reporting.log import status_lines

    line = next(
        x for x in status_lines(Workspace.open(ws.root)) if x.startswith("interrupted attempt(s) of round 1")
    )
    assert "3 model call(s)" in line and "at least: the run was killed, and this is its last count" in line


def test_a_rerun_after_the_memorised_answer_check_pays_for_none_of_its_runs_again(tmp_path: Path) -> None:
    """The check's perturbed variants were drawn from a fresh seed each attempt, so a rerun of the
    round found none of their finished runs and paid for them again (14 runs in the demo's round 1).
    The seed is kept with the round's runs: killed once the check is done, the rerun spends nothing
    until the confirmation, the one step the kill came before."""
    ws = make_ws(tmp_path)
    _killed_at(ws, "memorised")
    first = next(json.loads(x) for x in _journal(ws) if json.loads(x).get("phase") == "memorised")
    assert first["p"] is not None  # the check ran its variants on both sides
    again = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), *RUN],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode == 0, (again.stdout[-2000:], again.stderr)
    lines = again.stdout.splitlines()
    check = next(i for i, line in enumerate(lines) if "memorised-answer check: 7 fixed task(s)" in line)
    done = next(i for i, line in enumerate(lines) if "confirming on" in line)
    spent = [line for line in lines[:done] if ", run: " in line]  # the run's tokens, on every progress line
    assert spent and all(", run: 0 tokens" in line for line in spent), spent
    assert any("round 1 reruns" in line for line in lines[check:done])  # the check's runs, found again
    second = [json.loads(x) for x in _journal(ws) if json.loads(x).get("phase") == "memorised"][-1]
    assert second["summary"] == first["summary"]  # the same variants, the same verdict
    assert ledger.past_rounds(Workspace.open(ws).repo)[-1].status == "accepted"


HOLD_INDEX_LOCK = """#!/bin/bash
# when main moves, another git (an IDE's `git status`) holds the index for SECONDS
input=$(cat)
if [ "$1" = committed ] && echo "$input" | grep -q " refs/heads/main$"; then
  touch "$PWD/.git/index.lock"; (sleep SECONDS; rm -f "$PWD/.git/index.lock") >/dev/null 2>&1 &
fi
"""


@pytest.mark.parametrize("seconds", [2, 8])
def test_a_checkout_that_finds_the_index_locked_never_leaves_a_round_half_applied(
    tmp_path: Path, seconds: int
) -> None:
    """Main moved to an accepted round and the checkout found .git/index.lock held by another git:
    the round was recorded failed with main holding it, the tree stale, and status said to commit,
    which undid the round (QA). A lock held briefly is waited out; one held longer ends the run
    saying how to finish it, status says the same, and the next run does."""
    ws = make_ws(tmp_path)
    hook = ws / ".git" / "hooks" / "reference-transaction"
    hook.write_text(HOLD_INDEX_LOCK.replace("SECONDS", str(seconds)))
    hook.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), *RUN],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    hook.unlink()
    time.sleep(seconds)  # the other git let go
    repo = Workspace.open(ws).repo
    assert not any(x.status == "failed" for x in ledger.past_rounds(repo))
    assert git(ws, "rev-parse", "HEAD") == git(ws, "rev-parse", "ho/round-1^{commit}")
    if seconds == 2:
        assert r.returncode == 0, r.stdout + r.stderr
        assert git(ws, "status", "--porcelain") == ""
        return
    assert r.returncode == 1 and "round 1 was accepted and main holds it" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    status = subprocess.run(
        [sys.executable, "-m", "harnessopt", "status", str(ws)], capture_output=True, text=True
    ).stdout
    assert "last run stopped applying round 1, accepted: the next run finishes it" in status
    assert "commit or stash the changes" not in status
    again = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), *RUN],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert "round 1 had been accepted when the last run stopped; its checkout is now complete" in again.stdout
    assert git(ws, "status", "--porcelain") == ""
