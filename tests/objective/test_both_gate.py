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
    assert not d.accept and "rejected: task significantly lower (task -0.600 < -" in d.reason


def test_a_task_gain_that_lowers_triggering_is_vetoed_by_a_test_of_harm_of_its_own() -> None:
    """QA: task +1.000 accepted, trigger -0.400 on 10 tasks (4 broken in every run, none fixed) sat
    inside the trigger gate's first-look dead zone (0.727 at a small share of alpha/2), and the
    round was accepted though docs say a body edit that lowers triggering is rejected."""
    val = [Task(f"g{i}", f"q{i}", {"trigger": i < 5}, "val") for i in range(10)] + [
        Task(f"t{i}", f"task {i}", "x", "val") for i in range(6)
    ]
    inc = {t.id: [Outcome(score=float(t.id.startswith("g")))] * 2 for t in val}  # tasks all failed
    cand = {t.id: [Outcome(score=0.0 if t.id in ("g4", "g5", "g6", "g8") else 1.0)] * 2 for t in val}
    banked = make_gate(GateConfig(confidence=1 - 0.05 * both.SHARE))  # the default gate, two looks
    d = both.decide(val, cand, inc, banked, None)
    trigger = d.details["objectives"]["trigger"]
    assert d.details["objectives"]["task"]["accept"] and trigger["delta"] == -0.4
    assert trigger["dead_zone"] > 0.4 > trigger["veto_zone"]  # the gate's zone could not see it
    assert not d.accept and trigger["lost"] and "trigger significantly lower" in d.reason
    # a loss of one task in ten is no evidence of harm: the gain stands
    cand = {t.id: [Outcome(score=0.0 if t.id == "g4" else 1.0)] * 2 for t in val}
    assert both.decide(val, cand, inc, banked, None).accept


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


def test_the_confirmation_of_both_fails_when_a_family_is_lower_in_the_fresh_runs() -> None:
    """The pooled fresh gain (+0.125 on 16 tasks) read as confirmed though triggering fell in the
    same runs, and ho/best moved (QA): each family is judged as the veto judges it."""
    from harnessopt.gate.confirmation import confirmation_record

    val = [Task(f"g{i}", f"q{i}", {"trigger": i < 5}, "val") for i in range(10)] + [
        Task(f"t{i}", f"task {i}", "x", "val") for i in range(6)
    ]
    inc = {t.id: [Outcome(score=float(t.id.startswith("g")))] * 3 for t in val}
    cand = {t.id: [Outcome(score=0.0 if t.id in ("g4", "g5", "g6", "g8") else 1.0)] * 3 for t in val}
    pooled = confirmation_record(cand, inc, "val")
    assert pooled["gain"] > 0 and pooled["confirmed"]  # what it said before
    rec = confirmation_record(cand, inc, "val", both.family_ids(val))
    assert not rec["confirmed"] and rec["lower"] == {"trigger": -0.4}
    assert "trigger significantly lower (-0.400); ho/best does not move" in rec["summary"]
    fine = {t.id: [Outcome(score=1.0)] * 3 for t in val}
    assert confirmation_record(fine, inc, "val", both.family_ids(val))["confirmed"]
