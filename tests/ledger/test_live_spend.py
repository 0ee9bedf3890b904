"""``.harnessopt/spend-live.json``: a killed run's spend, kept while it ran and moved into the journal by the next."""

from __future__ import annotations

import json
import time
from pathlib import Path

from harnessopt.ledger import live_spend
from harnessopt.ledger.journal import Journal


class Meter:
    """What the gateway would say each round spent so far."""

    def __init__(self) -> None:
        self.spent: dict[int, float] = {}

    def __call__(self, k: int) -> tuple[float, dict[str, dict[str, int]]]:
        usd = self.spent.get(k, 0.0)
        return usd, {"optimizer": {"calls": int(usd * 100), "input": 10, "output": 5}}


def _wait_for(cond, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_file_follows_the_rounds_in_progress(tmp_path: Path) -> None:
    meter, journal = Meter(), Journal(tmp_path)
    live_spend.path(tmp_path).parent.mkdir()  # a run's lock made it
    keeper = live_spend.Keeper(tmp_path, meter, every_s=0.05)
    try:
        assert live_spend.left(tmp_path) == {}  # no round in progress: no file
        keeper.begin(3)
        meter.spent[3] = 0.25
        _wait_for(lambda: live_spend.left(tmp_path).get(3, {}).get("cost_usd") == 0.25)
        meter.spent[3] = 0.5  # the thread keeps up
        _wait_for(lambda: live_spend.left(tmp_path)[3]["cost_usd"] == 0.5)
        assert live_spend.left(tmp_path)[3]["tokens"]["optimizer"]["calls"] == 50
        with keeper.ending(3):  # the round's own spend line, and out of the file in the same step
            journal.write(3, "spend", cost_usd=0.5)
        assert not live_spend.path(tmp_path).exists()
    finally:
        keeper.close()
    assert not live_spend.path(tmp_path).exists()


def test_a_killed_runs_file_becomes_its_rounds_spend_lines(tmp_path: Path) -> None:
    meter, journal = Meter(), Journal(tmp_path)
    live_spend.path(tmp_path).parent.mkdir()  # a run's lock made it
    keeper = live_spend.Keeper(tmp_path, meter, every_s=3600)
    keeper.begin(2)
    meter.spent[2] = 1.25
    keeper.write()  # what the thread writes every few seconds; then the process dies (no close)
    line = live_spend.fold(tmp_path, journal)  # the next run
    keeper.close()
    assert line is not None and "round 2" in line and "$1.2500" in line
    (entry,) = journal.entries()
    assert entry["round"] == 2 and entry["phase"] == "spend" and entry["cost_usd"] == 1.25 and entry["killed"]
    assert not live_spend.path(tmp_path).exists()
    assert live_spend.fold(tmp_path, journal) is None  # once
    assert len(journal.entries()) == 1


def test_an_unreadable_file_is_no_spend(tmp_path: Path) -> None:
    live_spend.path(tmp_path).parent.mkdir()  # a killed run's folder
    live_spend.path(tmp_path).write_text(
        '{"rounds": '
    )  # cut mid-write is not possible (a rename), but a hand edit is
    assert live_spend.left(tmp_path) == {}
    live_spend.path(tmp_path).write_text(json.dumps({"rounds": [1, 2]}))
    assert live_spend.left(tmp_path) == {}


def test_a_command_that_runs_no_round_leaves_a_killed_runs_file_for_run(tmp_path: Path) -> None:
    """audit, ablate, replay open the same services (and so a keeper) but run no round: the file a
    killed run left stays until a `run` moves it into the journal."""
    live_spend.path(tmp_path).parent.mkdir()
    live_spend.path(tmp_path).write_text(
        json.dumps({"pid": 1, "rounds": {"4": {"cost_usd": 0.5, "tokens": {}}}})
    )
    keeper = live_spend.Keeper(tmp_path, Meter(), every_s=0.01)
    time.sleep(0.1)
    keeper.close()
    assert live_spend.left(tmp_path) == {4: {"cost_usd": 0.5, "tokens": {}}}
