"""Paired statistics for the gate and for ``harnessopt audit`` (stdlib only, no scipy).

Everything here is a pure function of per-task outcomes. The gate compares a candidate with the
incumbent on the same val tasks, so the unit of evidence is the per-task difference
``d_i = mean_k cand_{i,k} - mean_k inc_{i,k}`` (k over epochs). See docs/gate.md for the dead
zone formula and the assumptions behind it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any

from harnessopt.protocols import Outcomes

SOLVED_THRESHOLD = 0.5
"""A *task* is solved when its mean score over its runs (epochs) is at least this.

Two words, two meanings, used the same way everywhere (docs/gate.md, "The paired gate" step 1):
a *run* passed when its scorer gave full credit (``ScoreResult.passed``, the trajectory's
``passed:`` field, the train pass count); a *task* is solved over its runs (the gate's fixed and
broken lists: a fixed task is solved by the candidate and not by the incumbent)."""


# --------------------------------------------------------------------------- per-task summaries


def task_means(outcomes: Outcomes) -> dict[str, float]:
    """Mean score per task over its epochs (tasks without any outcome are left out).

    A score that is not a finite number (NaN, inf) counts as 0, a failed run: it must never pass.
    """
    out = {}
    for tid, runs in outcomes.items():
        if runs:
            total = sum(o.score for o in runs)  # a NaN or inf anywhere makes the sum non-finite
            out[tid] = (total if math.isfinite(total) else sum(finite(o.score) for o in runs)) / len(runs)
    return out


def finite(x: float | None) -> float:
    """``x`` when it is a finite number, else 0 (a failed run; ``max(0.0, nan)`` would be 0 or nan)."""
    return float(x) if x is not None and math.isfinite(x) else 0.0


def solved(mean_score: float) -> bool:
    """Is a task with this mean score over its runs solved? (see ``SOLVED_THRESHOLD``)"""
    return mean_score >= SOLVED_THRESHOLD


def paired_diffs(candidate: Outcomes, incumbent: Outcomes) -> tuple[list[str], list[float]]:
    """Task ids present on both sides (sorted) and their differences candidate - incumbent."""
    cand, inc = task_means(candidate), task_means(incumbent)
    ids = sorted(set(cand) & set(inc))
    return ids, [cand[i] - inc[i] for i in ids]


def flips(candidate: Outcomes, incumbent: Outcomes) -> tuple[list[str], list[str]]:
    """(fixed, broken): tasks solved only by the candidate, and only by the incumbent."""
    cand, inc = task_means(candidate), task_means(incumbent)
    ids = sorted(set(cand) & set(inc))
    fixed = [i for i in ids if solved(cand[i]) and not solved(inc[i])]
    broken = [i for i in ids if solved(inc[i]) and not solved(cand[i])]
    return fixed, broken


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def sample_sd(xs: Sequence[float]) -> float:
    """Sample standard deviation (n-1 denominator); 0 for fewer than two values."""
    n = len(xs)
    if n < 2:
        return 0.0
    mu = mean(xs)
    return math.sqrt(max(0.0, sum((x - mu) ** 2 for x in xs) / (n - 1)))


# --------------------------------------------------------------------------- Student t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz evaluation)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(log_front)
    # The continued fraction converges fast only on one side of the mean; use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """Inverse of ``t_cdf``: the t with P(T <= t) = p. Bisection on the exact CDF (cached)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, max(1.0, NormalDist().inv_cdf(p))
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- dead zone


def sd_floor(m: int) -> float:
    """Smallest paired SD the gate assumes: that of one flipped task among ``m`` (1/sqrt(m)).

    With no observed disagreement (all ties) the sample SD is 0, which would make any positive
    mean "significant". The floor says: m tasks cannot rule out one unseen flip.
    """
    return 1.0 / math.sqrt(m) if m > 0 else 1.0


def dead_zone(
    m: int, s_d: float, confidence: float = 0.95, min_effect: float = 0.0, step: float = 1.0
) -> float:
    """Dead zone Δ = t_{conf, m-1} * max(s_d, 1/sqrt(m)) / sqrt(m) + step/m + min_effect.

    A one-sided Student-t bound on the mean paired difference, with a continuity correction of
    one lattice step: a pass/fail flip moves a task's difference by ``step`` (1/epochs), so the
    mean moves by step/m, and a handful of flips is then judged about as the exact sign test
    would judge it (docs/gate.md). Use ``step=0`` for a continuous metric. Δ shrinks like 1/sqrt(m)
    and grows with the observed paired spread. With m < 2 there is no variance to estimate, so
    Δ is the widest possible difference (1.0) plus ``min_effect``.
    """
    if m < 2:
        return 1.0 + min_effect
    t = t_quantile(confidence, m - 1)
    return t * max(s_d, sd_floor(m)) / math.sqrt(m) + step / m + min_effect


def look_levels(confidence: float, two_looks: bool) -> tuple[float, float]:
    """One-sided confidence of the first and of the second look (no secondary test).

    Two looks split the false-accept budget alpha = 1 - confidence evenly (Bonferroni, the
    simplest alpha-spending rule): each look tests at alpha/2, so by the union bound the chance
    that a no-effect candidate clears either look is at most alpha, whatever the correlation
    between the looks (they share the first-look runs). One look keeps the full level.
    """
    lv = round_levels(1.0 - confidence, 2 if two_looks else 1, first_share=0.5)
    return lv.looks[0], lv.looks[-1]


@dataclass(frozen=True)
class Levels:
    """How one round spends its false-accept budget ``alpha`` (docs/gate.md, "One alpha a round").

    Every path to an accept is a test with its own share: the secondary test (when configured)
    gets ``alpha * secondary_share``; the primary test gets the rest, of which a first look spends
    ``first_share`` and a second look the remainder. By the union bound a candidate without the
    effect each test looks for is accepted with probability at most ``alpha``, whatever the
    correlation between the tests.
    """

    alpha: float
    looks: tuple[float, ...]  # one-sided confidence of each look of the primary test
    secondary: float | None  # one-sided confidence of the secondary test; None without one

    def spent(self) -> float:
        """The alpha the levels add up to (equals ``alpha``)."""
        return sum(1.0 - c for c in self.looks) + (1.0 - self.secondary if self.secondary else 0.0)


def round_levels(alpha: float, looks: int, secondary_share: float = 0.0, first_share: float = 0.2) -> Levels:
    """Split ``alpha`` between one or two looks of the primary test and an optional secondary test.

    With two looks the first gets ``first_share`` of the primary's alpha: the first look sees one
    run per task and clears only clear wins; the second sees three and decides the close calls,
    so it gets the larger share (benchmarks/gate_simulation.py, m = 50: power on +0.10 0.354
    against 0.302 with an even split, for 0.005 more false accepts).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    a_sec = alpha * secondary_share if secondary_share > 0 else 0.0
    a_pri = alpha - a_sec
    shares = (first_share, 1.0 - first_share) if looks >= 2 else (1.0,)
    return Levels(alpha, tuple(1.0 - a_pri * f for f in shares), 1.0 - a_sec if a_sec else None)


def run_alpha_for(run_alpha: float, run_rounds: int, decision: int) -> float:
    """The alpha of the ``decision``-th gate decision (1-based) of a run budgeted at ``run_alpha``:
    Bonferroni over ``run_rounds`` planned decisions, so that P(any no-effect edit accepted in the
    run) <= run_alpha by the union bound; 0 (nothing can be accepted) once they are spent."""
    return run_alpha / run_rounds if 1 <= decision <= run_rounds else 0.0


def any_false_accept_bound(alpha: float, decisions: int) -> float:
    """Upper bound on P(at least one no-effect edit accepted) over ``decisions`` gate decisions at
    ``alpha`` each (the union bound; 1 - (1 - alpha)^n if the decisions were independent)."""
    return min(1.0, alpha * decisions)


def t_statistic(diffs: Sequence[float]) -> float:
    """mean / (sd / sqrt(m)); +-inf when every difference is the same non-zero value."""
    m, mu, s = len(diffs), mean(diffs), sample_sd(diffs)
    if m == 0:
        return 0.0
    if s == 0.0:
        return 0.0 if mu == 0 else math.copysign(math.inf, mu)
    return mu / (s / math.sqrt(m))


def sign_test_p(positive: int, negative: int) -> float:
    """Exact one-sided sign test (McNemar on discordant pairs): P(X >= positive), X~Bin(n, 1/2)."""
    n = positive + negative
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(positive, n + 1)) / 2.0**n


# --------------------------------------------------------------------------- audit


def paired_interval(diffs: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided t interval of the mean paired difference (degenerate when m < 2), clipped to
    [-1, 1], the range of a difference of scores in [0, 1].

    When every difference is the same (all ties, s = 0) the SD is the gate's floor (``sd_floor``):
    m tasks that agree everywhere cannot rule out one unseen flip, so the interval is never [0, 0].
    """
    m, mu = len(diffs), mean(diffs)
    if m < 2:
        return (-1.0, 1.0) if m == 0 else (max(-1.0, mu - 1.0), min(1.0, mu + 1.0))
    s = sample_sd(diffs) or sd_floor(m)
    half = t_quantile(0.5 + confidence / 2.0, m - 1) * s / math.sqrt(m)
    return max(-1.0, mu - half), min(1.0, mu + half)


def bootstrap_interval(
    diffs: Sequence[float], confidence: float = 0.95, reps: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean paired difference (resampling tasks)."""
    import random

    if len(diffs) < 2 or sample_sd(diffs) == 0.0:
        return paired_interval(diffs, confidence)  # nothing to resample: the t interval with the floor
    rng = random.Random(seed)
    m = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=m)) / m for _ in range(reps))
    alpha = (1.0 - confidence) / 2.0
    return means[int(alpha * (reps - 1))], means[int(math.ceil((1.0 - alpha) * (reps - 1)))]


def audit_stats(base: Outcomes, best: Outcomes, confidence: float = 0.95) -> dict[str, Any]:
    """Held-out gain of ``best`` over ``base`` on the same (test) tasks, with a paired interval.

    Returns gain, interval (t), bootstrap interval, n, base/best scores, fixed and broken ids,
    and ids present on only one side (``missing``), which are left out of the comparison.
    """
    ids, diffs = paired_diffs(best, base)
    b, s = task_means(base), task_means(best)
    fixed, broken = flips(best, base)
    lo, hi = paired_interval(diffs, confidence)
    blo, bhi = bootstrap_interval(diffs, confidence)
    return {
        "n": len(ids),
        "gain": mean(diffs),
        "interval": [lo, hi],
        "bootstrap_interval": [blo, bhi],
        "confidence": confidence,
        "base_score": mean([b[i] for i in ids]),
        "best_score": mean([s[i] for i in ids]),
        "sd": sample_sd(diffs),
        "fixed": fixed,
        "broken": broken,
        "missing": sorted(set(b) ^ set(s)),
    }
