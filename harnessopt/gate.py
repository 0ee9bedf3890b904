"""Gate policies: decide from paired val outcomes whether a candidate replaces the incumbent.

``PairedGate`` is harnessopt's gate (docs/gate.md): paired per-task differences, flip
confirmation, a dead zone Δ from the sample size and the observed paired spread, and a soft
metric that may break ties inside the zone. The baselines it is measured against (the
acceptance rules of GEPA, SkillOpt and SkillOpt-Lite) live in ``benchmarks/baselines.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harnessopt import stats
from harnessopt.config import GateConfig
from harnessopt.protocols import ConfirmFn, GateDecision, GatePolicy, Outcome, Outcomes


@dataclass
class _Paired:
    """Per-task means of the tasks both sides have, in id order."""

    ids: list[str]
    cand: dict[str, float]
    inc: dict[str, float]
    missing: list[str]

    @classmethod
    def of(cls, candidate: Outcomes, incumbent: Outcomes) -> _Paired:
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        return cls(sorted(set(c) & set(i)), c, i, sorted(set(c) ^ set(i)))

    def score(self, side: dict[str, float]) -> float:
        return stats.mean([side[t] for t in self.ids])


def _sign(x: float) -> str:
    return f"{x:+.3f}"


def _base_details(candidate: Outcomes, incumbent: Outcomes, p: _Paired) -> dict[str, Any]:
    epochs = max((len(candidate[t]) for t in p.ids), default=0)
    crashed = {
        "candidate": sum(o.crashed for t in p.ids for o in candidate[t]),
        "incumbent": sum(o.crashed for t in p.ids for o in incumbent[t]),
    }
    return {"m": len(p.ids), "epochs": epochs, "missing": p.missing, "crashed_runs": crashed}


# --------------------------------------------------------------------------- harnessopt's gate


class PairedGate:
    """harnessopt's paired gate (docs/gate.md): a first look on the val outcomes, flip confirmation,
    and, when the first look is promising but inside the dead zone, a second look.

    ``decide`` calls ``confirm`` at most ``1 + second_look`` times: once with the flipped ids, then
    (second look) ``second_look`` times with every paired val id, each call one more run of those
    tasks on both sides. ``second_look=0`` restores the single-look gate. ``look_from`` is the
    first-look t statistic above which the second look is spent. ``confirm_flips: false`` turns
    off every rerun, the second look included.
    """

    name = "paired"

    def __init__(self, cfg: GateConfig | None = None, second_look: int = 2, look_from: float = 0.5):
        self.cfg = cfg or GateConfig.model_validate({})
        self.second_look = second_look
        self.look_from = look_from

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        """Accept when the mean paired difference clears the dead zone of its look (see docs/gate.md)."""
        p = _Paired.of(candidate, incumbent)
        details = _base_details(candidate, incumbent, p)
        if not p.ids:
            reason = "rejected: no val task was scored for both candidate and incumbent"
            return GateDecision(False, reason, 0, 0.0, 0.0, 0.0, stats.dead_zone(0, 0.0), details=details)
        first, second = stats.look_levels(self.cfg.confidence, self.second_look > 0)
        diffs, fixed, broken, noise, reruns = self._confirmed_diffs(p, confirm, details)
        step = 1.0 / max(details["epochs"], 1)
        dec = self._judge(p, diffs, fixed, broken, noise, details, first, step)
        details.update(look=1, look_levels=[first, second] if self.second_look > 0 else [first])
        if self._promising(dec) and confirm is not None and self.cfg.confirm_flips:
            fresh: tuple[Outcomes, Outcomes] = ({}, {})
            for _ in range(self.second_look):
                more = confirm(p.ids)
                fresh = (_merge(fresh[0], more[0]), _merge(fresh[1], more[1]))
            details.update(
                look=2,
                first_look={"delta": dec.delta, "dead_zone": dec.dead_zone, "t": details["t"]},
                reruns=details["reruns"] + 2 * self.second_look * len(p.ids),
            )
            candidate = _merge(_merge(candidate, reruns[0]), fresh[0])
            incumbent = _merge(_merge(incumbent, reruns[1]), fresh[1])
            dec = self._second_look(p.ids, candidate, incumbent, diffs, fresh, dec, details, second)
        dec.accept, dec.reason = self._verdict(dec, candidate, incumbent, p.ids)
        return dec

    def _promising(self, dec: GateDecision) -> bool:
        """Inside the zone, not over --max-broken, and the first-look t above ``look_from``."""
        cfg = self.cfg
        if self.second_look <= 0 or abs(dec.delta) > dec.dead_zone:
            return False
        if cfg.max_broken is not None and len(dec.broken) > cfg.max_broken:
            return False
        return bool(dec.details["t"] > self.look_from)

    def _second_look(
        self,
        ids: list[str],
        candidate: Outcomes,
        incumbent: Outcomes,
        first_diffs: dict[str, float],
        fresh: tuple[Outcomes, Outcomes],
        first: GateDecision,
        details: dict[str, Any],
        level: float,
    ) -> GateDecision:
        """Re-judge with ``second_look`` fresh runs of every task on both sides.

        A task's difference is the first-look (flip-confirmed) difference and the k fresh
        differences averaged with equal weight per run: d = (d_first + k * d_fresh) / (1 + k). The
        first look keeps its noise-flip rule (a flip that did not reproduce counts 0), which
        shrinks selected first-look luck; fixed/broken use each side's mean over all its runs.
        """
        p = _Paired.of(candidate, incumbent)
        p.ids = ids
        fc, fi = stats.task_means(fresh[0]), stats.task_means(fresh[1])
        k = self.second_look
        diffs = {t: (first_diffs[t] + k * (fc[t] - fi[t])) / (1 + k) for t in ids}
        fixed = [t for t in ids if stats.solved(p.cand[t]) and not stats.solved(p.inc[t])]
        broken = [t for t in ids if stats.solved(p.inc[t]) and not stats.solved(p.cand[t])]
        was = set(first.fixed) | set(first.broken) | set(first.noise_flips)
        noise = sorted(was - set(fixed) - set(broken))
        runs = min(min(len(candidate[t]), len(incumbent[t])) for t in ids)
        details["epochs_total"] = runs
        dec = self._judge(p, diffs, fixed, broken, noise, details, level, 1.0 / max(runs, 1))
        dec.details["fresh_delta"] = stats.mean([fc[t] - fi[t] for t in ids])
        return dec

    def _judge(
        self,
        p: _Paired,
        diffs: dict[str, float],
        fixed: list[str],
        broken: list[str],
        noise: list[str],
        details: dict[str, Any],
        level: float,
        step: float,
    ) -> GateDecision:
        """The numbers of one look: mean difference, its dead zone at ``level``, and the details."""
        cfg = self.cfg
        d = [diffs[t] for t in p.ids]
        m, delta, s_d = len(d), stats.mean(d), stats.sample_sd(d)
        zone = stats.dead_zone(m, s_d, level, cfg.min_effect, step=step)
        details.update(
            raw_delta=details.get("raw_delta", p.score(p.cand) - p.score(p.inc)),
            s_d=s_d,
            sd_floor=stats.sd_floor(m),
            t=stats.t_statistic(d),
            t_quantile=stats.t_quantile(level, max(m - 1, 1)),
            confidence=cfg.confidence,
            level=level,
            min_effect=cfg.min_effect,
            max_broken=cfg.max_broken,
            sign_test_p=stats.sign_test_p(len(fixed), len(broken)),
        )
        cand, inc = p.score(p.cand), p.score(p.inc)
        return GateDecision(False, "", m, cand, inc, delta, zone, fixed, broken, noise, details=details)

    def _verdict(
        self, dec: GateDecision, candidate: Outcomes, incumbent: Outcomes, ids: list[str]
    ) -> tuple[bool, str]:
        cfg, zone, delta = self.cfg, dec.dead_zone, dec.delta
        look = ", second look" if dec.details.get("look") == 2 else ""
        head = f"{_sign(delta)} {{}} dead zone {zone:.3f} (n={dec.n}{look})"
        if cfg.max_broken is not None and len(dec.broken) > cfg.max_broken:
            return False, f"rejected: {len(dec.broken)} broken > --max-broken {cfg.max_broken}"
        if delta > zone:
            return True, "accepted: " + head.format(">")
        if delta < -zone:
            return False, "rejected: " + head.format("below minus")
        inside = "rejected: " + head.format("inside")
        soft = soft_metric(candidate, incumbent, ids, cfg.confidence)
        if soft is None:
            return False, inside + "; no soft metric to break the tie"
        metric, sdelta, sbound = soft
        bound = max(cfg.soft_margin, sbound)
        dec.soft_delta = sdelta
        dec.details.update(soft_metric=metric, soft_bound=bound)
        nf, nb = len(dec.fixed), len(dec.broken)
        if sdelta <= bound:
            return False, inside + f"; {metric} {_sign(sdelta)} below margin {bound:.3f}"
        if nb > nf or delta < 0:
            return False, inside + f"; {metric} {_sign(sdelta)} but {nb} broken > {nf} fixed or score fell"
        return True, "accepted: " + head.format("inside") + f"; {metric} {_sign(sdelta)} > margin {bound:.3f}"

    def _confirmed_diffs(
        self, p: _Paired, confirm: ConfirmFn | None, details: dict[str, Any]
    ) -> tuple[dict[str, float], list[str], list[str], list[str], tuple[Outcomes, Outcomes]]:
        """Paired differences after rerunning flipped tasks once, and the rerun outcomes.

        A flip reproduces when the rerun flips the same way; its difference becomes the mean of
        both runs. A flip that does not reproduce is noise: its difference is set to 0 and it is
        listed in ``noise_flips``, not in fixed/broken (see docs/gate.md for why 0).
        """
        diffs = {t: p.cand[t] - p.inc[t] for t in p.ids}
        fixed = [t for t in p.ids if stats.solved(p.cand[t]) and not stats.solved(p.inc[t])]
        broken = [t for t in p.ids if stats.solved(p.inc[t]) and not stats.solved(p.cand[t])]
        flipped = sorted(fixed + broken)
        details.update(flips_first_pass=len(flipped), confirmed=False, reruns=0)
        if not (self.cfg.confirm_flips and confirm and flipped):
            return diffs, fixed, broken, [], ({}, {})
        re_cand, re_inc = confirm(flipped)
        rc, ri = stats.task_means(re_cand), stats.task_means(re_inc)
        details.update(
            confirmed=True, reruns=sum(len(re_cand.get(t, ())) + len(re_inc.get(t, ())) for t in flipped)
        )
        noise: list[str] = []
        for t in flipped:
            if t not in rc or t not in ri:
                continue  # no rerun data (should not happen): keep the first-pass evidence
            was_fix = t in fixed
            again = stats.solved(rc[t]) != stats.solved(ri[t]) and stats.solved(rc[t]) == was_fix
            if again:
                diffs[t] = (diffs[t] + rc[t] - ri[t]) / 2.0
            else:
                diffs[t] = 0.0
                noise.append(t)
        noise_set = set(noise)
        return (
            diffs,
            [t for t in fixed if t not in noise_set],
            [t for t in broken if t not in noise_set],
            noise,
            (re_cand, re_inc),
        )


def _merge(first: Outcomes, more: Outcomes) -> Outcomes:
    """Every run of every task: ``first``'s runs followed by ``more``'s."""
    out = {t: list(runs) for t, runs in first.items()}
    for t, runs in more.items():
        out.setdefault(t, []).extend(runs)
    return out


def soft_metric(
    candidate: Outcomes, incumbent: Outcomes, ids: Sequence[str], confidence: float
) -> tuple[str, float, float] | None:
    """The tie-breaker inside the dead zone: (name, mean paired gain, its own dead zone).

    In order: the scorer's ``soft`` value when every run has one; mean partial credit on the
    tasks neither side passes, when scores are fractional; relative token saving when every run
    counted tokens. None when no secondary metric is available.
    """
    runs = [o for t in ids for o in (*candidate[t], *incumbent[t])]
    gains: list[float] = []
    name = ""
    if runs and all(o.soft is not None for o in runs):
        name = "soft"
        gains = [_mean_of(candidate[t], "soft") - _mean_of(incumbent[t], "soft") for t in ids]
    if not gains and any(0.0 < o.score < 1.0 for o in runs):
        unresolved = [
            t
            for t in ids
            if not stats.solved(_mean_of(candidate[t], "score"))
            and not stats.solved(_mean_of(incumbent[t], "score"))
        ]
        name = "partial credit"
        gains = [_mean_of(candidate[t], "score") - _mean_of(incumbent[t], "score") for t in unresolved]
    if not gains and runs and all(o.tokens > 0 for o in runs):
        name = "token saving"
        gains = [1.0 - _mean_of(candidate[t], "tokens") / _mean_of(incumbent[t], "tokens") for t in ids]
    if not gains:
        return None
    # No continuity step: soft values are continuous, not a pass/fail lattice.
    bound = stats.dead_zone(len(gains), stats.sample_sd(gains), confidence, step=0.0)
    return name, stats.mean(gains), bound


def _mean_of(runs: Sequence[Outcome], attr: str) -> float:
    vals = [float(getattr(o, attr) or 0.0) for o in runs]
    return sum(vals) / len(vals) if vals else 0.0


def make_gate(cfg: GateConfig) -> GatePolicy:
    """The gate policy named by ``cfg.policy`` (a registry name or a dotted path)."""
    from harnessopt import registry

    gate: GatePolicy = registry.build("gate", cfg.policy, cfg)
    return gate
