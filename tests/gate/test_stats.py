import math

import pytest

from harnessopt.gate import stats
from harnessopt.protocols import Outcome


def runs(*scores: float) -> list[Outcome]:
    return [Outcome(score=s) for s in scores]


@pytest.mark.parametrize(
    "p,df,expected",
    [
        (0.975, 1, 12.706),
        (0.95, 4, 2.132),
        (0.975, 4, 2.776),
        (0.95, 15, 1.753),
        (0.95, 49, 1.677),
        (0.99, 10, 2.764),
        (0.95, 2, 2.920),
        (0.995, 30, 2.750),
        (0.95, 10**6, 1.645),
    ],
)
def test_t_quantile_matches_table(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_is_inverse_of_cdf_and_symmetric():
    for df in (1, 3, 7, 40):
        for p in (0.6, 0.9, 0.975):
            q = stats.t_quantile(p, df)
            assert stats.t_cdf(q, df) == pytest.approx(p, abs=1e-9)
            assert stats.t_quantile(1 - p, df) == pytest.approx(-q)
    assert stats.t_quantile(0.5, 5) == 0.0
    with pytest.raises(ValueError):
        stats.t_quantile(1.0, 5)


def test_betainc_known_values():
    assert stats.betainc(1, 1, 0.3) == pytest.approx(0.3)
    assert stats.betainc(2.5, 2.5, 0.5) == pytest.approx(0.5)
    assert stats.betainc(2, 1, 0.4) == pytest.approx(0.16)  # I_x(a,1) = x^a
    assert stats.betainc(3, 4, 0.0) == 0.0 and stats.betainc(3, 4, 1.0) == 1.0


def test_task_means_over_epochs_and_pairing():
    cand = {"a": runs(1, 1, 0), "b": runs(0, 0, 0), "c": runs(1)}
    inc = {"a": runs(0, 0, 0), "b": runs(1, 1, 0), "d": runs(1)}
    assert stats.task_means(cand)["a"] == pytest.approx(2 / 3)
    ids, diffs = stats.paired_diffs(cand, inc)
    assert ids == ["a", "b"]
    assert diffs == pytest.approx([2 / 3, -2 / 3])
    assert stats.flips(cand, inc) == (["a"], ["b"])


def test_dead_zone_positive_on_all_ties_and_shrinks_with_m():
    zones = [stats.dead_zone(m, 0.0) for m in (5, 16, 50, 200)]
    assert all(z > 0 for z in zones)
    assert zones == sorted(zones, reverse=True)
    # floor: an all-ties sample is judged as if one flip were hidden in it
    assert stats.dead_zone(50, 0.0) == pytest.approx(stats.t_quantile(0.95, 49) / 50 + 1 / 50)
    # grows with the observed spread and with the confidence, plus min_effect
    assert stats.dead_zone(50, 0.5) > stats.dead_zone(50, 0.2)
    assert stats.dead_zone(50, 0.5, 0.99) > stats.dead_zone(50, 0.5, 0.95)
    assert stats.dead_zone(50, 0.5, min_effect=0.02) == pytest.approx(stats.dead_zone(50, 0.5) + 0.02)
    assert stats.dead_zone(1, 0.0) == 1.0


def test_dead_zone_continuity_step_follows_epochs():
    base = stats.dead_zone(20, 0.3, step=0.0)
    assert stats.dead_zone(20, 0.3, step=1.0) == pytest.approx(base + 1 / 20)
    assert stats.dead_zone(20, 0.3, step=1 / 4) == pytest.approx(base + 1 / 80)


def test_dead_zone_agrees_with_sign_test_on_a_few_flips():
    # m=50, only fixes: 3-0 (sign p=.125) and 4-0 (.0625) stay inside, 5-0 (.031) clears it.
    for fixes, clears in ((3, False), (4, False), (5, True)):
        d = [1.0] * fixes + [0.0] * (50 - fixes)
        zone = stats.dead_zone(50, stats.sample_sd(d))
        assert (stats.mean(d) > zone) is clears
        assert (stats.sign_test_p(fixes, 0) <= 0.05) is clears


def test_sign_test_and_t_statistic():
    assert stats.sign_test_p(3, 0) == pytest.approx(0.125)
    assert stats.sign_test_p(0, 0) == 1.0
    assert stats.sign_test_p(7, 1) == pytest.approx(9 / 256)
    assert stats.t_statistic([0.0, 0.0]) == 0.0
    assert stats.t_statistic([1.0, 1.0]) == math.inf
    assert stats.t_statistic([1.0, 0.0, 1.0, 0.0]) == pytest.approx(0.5 / (math.sqrt(1 / 3) / 2))


def test_paired_interval_known_case():
    d = [0.1, 0.2, 0.3, 0.4, 0.5]
    lo, hi = stats.paired_interval(d, 0.95)
    half = 2.776 * stats.sample_sd(d) / math.sqrt(5)
    assert (lo, hi) == pytest.approx((0.3 - half, 0.3 + half), abs=1e-3)
    assert stats.paired_interval([], 0.95) == (-1.0, 1.0)


def test_paired_interval_stays_within_the_range_of_a_gain():
    """All 10 tasks fixed but one: a gain of +0.9 whose t interval would reach past +1."""
    d = [1.0] * 9 + [0.0]
    lo, hi = stats.paired_interval(d, 0.95)
    assert hi == 1.0 and 0.6 < lo < 0.9
    assert stats.paired_interval([-x for x in d], 0.95) == (-1.0, -lo)
    assert stats.audit_stats(
        {f"t{i}": runs(0) for i in range(10)}, {f"t{i}": runs(x) for i, x in enumerate(d)}
    )["interval"] == [lo, 1.0]


def test_audit_stats_reports_gain_interval_and_flips():
    base = {f"t{i}": runs(0) for i in range(30)} | {f"p{i}": runs(1) for i in range(10)}
    best = {f"t{i}": runs(1 if i < 12 else 0) for i in range(30)} | {
        f"p{i}": runs(1 if i else 0) for i in range(10)
    }
    best["extra"] = runs(1)
    out = stats.audit_stats(base, best)
    assert out["n"] == 40
    assert out["gain"] == pytest.approx(11 / 40)
    lo, hi = out["interval"]
    assert lo < out["gain"] < hi and lo > 0
    blo, bhi = out["bootstrap_interval"]
    assert blo < out["gain"] < bhi
    assert len(out["fixed"]) == 12 and out["broken"] == ["p0"] and out["missing"] == ["extra"]


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 15, 49, 199, 1000])
@pytest.mark.parametrize("p", [0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995, 0.9995])
def test_t_quantile_and_cdf_agree_with_scipy(p: float, df: int) -> None:
    """The hand-written quantile (no scipy at run time) against scipy's, on the gate's levels."""
    scipy_stats = pytest.importorskip("scipy.stats")
    scipy_special = pytest.importorskip("scipy.special")
    assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-7, abs=1e-9)
    assert stats.t_cdf(1.7, df) == pytest.approx(scipy_stats.t.cdf(1.7, df), rel=1e-9)
    assert stats.betainc(df / 2, 0.5, 0.3) == pytest.approx(scipy_special.betainc(df / 2, 0.5, 0.3), rel=1e-9)


def test_a_run_passes_on_full_credit_and_a_task_is_solved_over_its_runs() -> None:
    """The two words of docs/gate.md: 'passed' (one run, full credit) and 'solved' (a task, mean >= 0.5)."""
    from harnessopt.workspace.scoring import ScoreResult

    assert ScoreResult(score=1.0, feedback="").passed
    assert not ScoreResult(score=0.6, feedback="").passed  # partial credit is not a pass
    assert not ScoreResult(score=1.0, feedback="", error="boom").passed
    runs = {
        "t": [Outcome(score=1.0), Outcome(score=0.0)],
        "u": [Outcome(score=0.6)],
        "v": [Outcome(score=0.4)],
    }
    assert {t: stats.solved(m) for t, m in stats.task_means(runs).items()} == {
        "t": True,
        "u": True,
        "v": False,
    }
    fixed, broken = stats.flips(runs, {t: [Outcome(score=0.0)] for t in runs})
    assert fixed == ["t", "u"] and broken == []


def test_audit_interval_does_not_collapse_when_every_difference_is_zero() -> None:
    same = {f"t{i}": runs(i % 2) for i in range(40)}
    out = stats.audit_stats(same, same)
    lo, hi = out["interval"]
    assert out["gain"] == 0.0 and lo < 0 < hi
    assert hi == pytest.approx(stats.t_quantile(0.975, 39) / 40)  # the SD of one flip among 40
    blo, bhi = out["bootstrap_interval"]
    assert blo < 0 < bhi
    assert stats.paired_interval([0.1, 0.2, 0.3, 0.4, 0.5]) != stats.paired_interval([0.3] * 5)


def test_task_means_count_a_non_finite_score_as_a_failed_run() -> None:
    out = {"a": [Outcome(score=float("nan")), Outcome(score=1.0)], "b": [Outcome(score=float("inf"))]}
    assert stats.task_means(out) == {"a": 0.5, "b": 0.0}
