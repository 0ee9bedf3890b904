from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from benchmarks.baselines import FixedDeadBand, MeanImproved, MinibatchImproved
from harnessopt.config import GateConfig
from harnessopt.errors import UserError
from harnessopt.gate.policy import PairedGate, futile_decision, make_gate
from harnessopt.protocols import Outcome, Outcomes

TWO_RUNS = GateConfig(second_look=2, first_look_share=0.2)  # the second look these tests were written for


def side(scores: Sequence[float], soft: Sequence[float] | None = None, epochs: int = 1) -> Outcomes:
    return {
        f"t{i:03d}": [Outcome(score=s, soft=None if soft is None else soft[i]) for _ in range(epochs)]
        for i, s in enumerate(scores)
    }


class Recorder:
    """A ConfirmFn that returns scripted rerun outcomes and remembers what it was asked."""

    def __init__(self, cand: dict[str, float], inc: dict[str, float]):
        self.cand, self.inc, self.calls = cand, inc, []

    def __call__(self, ids):
        self.calls.append(list(ids))
        return (
            {t: [Outcome(score=self.cand[t])] for t in ids},
            {t: [Outcome(score=self.inc[t])] for t in ids},
        )


def test_clear_gain_is_accepted_with_reason_and_details():
    inc = side([0] * 20 + [1] * 30)
    cand = side([1] * 10 + [0] * 10 + [1] * 30)
    d = PairedGate(GateConfig()).decide(cand, inc)
    assert d.accept and d.reason.startswith("accepted: +0.200 > dead zone")
    assert "(n=50)" in d.reason
    assert d.n == 50 and d.delta == pytest.approx(0.2) and len(d.fixed) == 10 and d.broken == []
    for key in ("t", "s_d", "m", "epochs", "sign_test_p", "t_quantile", "confidence"):
        assert key in d.details


def test_all_ties_rejected_without_soft_metric():
    d = PairedGate(TWO_RUNS).decide(side([1, 0] * 10), side([1, 0] * 10))
    assert not d.accept and d.delta == 0 and d.dead_zone > 0
    assert "inside dead zone" in d.reason and "no tie-break (gate.secondary: none)" in d.reason


def test_all_flips_at_m5_accepted_and_one_fix_rejected():
    assert PairedGate(TWO_RUNS).decide(side([1] * 5), side([0] * 5)).accept
    one = PairedGate(TWO_RUNS).decide(side([1, 0, 0, 0, 0]), side([0] * 5))
    assert not one.accept and one.fixed == ["t000"]


def test_soft_metric_breaks_a_tie_inside_the_zone():
    inc = side([0] * 20, soft=[0.2] * 20)
    good = side([1, 0] + [0] * 18, soft=[0.5] * 20)
    d = PairedGate(GateConfig(soft_margin=0.05, secondary="soft")).decide(good, inc)
    assert d.accept and "inside dead zone" in d.reason and "soft +0.300 > margin" in d.reason
    assert d.soft_delta == pytest.approx(0.3) and d.details["soft_metric"] == "soft"
    small = side([1, 0] + [0] * 18, soft=[0.22] * 20)
    d2 = PairedGate(GateConfig(soft_margin=0.05, secondary="soft")).decide(small, inc)
    assert not d2.accept and "soft +0.020 below margin" in d2.reason


def test_soft_tie_break_refuses_when_more_broke_than_fixed():
    inc = side([1, 1, 0] + [0] * 17, soft=[0.2] * 20)
    cand = side([0, 0, 1] + [0] * 17, soft=[0.6] * 20)
    d = PairedGate(GateConfig(secondary="soft")).decide(cand, inc)
    assert not d.accept and len(d.broken) == 2 and len(d.fixed) == 1
    assert "soft +0.400 but 2 broken > 1 fixed" in d.reason


def tokens(scores: Sequence[float], n_tokens: int, crashed: Sequence[int] = ()) -> Outcomes:
    return {
        f"t{i:03d}": [
            Outcome(score=s, tokens=n_tokens, soft=None if i in crashed else float(s), crashed=i in crashed)
        ]
        for i, s in enumerate(scores)
    }


def test_token_saving_is_no_fallback_it_is_the_configured_cost_test():
    """A token saving no longer breaks a tie by itself: only ``gate.secondary: cost`` tests it, as a
    non-inferiority test on quality with a stated margin, at the secondary's share of alpha."""
    inc, cand = tokens([1] * 200, 1000), tokens([1] * 200, 500)
    assert not PairedGate(TWO_RUNS).decide(cand, inc).accept  # secondary: none (default)
    assert not PairedGate(GateConfig(secondary="soft")).decide(cand, inc).accept  # soft saw no gain
    cost = GateConfig(secondary="cost")  # noninferiority_margin 0.02
    d = PairedGate(cost).decide(cand, inc)
    assert d.accept and d.details["soft_metric"] == "token saving" and d.soft_delta == pytest.approx(0.5)
    # secondary_share 0.2: the cost test at 1 - 0.01, the primary's one look at 1 - 0.04
    assert d.details["secondary_level"] == pytest.approx(0.99)
    assert d.details["look_levels"] == pytest.approx([0.96])
    assert -0.02 < d.details["quality_lower_bound"] < 0
    # the same saving with 4 of 200 tasks broken (-0.02, inside the zone): it may be worse than -0.02
    worse = tokens([0] * 4 + [1] * 196, 500)
    w = PairedGate(cost).decide(worse, inc)
    assert not w.accept and "inside dead zone" in w.reason
    assert "quality may be worse by more than 0.020" in w.reason
    # a looser margin, stated in the config, accepts that loss for that saving
    assert PairedGate(GateConfig(secondary="cost", noninferiority_margin=0.05)).decide(worse, inc).accept
    # m = 10: no test of 10 tasks can show quality within 0.02: the cost path cannot accept there
    assert (
        not PairedGate(GateConfig(secondary="cost"))
        .decide(tokens([1] * 10, 500), tokens([1] * 10, 1000))
        .accept
    )


def test_a_crashed_run_never_switches_the_secondary_metric():
    """The audit's case: a candidate 0.2 worse on soft, with one crashed run (soft None), was
    accepted on 'token saving'. Now the metric is the configured one; a crash's soft counts 0."""
    inc = {f"t{i:03d}": [Outcome(score=0, soft=0.6, tokens=1000)] for i in range(50)}
    cand = {f"t{i:03d}": [Outcome(score=0, soft=0.4, tokens=700)] for i in range(50)}
    cand["t000"] = [Outcome(score=0, soft=None, tokens=10, crashed=True)]
    for secondary in ("none", "soft"):
        d = PairedGate(GateConfig(secondary=secondary)).decide(cand, inc)
        assert not d.accept and "token" not in d.reason, d.reason
    soft = PairedGate(GateConfig(secondary="soft")).decide(cand, inc)
    assert soft.soft_delta == pytest.approx((49 * -0.2 - 0.6) / 50)  # the crash counts 0, not skipped
    cand["t001"] = [Outcome(score=0, soft=None, tokens=700)]  # a run that did not crash has no soft
    lacking = PairedGate(GateConfig(secondary="soft")).decide(cand, inc)
    assert not lacking.accept and "1 run(s) have no soft value" in lacking.reason


def test_every_accept_path_spends_from_one_alpha():
    from harnessopt.gate import stats

    two = stats.round_levels(0.05, 2)
    assert two.looks == pytest.approx((0.99, 0.96)) and two.secondary is None
    assert stats.round_levels(0.05, 2, first_share=0.5).looks == pytest.approx((0.975, 0.975))
    split = stats.round_levels(0.05, 2, 0.5, first_share=0.5)
    assert split.looks == pytest.approx((0.9875, 0.9875)) and split.secondary == pytest.approx(0.975)
    for lv in (two, split, stats.round_levels(0.05, 1, 0.2)):
        assert lv.spent() == pytest.approx(0.05)
    gate = PairedGate(GateConfig(secondary="soft", secondary_share=0.2, second_look=2, first_look_share=0.2))
    d = gate.decide(side(CAND), side(INC), Fresh((CAND, INC)))
    assert d.details["look_levels"] == pytest.approx([0.992, 0.968]) and d.details[
        "secondary_level"
    ] == pytest.approx(0.99)
    assert d.details["alpha"] == pytest.approx(0.05)


def test_clear_loss_rejected_below_minus_zone():
    d = PairedGate(TWO_RUNS).decide(side([0] * 20 + [1] * 30), side([1] * 50))
    assert not d.accept and "below minus dead zone" in d.reason


def test_max_broken_rejects_even_a_net_gain():
    inc = side([0] * 30 + [1] * 3 + [0] * 17)
    cand = side([1] * 30 + [0] * 3 + [0] * 17)
    d = PairedGate(GateConfig(max_broken=2)).decide(cand, inc)
    assert not d.accept and d.reason == "rejected: 3 broken > gate.max_broken 2"
    assert PairedGate(GateConfig(max_broken=3)).decide(cand, inc).accept


def test_flip_confirmation_drops_noise_and_keeps_reproduced_flips():
    inc = side([0] * 6 + [1] * 44)
    cand = side([1] * 6 + [1] * 44)
    # t000..t002 reproduce; t003..t005 do not (tie, tie, reversed)
    rerun_c = {f"t{i:03d}": 1.0 for i in range(3)} | {"t003": 0.0, "t004": 1.0, "t005": 0.0}
    rerun_i = {f"t{i:03d}": 0.0 for i in range(3)} | {"t003": 0.0, "t004": 1.0, "t005": 1.0}
    confirm = Recorder(rerun_c, rerun_i)
    d = PairedGate(second_look=0).decide(cand, inc, confirm)
    assert confirm.calls == [[f"t{i:03d}" for i in range(6)]]
    assert d.fixed == ["t000", "t001", "t002"] and d.noise_flips == ["t003", "t004", "t005"]
    assert d.delta == pytest.approx(3 / 50)
    assert (
        d.details["confirmed"]
        and d.details["reruns"] == 12
        and d.details["raw_delta"] == pytest.approx(6 / 50)
    )
    unconfirmed = PairedGate(TWO_RUNS).decide(cand, inc)
    assert unconfirmed.delta == pytest.approx(6 / 50) and unconfirmed.accept and not d.accept


def test_confirm_not_called_when_disabled_or_no_flips():
    confirm = Recorder({}, {})
    PairedGate(GateConfig(confirm_flips=False)).decide(side([1, 0]), side([0, 0]), confirm)
    PairedGate(TWO_RUNS).decide(side([1, 0]), side([1, 0]), confirm)
    assert confirm.calls == []


def test_epochs_average_per_task_and_flips_use_the_mean():
    inc = {f"t{i}": [Outcome(0), Outcome(0), Outcome(1)] for i in range(20)}
    cand = {f"t{i}": [Outcome(1), Outcome(1), Outcome(0)] for i in range(20)}
    d = PairedGate(TWO_RUNS).decide(cand, inc)
    assert d.details["epochs"] == 3 and d.delta == pytest.approx(1 / 3) and len(d.fixed) == 20 and d.accept


def test_no_common_tasks_is_a_recorded_rejection():
    d = PairedGate(TWO_RUNS).decide(side([1]), {"other": [Outcome(1)]})
    assert not d.accept and d.n == 0 and "no val task" in d.reason


def band_gate(cfg: GateConfig) -> FixedDeadBand:
    """A user's own gate policy, plugged in by dotted path."""
    return FixedDeadBand(0.05)


def test_baselines_and_make_gate():
    inc, cand = side([0] * 19 + [1]), side([1] + [0] * 18 + [1])
    assert MeanImproved().decide(cand, inc).accept
    assert not FixedDeadBand(0.05).decide(cand, inc).accept
    assert FixedDeadBand(0.04).decide(cand, inc).accept
    mb = MinibatchImproved(size=3, seed=1).decide(cand, inc)
    assert mb.n == 3
    assert isinstance(make_gate(GateConfig()), PairedGate)
    assert make_gate(GateConfig(policy="tests.gate.test_gate:band_gate")).name == "deadband"
    with pytest.raises(ValidationError, match="known: banked, paired"):
        GateConfig(policy="nope")
    with pytest.raises(UserError, match="known: banked, paired"):
        make_gate(GateConfig.model_construct(**{**GateConfig().model_dump(), "policy": "nope"}))


class Fresh:
    """A ConfirmFn that reruns tasks with scripted scores: call i uses scripts[i] (last repeats)."""

    def __init__(self, *scripts: tuple[Sequence[float], Sequence[float]]):
        self.scripts, self.calls = scripts, []

    def __call__(self, ids):
        cand, inc = self.scripts[min(len(self.calls), len(self.scripts) - 1)]
        self.calls.append(list(ids))
        return (
            {t: [Outcome(score=cand[int(t[1:])])] for t in ids},
            {t: [Outcome(score=inc[int(t[1:])])] for t in ids},
        )


# first look: 8 fixed, 2 broken of 50 -> +0.12, inside the zone at level 0.99
INC = [0] * 8 + [1] * 2 + [1] * 20 + [0] * 20
CAND = [1] * 8 + [0] * 2 + [1] * 20 + [0] * 20


def test_promising_first_look_spends_a_second_look_and_accepts():
    # the fresh runs also fix 6 tasks the first look saw as ties (both failed)
    better = [1] * 8 + [0] * 2 + [1] * 20 + [1] * 6 + [0] * 14
    fresh = Fresh((CAND, INC), (better, INC))
    first = PairedGate(second_look=0).decide(side(CAND), side(INC), fresh)
    assert not first.accept and first.delta == pytest.approx(0.12) and first.details["look"] == 1
    fresh.calls = []
    d = PairedGate(TWO_RUNS).decide(side(CAND), side(INC), fresh)
    # one flip-confirmation call (the 10 flips), then two second-look calls with every task
    assert [len(c) for c in fresh.calls] == [10, 50, 50]
    assert d.details["look"] == 2 and d.details["epochs_total"] == 3
    assert d.details["reruns"] == 2 * 10 + 2 * 2 * 50 and d.details["look_levels"] == pytest.approx(
        [0.99, 0.96]  # alpha 0.05: 0.01 for the first look, 0.04 for the second
    )
    # per task (d_first + 2 * d_fresh) / 3: the 6 new fixes count 2/3 each
    assert d.delta == pytest.approx((8 - 2 + 6 * 2 / 3) / 50)
    assert d.accept and "second look" in d.reason and d.details["first_look"]["delta"] == pytest.approx(0.12)


def test_second_look_that_does_not_reproduce_rejects():
    same = [0] * 10 + [1] * 20 + [0] * 20
    fresh = Fresh((CAND, INC), (same, same))  # flips reproduce once, then vanish
    d = PairedGate(TWO_RUNS).decide(side(CAND), side(INC), fresh)
    # (0.12 + 2 * 0) / 3 = 0.04: the fresh runs outvote the first look
    assert not d.accept and d.details["look"] == 2 and d.delta == pytest.approx(0.04)
    # fixed/broken use each side's mean over all 4 runs: 2 of 4 passes is still a pass
    assert len(d.fixed) == 8 and len(d.broken) == 2 and d.details["fresh_delta"] == 0.0


def test_no_second_look_for_clear_results_or_weak_first_looks():
    fresh = Fresh(([1] * 50, [0] * 50))
    clear_inc, clear_cand = side([0] * 20 + [1] * 30), side([1] * 20 + [1] * 30)
    assert PairedGate(TWO_RUNS).decide(clear_cand, clear_inc, fresh).details["look"] == 1
    tie = PairedGate(TWO_RUNS).decide(
        side([1, 0] + [0] * 48), side([0, 1] + [0] * 48), Fresh(([0] * 50, [0] * 50))
    )
    negative = PairedGate(TWO_RUNS).decide(side([0] * 50), side([1, 1] + [0] * 48), fresh)
    assert tie.details["look"] == 1 and negative.details["look"] == 1 and not negative.accept
    weak = PairedGate(look_from=1.5).decide(side([1] + [0] * 49), side([0] * 50), fresh)
    assert weak.details["t"] == pytest.approx(1.0) and weak.details["look"] == 1
    assert all(len(c) < 50 for c in fresh.calls)  # flip confirmations only, never all 50 tasks
    off = Fresh((CAND, INC))
    PairedGate(GateConfig(confirm_flips=False)).decide(side(CAND), side(INC), off)
    assert off.calls == []


def test_second_look_levels_split_alpha():
    from harnessopt.gate import stats

    assert stats.look_levels(0.95, True) == pytest.approx((0.975, 0.975))  # the even split
    assert stats.look_levels(0.9, False) == (0.9, 0.9)
    assert PairedGate(TWO_RUNS).levels(can_rerun=True).looks == pytest.approx((0.99, 0.96))
    assert PairedGate(TWO_RUNS, first_share=0.5).levels(can_rerun=True).looks == pytest.approx((0.975, 0.975))
    one = PairedGate(second_look=0).decide(side([1] * 10 + [0] * 40), side([0] * 50))
    assert one.details["look_levels"] == [0.95]


def test_confirm_flips_false_tests_its_one_look_at_the_full_alpha():
    """No rerun can happen, so no second look: the only look spends all of alpha (0.95, not 0.975)."""
    cand, inc = side([1] * 9 + [0] * 41), side([0] * 50)
    off = PairedGate(GateConfig(confirm_flips=False)).decide(cand, inc, Fresh((CAND, INC)))
    assert off.details["look_levels"] == [0.95] and off.details["level"] == 0.95
    on = PairedGate(TWO_RUNS).decide(cand, inc, Fresh(([1] * 9 + [0] * 41, [0] * 50)))
    assert on.details["look_levels"] == pytest.approx([0.99, 0.96])
    assert off.dead_zone < on.details.get("first_look", {"dead_zone": on.dead_zone})["dead_zone"]
    # 8 fixes of 50 clear the one look at 0.95 (not a first look at 0.99)
    eight = side([1] * 8 + [0] * 42)
    assert PairedGate(GateConfig(confirm_flips=False)).decide(eight, inc).accept
    assert PairedGate(TWO_RUNS).levels(can_rerun=False).looks == (0.95,)


class PerCall:
    """A ConfirmFn whose i-th call returns the i-th scripted (cand, inc) score for every asked id."""

    def __init__(self, *scripts: tuple[float, float]):
        self.scripts, self.calls = scripts, []

    def __call__(self, ids):
        c, i = self.scripts[len(self.calls) % len(self.scripts)]
        self.calls.append(list(ids))
        return {t: [Outcome(score=c)] for t in ids}, {t: [Outcome(score=i)] for t in ids}


def test_with_k_epochs_a_flip_is_rerun_k_times_so_one_rerun_cannot_override_k_runs():
    runs = 3
    inc = {f"t{i:03d}": [Outcome(0)] * runs for i in range(20)}
    cand = {f"t{i:03d}": [Outcome(1)] * runs if i < 6 else [Outcome(0)] * runs for i in range(20)}
    # rerun: 1 tie then 2 fixes -> the rerun means are 2/3 vs 0: the flip reproduces
    confirm = PerCall((0.0, 0.0), (1.0, 0.0), (1.0, 0.0))
    d = PairedGate(second_look=0).decide(cand, inc, confirm)
    assert [len(c) for c in confirm.calls] == [6, 6, 6] and d.details["reruns"] == 6 * 2 * runs
    assert d.fixed == [f"t{i:03d}" for i in range(6)] and d.noise_flips == []
    assert d.delta == pytest.approx(6 * (1 + 2 / 3) / 2 / 20)
    # before: the first (tie) rerun alone set all six differences to 0 and called them noise


def test_second_look_weighs_every_run_the_same_with_k_epochs():
    inc = {f"t{i:03d}": [Outcome(0)] * 2 for i in range(50)}
    cand = {f"t{i:03d}": [Outcome(1)] * 2 if i < 4 else [Outcome(0)] * 2 for i in range(50)}
    confirm = PerCall((1.0, 0.0), (1.0, 0.0), (0.0, 0.0), (0.0, 0.0))  # flips x2, then 2 tie looks
    d = PairedGate(TWO_RUNS).decide(cand, inc, confirm)
    assert d.details["look"] == 2 and [len(c) for c in confirm.calls] == [4, 4, 50, 50]
    # flipped tasks: first-look d = 1 (K = 2 runs), fresh d = 0 (k = 2 runs): (2*1 + 2*0) / 4
    # (the old weights (d_first + k d_fresh) / (1 + k) gave the 2 first runs the weight of one)
    assert d.delta == pytest.approx(4 * 0.5 / 50) and d.details["epochs_total"] == 4


def test_nan_scores_never_pass():
    nan = float("nan")
    cand = {f"t{i:03d}": [Outcome(score=nan, soft=nan, tokens=100)] for i in range(200)}
    inc = {f"t{i:03d}": [Outcome(score=float(i < 4), soft=0.0, tokens=1000)] for i in range(200)}
    for secondary in ("none", "soft", "cost"):  # before: 'accepted: +nan inside dead zone; token saving'
        d = PairedGate(GateConfig(secondary=secondary)).decide(cand, inc)
        assert not d.accept and d.delta == pytest.approx(-0.02) and "nan" not in d.reason, (
            secondary,
            d.reason,
        )
    half = {t: [Outcome(score=nan)] if int(t[1:]) < 10 else [Outcome(score=1.0)] for t in inc}
    d = PairedGate(TWO_RUNS).decide(half, inc)
    assert d.delta == pytest.approx(186 / 200) and d.accept and "nan" not in d.reason


def test_a_rerun_that_omits_tasks_keeps_their_first_evidence():
    class Omitting(Fresh):
        def __call__(self, ids):
            cand, inc = super().__call__(ids)
            drop = sorted(cand)[:3]
            return {t: v for t, v in cand.items() if t not in drop}, {
                t: v for t, v in inc.items() if t != drop[-1]
            }

    d = PairedGate(TWO_RUNS).decide(side(CAND), side(INC), Omitting((CAND, INC)))
    assert d.details["look"] == 2 and d.details["rerun_missing"] == ["t000", "t001", "t002"]
    assert d.n == 50


def test_smoke_verdict_rejects_only_reproduced_crashes_the_incumbent_does_not_have():
    from harnessopt.gate.smoke import smoke_verdict

    ok, crash = [Outcome(1.0)], [Outcome(0.0, crashed=True)]
    first = {"a": ok, "flaky": crash, "shared": crash, "own": crash, "unchecked": crash}
    again_c = {"flaky": ok, "shared": crash, "own": crash}  # 'unchecked' was not rerun
    again_i = {"flaky": ok, "shared": crash, "own": ok}
    v = smoke_verdict(first, again_c, again_i, {})
    assert v.crashed == ["flaky", "own", "shared", "unchecked"] and v.flaky == ["flaky"]
    assert v.shared == ["shared"] and v.reproduced == ["own", "unchecked"] and v.reject
    assert not smoke_verdict({"a": ok}, {}, {}, {}).reject


def test_futility_stops_only_when_even_all_remaining_tasks_cannot_make_it_accept():
    inc = side([1] * 30 + [0] * 20)  # t000..t029 passed, t030..t049 failed
    ids = sorted(inc)
    # the first 40 done: 10 of the incumbent's passes broken, the rest ties; 10 left, all fixable
    done = {t: [Outcome(0.0 if i < 10 else inc[t][0].score)] for i, t in enumerate(ids[:40])}
    gate = PairedGate(TWO_RUNS)
    assert gate.futile(done, inc, ids[40:])  # best case (-10 + 10) / 50 = 0: no look can accept
    early = {t: done[t] for t in ids[:20]}
    assert not gate.futile(early, inc, ids[20:])  # 20 fixable left: best case +10 / 50
    assert not PairedGate(GateConfig(secondary="soft")).futile(done, inc, ids[40:])  # soft may accept inside
    assert not gate.futile(done, inc, [])  # nothing left to save
    # one look (no reruns): futile once the best case cannot clear the smallest dead zone, 0.054 at m=50
    ties = {t: [Outcome(inc[t][0].score)] for t in ids[:48]}
    one = PairedGate(second_look=0)
    assert one.futile(ties, inc, ids[48:], can_rerun=False)  # best case 2/50 = 0.04
    assert not one.futile({t: ties[t] for t in ids[:47]}, inc, ids[47:], can_rerun=False)  # 3/50 = 0.06
    assert not gate.futile(ties, inc, ids[48:])  # two looks: 0.04 > 0 might still clear a second look
    # the decision shows the bar the stop used: 0 with two looks, the smallest dead zone with one
    assert gate.futility_bar(done, inc, ids[40:]) == 0.0
    bar = one.futility_bar(ties, inc, ids[48:], can_rerun=False)
    assert 0.04 < bar < 0.06
    d = futile_decision(ties, inc, ids[48:], 1, bar)
    assert d.dead_zone == bar and d.reason.endswith("could not clear the dead zone; 2 rollouts saved")
