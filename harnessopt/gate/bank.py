"""The incumbent's cached val runs, split for the gate (docs/gate.md, "Cached incumbent runs").

With ``gate.incumbent_epochs`` above ``gate.epochs`` the loop measures and caches more runs of the
incumbent than the first look uses. The first look sees the first ``epochs`` runs of each task, as
the candidate's; the runs past them are a bank: each time the gate reruns some tasks (flip
confirmation, the second look) the incumbent's side takes the next banked run of each task, and
only a task whose bank is empty runs the incumbent again. Banked runs were measured before the
candidate existed and independently of it, so they are as fresh to the gate as a new run, and the
selection of which tasks to rerun (on the first look's runs) cannot have seen them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from statistics import NormalDist

from harnessopt.protocols import Outcome, Outcomes

# the one-sided level at which a bank's later runs count as lower than its earlier ones (it only
# fails a round, so it spends no alpha: strict, so a model's run noise does not trip it)
CHANGED_CONFIDENCE = 0.9999


def first_look(cached: Outcomes, epochs: int) -> Outcomes:
    """Each task's first ``epochs`` runs: what the first look compares with the candidate's."""
    return {t: list(runs[:epochs]) for t, runs in cached.items()}


class IncumbentBank:
    """The incumbent's runs past the first look, drawn one per task per rerun."""

    def __init__(self, cached: Outcomes, epochs: int):
        self.first = first_look(cached, epochs)
        self._rest: dict[str, list[Outcome]] = {t: list(runs[epochs:]) for t, runs in cached.items()}
        self.drawn = 0
        self.ran = 0

    def draw(self, ids: Sequence[str], run: Callable[[list[str]], Outcomes]) -> Outcomes:
        """One incumbent run for each of ``ids``: banked where one is left, else ``run(missing)``."""
        got: dict[str, list[Outcome]] = {}
        missing = []
        for t in ids:
            rest = self._rest.get(t)
            if rest:
                got[t] = [rest.pop(0)]
                self.drawn += 1
            else:
                missing.append(t)
        if missing:
            fresh = run(missing)
            self.ran += sum(len(v) for v in fresh.values())
            got.update({t: list(runs) for t, runs in fresh.items()})
        return got


def changed_since(earlier: Outcomes, later: Outcomes) -> tuple[float, float, int] | None:
    """Whether the incumbent's ``later`` runs (a bank topped up in a round after its accept) score
    significantly lower than its ``earlier`` ones (its confirmation, when it was the candidate):
    (the mean difference of task means, the z of the test, tasks), or None. The incumbent's code
    is the optimizer's: a harness that sabotages its own later runs (it reads the clock or the
    task's split) lowers the bar the next candidate is judged by, and a regression was accepted as
    a +0.442 gain (QA).

    The test: with no change, a task's runs are exchangeable, so the sum of its later scores is a
    draw without replacement from all its runs (mean ``n_l * m``, variance ``n_l (N - n_l) / (N - 1)
    * var``: the hypergeometric for pass/fail); summed over tasks, with half a pass of continuity
    correction, one-sided at ``CHANGED_CONFIDENCE``. Crashed runs (timeouts, outages) are left out:
    they say nothing of what the code does (QA: slow upstream calls failed a round as "changed").
    Run-level, so 3 passes then 8 failures on half the tasks is seen, which a test on task means at
    that level was not."""
    total = expected = variance = 0.0
    diffs = []
    for t, runs in later.items():
        before = [o.score for o in earlier.get(t, ()) if not o.crashed]
        after = [o.score for o in runs if not o.crashed]
        if not before or not after:
            continue
        xs = before + after
        n, k = len(xs), len(after)
        m = sum(xs) / n
        total += sum(after)
        expected += k * m
        variance += k * (n - k) / (n - 1) * sum((x - m) ** 2 for x in xs) / n
        diffs.append(sum(after) / k - sum(before) / len(before))
    if len(diffs) < 2 or variance <= 0.0:
        return None
    z = (total - expected + 0.5) / math.sqrt(variance)  # half a pass of continuity: the sums are discrete
    if z < -NormalDist().inv_cdf(CHANGED_CONFIDENCE):
        return sum(diffs) / len(diffs), z, len(diffs)
    return None
