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


def test_the_round_is_shown_against_each_familys_own_dead_zone() -> None:
    """The round line said "Δ +0.105 vs dead zone 0.454": the Δ pooled both families, the zone was
    the trigger family's alone (QA). Each family is shown against its own zone, the pooled Δ
    against none, and a family lower beyond its zone is a regression."""
    from types import SimpleNamespace

    from harnessopt.ledger.manifest import RoundManifest, pooled_dead_zone
    from harnessopt.reporting.data import proposal_outcome
    from harnessopt.reporting.progress import round_lines

    inc = _runs({f"g{i}": 0.0 for i in range(0, 20, 2)})
    cand = _runs({f"t{i}": 0.0 for i in range(12)})
    d = both.decide(VAL, cand, inc, _policy(), None)
    fields = {k: getattr(d, k) for k in ("delta", "dead_zone", "n", "fixed", "broken")}
    m = RoundManifest(round=1, status="rejected", reason=d.reason, val_score=d.candidate_score,
                      incumbent_score=d.incumbent_score, gate=d.details, **fields)  # fmt: skip
    task, trigger = d.details["objectives"]["task"], d.details["objectives"]["trigger"]
    line = round_lines(m)[0]
    assert f"task Δ {task['delta']:+.3f} vs dead zone {task['dead_zone']:.3f}" in line
    assert f"trigger Δ {trigger['delta']:+.3f} vs dead zone {trigger['dead_zone']:.3f}" in line
    assert f"Δ {d.delta:+.3f} vs" not in line and pooled_dead_zone(m) is None
    assert proposal_outcome(SimpleNamespace(status="rejected", manifest=m)) == "regressed"
