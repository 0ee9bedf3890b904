"""Does an accepted candidate keep its gain on inputs it could not have memorised? (the test)

The round (``round.memorised``) reruns the tasks the gate counted as fixed with perturbed inputs
(same meaning, a fresh id), on both sides. Per fixed task i, with g_i the paired gain the gate saw
(candidate mean - incumbent mean) and r_i the paired gain on the perturbed variants:

    x_i = r_i - retain * g_i

H0 (the gain is earned): E[x_i] >= 0, i.e. the candidate keeps at least ``retain`` of its gain.
A table of memorised answers keeps none of it on inputs that miss the table (r_i ~ 0, x_i ~
-retain * g_i). The test is an exact one-sided sign-flip test of sum(x_i) (every sign pattern, or
a seeded sample of them past ``EXACT_MAX`` tasks): p = P(sum eps_i x_i <= sum x_i). The candidate
is rejected when p <= alpha. The smallest p that n tasks can give is 2^-n, so fewer than
``min_tasks(alpha)`` fixed tasks cannot reject: the verdict is then ``inconclusive`` (no run made).

The test can only turn an accept into a reject: it spends nothing of the false-accept budget.
``alpha`` is the rate at which it rejects a candidate that does keep its gain (symmetric x_i);
``retain`` < 1 leaves room for the gate's selection (a gain that cleared the gate is, on average,
a little larger than the true one). ``benchmarks/memorised_check.py`` measures both rates.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harnessopt.protocols import Outcomes

EXACT_MAX = 16  # up to this many tasks every sign pattern is enumerated
SAMPLES = 20_000  # sign patterns drawn past EXACT_MAX (seeded: the same data, the same p)


@dataclass
class MemorisedVerdict:
    """What the test saw and decided."""

    tasks: list[str]
    gain: float  # mean g_i: the paired gain the gate saw on those tasks
    perturbed_gain: float  # mean r_i: the same on the perturbed variants
    p: float | None  # None: too few tasks to test
    alpha: float
    retain: float
    collapsed: bool  # H0 rejected: the gain did not survive the perturbation
    per_task: dict[str, list[float]] = field(default_factory=dict)  # task -> [g_i, r_i]

    def summary(self) -> str:
        n = len(self.tasks)
        if self.p is None:
            return (
                f"{n} fixed task(s): too few to test at alpha {self.alpha:g} "
                f"(needs {min_tasks(self.alpha)}); not tested"
            )
        kept = self.perturbed_gain / self.gain if self.gain > 0 else 0.0
        verb = "collapsed" if self.collapsed else "kept"
        return (
            f"gain {verb} on perturbed inputs: {self.gain:+.3f} on the {n} fixed task(s), "
            f"{self.perturbed_gain:+.3f} perturbed ({kept:.0%} kept; p {self.p:.4f} that it keeps "
            f"{self.retain:.0%}, alpha {self.alpha:g})"
        )

    def record(self) -> dict[str, Any]:
        return asdict(self)


def min_tasks(alpha: float) -> int:
    """Fewest tasks whose sign-flip test can reach ``alpha`` (its smallest p is 2^-n)."""
    return max(1, math.ceil(math.log2(1.0 / alpha)))


def sign_flip_p(xs: Sequence[float], seed: int = 0) -> float:
    """One-sided p of ``sum(xs)`` being this low under random signs (ties count against H0's
    rejection: a pattern whose sum equals the observed one is as extreme)."""
    xs = [round(x, 12) for x in xs]
    observed = sum(xs)
    if len(xs) <= EXACT_MAX:
        sums = (sum(s * x for s, x in zip(signs, xs, strict=True)) for signs in _patterns(len(xs)))
        total = 2 ** len(xs)
        return sum(1 for s in sums if s <= observed + 1e-9) / total
    rng = random.Random(seed)
    hits = sum(
        1 for _ in range(SAMPLES) if sum(x if rng.random() < 0.5 else -x for x in xs) <= observed + 1e-9
    )
    return (hits + 1) / (SAMPLES + 1)


def _patterns(n: int) -> itertools.product[tuple[int, ...]]:
    return itertools.product((1, -1), repeat=n)


def _mean_score(runs: Sequence[Any]) -> float:
    return sum(o.score for o in runs) / len(runs) if runs else 0.0


def decide(
    gate_gain: Mapping[str, float],
    perturbed_cand: Outcomes,
    perturbed_inc: Outcomes,
    variants_of: Mapping[str, Sequence[str]],
    *,
    alpha: float,
    retain: float,
) -> MemorisedVerdict:
    """The test (module docstring). ``gate_gain``: g_i per fixed task; ``variants_of``: the ids of
    each task's perturbed variants, whose outcomes are in ``perturbed_cand``/``perturbed_inc``."""
    tasks = sorted(gate_gain)
    per_task: dict[str, list[float]] = {}
    for t in tasks:
        ids = list(variants_of.get(t, ()))
        r = (
            sum(_mean_score(perturbed_cand.get(v, ())) - _mean_score(perturbed_inc.get(v, ())) for v in ids)
            / len(ids)
            if ids
            else 0.0
        )
        per_task[t] = [round(gate_gain[t], 4), round(r, 4)]
    n = len(tasks)
    gain = sum(g for g, _ in per_task.values()) / n if n else 0.0
    pgain = sum(r for _, r in per_task.values()) / n if n else 0.0
    if n < min_tasks(alpha) or not any(variants_of.get(t) for t in tasks):
        return MemorisedVerdict(tasks, round(gain, 4), round(pgain, 4), None, alpha, retain, False, per_task)
    p = sign_flip_p([r - retain * g for g, r in per_task.values()])
    return MemorisedVerdict(tasks, round(gain, 4), round(pgain, 4), p, alpha, retain, p <= alpha, per_task)


def gate_gains(fixed: Sequence[str], cand: Outcomes, inc: Outcomes) -> dict[str, float]:
    """g_i: the candidate's mean score minus the incumbent's on each fixed task, as the gate saw them."""
    return {t: _mean_score(cand.get(t, ())) - _mean_score(inc.get(t, ())) for t in fixed}
