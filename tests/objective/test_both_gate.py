"""objective: both: two gates at alpha/2 each, a significant loss on either side vetoes."""

from __future__ import annotations

from harnessopt.config import GateConfig
from harnessopt.gate.policy import make_gate
from harnessopt.objective import both
from harnessopt.protocols import Outcome, Task

VAL = [Task(f"g{i}", f"q{i}", {"trigger": i % 2 == 0}, "val") for i in range(20)] + [
    Task(f"t{i}", f"task {i}", "x", "val") for i in range(20)
]


def _runs(score_of: dict[str, float]) -> dict[str, list[Outcome]]:
    return {t.id: [Outcome(score=score_of.get(t.id, 1.0))] for t in VAL}


def _policy():
    return make_gate(GateConfig(confidence=1 - 0.05 * both.SHARE, confirm_flips=False))


def test_a_triggering_gain_with_the_task_score_kept_is_accepted_at_half_alpha_each() -> None:
    inc = _runs({f"g{i}": 0.0 for i in range(0, 20, 2)})  # should-trigger queries missed
    d = both.decide(VAL, _runs({}), inc, _policy(), None)
    assert d.accept, d.reason
    objectives = d.details["objectives"]
    assert objectives["trigger"]["accept"] and not objectives["task"]["accept"]
    assert (
        abs(objectives["trigger"]["alpha"] - 0.025) < 1e-12
        and abs(objectives["task"]["alpha"] - 0.025) < 1e-12
    )
    assert abs(d.details["alpha"] - 0.05) < 1e-12  # the round's one budget, split in two


def test_a_triggering_gain_that_lowers_the_task_score_is_vetoed() -> None:
    inc = _runs({f"g{i}": 0.0 for i in range(0, 20, 2)})
    cand = _runs({f"t{i}": 0.0 for i in range(12)})  # a description edit that breaks the tasks
    d = both.decide(VAL, cand, inc, _policy(), None)
    assert not d.accept and "task lower beyond the dead zone" in d.reason


def test_nothing_gained_is_rejected() -> None:
    d = both.decide(VAL, _runs({}), _runs({}), _policy(), None)
    assert not d.accept and "neither objective" in d.reason
