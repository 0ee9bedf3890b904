"""The incumbent's banked val runs: the first look's share, and reruns drawn before running again."""

from __future__ import annotations

from harnessopt.gate.bank import IncumbentBank, first_look
from harnessopt.protocols import Outcome


def _runs(*scores: float) -> list[Outcome]:
    return [Outcome(score=s) for s in scores]


def test_first_look_keeps_each_tasks_first_epochs() -> None:
    cached = {"a": _runs(1, 0, 1), "b": _runs(0)}
    assert first_look(cached, 1) == {"a": _runs(1), "b": _runs(0)}
    assert first_look(cached, 2) == {"a": _runs(1, 0), "b": _runs(0)}


def test_draw_takes_banked_runs_in_order_then_runs_the_incumbent() -> None:
    bank = IncumbentBank({"a": _runs(1, 0, 1), "b": _runs(0, 1)}, epochs=1)
    ran: list[list[str]] = []

    def run(ids: list[str]) -> dict[str, list[Outcome]]:
        ran.append(ids)
        return {t: _runs(0.5) for t in ids}

    assert bank.draw(["a", "b"], run) == {"a": _runs(0), "b": _runs(1)} and ran == []
    assert bank.draw(["a", "b", "c"], run) == {"a": _runs(1), "b": _runs(0.5), "c": _runs(0.5)}
    assert ran == [["b", "c"]] and bank.drawn == 3 and bank.ran == 2
    assert bank.first == {"a": _runs(1), "b": _runs(0)}  # the first look never sees banked runs
