"""Acceptance rules of other tools, measured against harnessopt's gate by ``gate_simulation.py``.

``minibatch`` (GEPA's default), ``mean`` (SkillOpt) and ``deadband`` (SkillOpt-Lite's fixed
band). They are baselines for the simulation, not parts users choose, so they live here.
"""

from __future__ import annotations

import random

from harnessopt.gate import stats
from harnessopt.protocols import ConfirmFn, GateDecision, GatePolicy, Outcomes


def _sign(x: float) -> str:
    return f"{x:+.3f}"


def _simple(
    name: str, accept: bool, candidate: Outcomes, incumbent: Outcomes, ids: list[str], rule: str, zone: float
) -> GateDecision:
    c, i = stats.task_means(candidate), stats.task_means(incumbent)
    cs, iscore = stats.mean([c[t] for t in ids]), stats.mean([i[t] for t in ids])
    fixed, broken = stats.flips({t: candidate[t] for t in ids}, {t: incumbent[t] for t in ids})
    verdict = "accepted" if accept else "rejected"
    reason = f"{verdict}: {_sign(cs - iscore)} {rule} (n={len(ids)}, policy {name})"
    return GateDecision(
        accept,
        reason,
        len(ids),
        cs,
        iscore,
        cs - iscore,
        zone,
        fixed,
        broken,
        details={"m": len(ids), "policy": name},
    )


class MinibatchImproved(GatePolicy):
    """GEPA's default: accept when a small random minibatch scored higher than the incumbent."""

    name = "minibatch"

    def __init__(self, size: int = 3, seed: int = 0):
        self.size = size
        self.rng = random.Random(seed)

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        ids = sorted(set(candidate) & set(incumbent))
        if len(ids) > self.size:
            ids = sorted(self.rng.sample(ids, self.size))
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        improved = sum(c[t] for t in ids) > sum(i[t] for t in ids)
        return _simple(self.name, improved, candidate, incumbent, ids, "minibatch sum improved?", 0.0)


class MeanImproved(GatePolicy):
    """SkillOpt: accept when the val mean strictly improved."""

    name = "mean"

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        ids = sorted(set(candidate) & set(incumbent))
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        improved = bool(ids) and stats.mean([c[t] - i[t] for t in ids]) > 1e-12
        return _simple(self.name, improved, candidate, incumbent, ids, "> 0", 0.0)


class FixedDeadBand(GatePolicy):
    """SkillOpt-Lite: accept when the val mean improved by more than a fixed band (0.05)."""

    name = "deadband"

    def __init__(self, band: float = 0.05):
        self.band = band

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        ids = sorted(set(candidate) & set(incumbent))
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        improved = bool(ids) and stats.mean([c[t] - i[t] for t in ids]) > self.band + 1e-12
        return _simple(self.name, improved, candidate, incumbent, ids, f"vs band {self.band:.3f}", self.band)
