"""Gate policies: decide from paired val outcomes whether a candidate replaces the incumbent.

``PairedGate`` is harnessopt's gate (docs/gate.md): paired per-task differences, flip
confirmation, a dead zone Δ from the sample size and the observed paired spread, and the
configured secondary test (``harnessopt.gate.secondary``) that may accept inside the zone, each path
spending its share of one false-accept budget. The baselines it is measured against (the
acceptance rules of GEPA, SkillOpt and SkillOpt-Lite) live in ``benchmarks/baselines.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import secondary, stats
from harnessopt.protocols import ConfirmFn, GateDecision, GatePolicy, Outcomes


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


class PairedGate(GatePolicy):
    """harnessopt's paired gate (docs/gate.md): a first look on the val outcomes, flip confirmation,
    and, when the first look is promising but inside the dead zone, a second look; inside the zone
    only the configured secondary test (``gate.secondary``) may accept.

    ``decide`` calls ``confirm`` at most ``K + second_look`` times (K = runs per task): K times with
    the flipped ids, then (second look) ``second_look`` times with every paired val id, each call one
    more run of those tasks on both sides. ``second_look=0`` restores the single-look gate.
    ``look_from`` is the first-look t statistic above which the second look is spent;
    ``first_share`` is the first look's share of the primary test's alpha.
    ``confirm_flips: false`` (or no ``confirm``) turns off every rerun, the second look included,
    and the primary test then spends its whole share of alpha on its one look.
    """

    name = "paired"

    def __init__(
        self,
        cfg: GateConfig | None = None,
        second_look: int | None = None,
        look_from: float = 0.5,
        first_share: float | None = None,
    ):
        self.cfg = cfg or GateConfig.model_validate({})
        self.second_look = self.cfg.second_look if second_look is None else second_look
        self.look_from = look_from
        self.first_share = self.cfg.first_look_share if first_share is None else first_share

    def levels(self, can_rerun: bool) -> stats.Levels:
        """How this gate spends the round's alpha, ``1 - confidence``."""
        cfg = self.cfg
        looks = 2 if can_rerun and self.second_look > 0 else 1
        share = cfg.secondary_share if cfg.secondary != "none" else 0.0
        return stats.round_levels(1.0 - cfg.confidence, looks, share, self.first_share)

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        """Accept when the mean paired difference clears the dead zone of its look (see docs/gate.md)."""
        p = _Paired.of(candidate, incumbent)
        details = _base_details(candidate, incumbent, p)
        if not p.ids:
            reason = "rejected: no val task was scored for both candidate and incumbent"
            return GateDecision(False, reason, 0, 0.0, 0.0, 0.0, stats.dead_zone(0, 0.0), details=details)
        if not self.cfg.confirm_flips:
            confirm = None  # no rerun of any kind, so no second look to pay alpha for
        lv = self.levels(confirm is not None)
        details.update(alpha=lv.alpha, look_levels=list(lv.looks), secondary_level=lv.secondary)
        diffs, fixed, broken, noise, reruns = self._confirmed_diffs(p, confirm, details)
        step = 1.0 / max(details["epochs"], 1)
        dec = self._judge(p, diffs, fixed, broken, noise, details, lv.looks[0], step)
        details.update(look=1)
        if confirm is not None and self._promising(dec):
            fresh: tuple[Outcomes, Outcomes] = ({}, {})
            for _ in range(self.second_look):
                more = confirm(p.ids)
                fresh = (_merge(fresh[0], more[0]), _merge(fresh[1], more[1]))
            details.update(
                look=2,
                first_look={"delta": dec.delta, "dead_zone": dec.dead_zone, "t": details["t"]},
                reruns=details["reruns"] + _count(fresh, p.ids),
            )
            candidate = _merge(_merge(candidate, reruns[0]), fresh[0])
            incumbent = _merge(_merge(incumbent, reruns[1]), fresh[1])
            dec = self._second_look(p.ids, candidate, incumbent, diffs, fresh, dec, details, lv.looks[-1])
        else:
            candidate = _merge(candidate, reruns[0])
            incumbent = _merge(incumbent, reruns[1])
        dec.accept, dec.reason = self._verdict(dec, candidate, incumbent, p.ids, lv.secondary)
        return dec

    def futile(
        self, candidate: Outcomes, incumbent: Outcomes, remaining: Sequence[str], can_rerun: bool = True
    ) -> bool:
        """Can validation stop here? (docs/gate.md, "Early stopping for futility")

        True when, even if every ``remaining`` task went the candidate's way (a full pass where the
        incumbent has less), its mean difference at face value stays at or below 0 (two looks: no
        look can then accept) or below the smallest dead zone (one look). Only with ``secondary:
        none``: a secondary test may accept inside the zone. The rule is non-binding: flip
        confirmation might still have turned a broken task into noise, so stopping can turn a rare
        accept into a reject, never a reject into an accept: false accepts cannot rise.
        """
        if self.cfg.secondary != "none":
            return False
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        done = [t for t in c if t in i]
        rest = [t for t in remaining if t in i and t not in c]
        if len(done) + len(rest) < 2 or not rest:
            return False
        best = (sum(c[t] - i[t] for t in done) + sum(1.0 - i[t] for t in rest)) / (len(done) + len(rest))
        return best <= self.futility_bar(candidate, incumbent, remaining, can_rerun)

    def futility_bar(
        self, candidate: Outcomes, incumbent: Outcomes, remaining: Sequence[str], can_rerun: bool = True
    ) -> float:
        """The mean difference `futile` needs the best case to beat: 0 with two looks, else the
        smallest dead zone of the whole validation (what a futility stop's decision shows)."""
        if can_rerun and self.second_look > 0:
            return 0.0
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        m = sum(1 for t in c if t in i) + sum(1 for t in remaining if t in i and t not in c)
        epochs = max((len(candidate[t]) for t in c if t in i), default=1)
        return stats.dead_zone(m, 0.0, self.levels(False).looks[0], self.cfg.min_effect, step=1.0 / epochs)

    def _promising(self, dec: GateDecision) -> bool:
        """Inside the zone, not over gate.max_broken, and the first-look t above ``look_from``."""
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

        A task's difference weighs every run the same: d = (K * d_first + k * d_fresh) / (K + k),
        with K the first look's runs per task and k the fresh runs both sides have for it (a task a
        rerun left out keeps its first-look difference). The first look keeps its noise-flip rule (a
        flip that did not reproduce counts 0), which shrinks selected first-look luck; fixed/broken
        use each side's mean over all its runs.
        """
        p = _Paired.of(candidate, incumbent)
        p.ids = ids
        fc, fi = stats.task_means(fresh[0]), stats.task_means(fresh[1])
        first_runs = max(details["epochs"], 1)
        diffs, missing = {}, []
        for t in ids:
            k = min(len(fresh[0].get(t, ())), len(fresh[1].get(t, ())))
            if k == 0:
                missing.append(t)
                diffs[t] = first_diffs[t]
            else:
                diffs[t] = (first_runs * first_diffs[t] + k * (fc[t] - fi[t])) / (first_runs + k)
        fixed = [t for t in ids if stats.solved(p.cand[t]) and not stats.solved(p.inc[t])]
        broken = [t for t in ids if stats.solved(p.inc[t]) and not stats.solved(p.cand[t])]
        was = set(first.fixed) | set(first.broken) | set(first.noise_flips)
        noise = sorted(was - set(fixed) - set(broken))
        runs = min(min(len(candidate[t]), len(incumbent[t])) for t in ids)
        details.update(epochs_total=runs, rerun_missing=missing)
        dec = self._judge(p, diffs, fixed, broken, noise, details, level, 1.0 / max(runs, 1))
        both = [t for t in ids if t in fc and t in fi]
        dec.details["fresh_delta"] = stats.mean([fc[t] - fi[t] for t in both])
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
            step=step,
            min_effect=cfg.min_effect,
            max_broken=cfg.max_broken,
            sign_test_p=stats.sign_test_p(len(fixed), len(broken)),
        )
        cand, inc = p.score(p.cand), p.score(p.inc)
        return GateDecision(False, "", m, cand, inc, delta, zone, fixed, broken, noise, details=details)

    def _verdict(
        self, dec: GateDecision, candidate: Outcomes, incumbent: Outcomes, ids: list[str], level: float | None
    ) -> tuple[bool, str]:
        cfg, zone, delta = self.cfg, dec.dead_zone, dec.delta
        look = ", second look" if dec.details.get("look") == 2 else ""
        head = f"{_sign(delta)} {{}} dead zone {zone:.3f} (n={dec.n}{look})"
        if cfg.max_broken is not None and len(dec.broken) > cfg.max_broken:
            return False, f"rejected: {len(dec.broken)} broken > gate.max_broken {cfg.max_broken}"
        if delta > zone:
            return True, "accepted: " + head.format(">")
        if delta < -zone:
            return False, "rejected: " + head.format("below minus")
        details = dec.details
        q = secondary.Quality(delta, details["s_d"], dec.n, details["step"], len(dec.fixed), len(dec.broken))
        sec = secondary.judge(cfg, candidate, incumbent, ids, level, q)
        dec.soft_delta = sec.delta
        details.update(sec.details)
        verdict = "accepted: " if sec.accept else "rejected: "
        return sec.accept, verdict + head.format("inside") + f"; {sec.note}"

    def _confirmed_diffs(
        self, p: _Paired, confirm: ConfirmFn | None, details: dict[str, Any]
    ) -> tuple[dict[str, float], list[str], list[str], list[str], tuple[Outcomes, Outcomes]]:
        """Paired differences after rerunning flipped tasks, and the rerun outcomes.

        Each flipped task is rerun as many times as it ran (K epochs: K more runs a side), so the
        rerun weighs as much as the first pass. A flip reproduces when the rerun flips the same way;
        its difference becomes the mean of both passes. A flip that does not reproduce is noise: its
        difference is set to 0 and it is listed in ``noise_flips``, not in fixed/broken (see
        docs/gate.md for why 0). A task the rerun left out keeps its first-pass evidence.
        """
        diffs = {t: p.cand[t] - p.inc[t] for t in p.ids}
        fixed = [t for t in p.ids if stats.solved(p.cand[t]) and not stats.solved(p.inc[t])]
        broken = [t for t in p.ids if stats.solved(p.inc[t]) and not stats.solved(p.cand[t])]
        flipped = sorted(fixed + broken)
        details.update(flips_first_pass=len(flipped), confirmed=False, reruns=0)
        if confirm is None or not flipped:
            return diffs, fixed, broken, [], ({}, {})
        re_cand: Outcomes = {}
        re_inc: Outcomes = {}
        for _ in range(max(details["epochs"], 1)):
            more = confirm(flipped)
            re_cand, re_inc = _merge(re_cand, more[0]), _merge(re_inc, more[1])
        rc, ri = stats.task_means(re_cand), stats.task_means(re_inc)
        details.update(confirmed=True, reruns=_count((re_cand, re_inc), flipped))
        noise: list[str] = []
        for t in flipped:
            if t not in rc or t not in ri:
                continue  # the rerun left it out: keep the first-pass evidence
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


def _count(runs: tuple[Outcomes, Outcomes], ids: Sequence[str]) -> int:
    """Rollouts in a pair of rerun outcomes, for the given ids."""
    return sum(len(side.get(t, ())) for side in runs for t in ids)


def _merge(first: Outcomes, more: Outcomes) -> Outcomes:
    """Every run of every task: ``first``'s runs followed by ``more``'s."""
    out = {t: list(runs) for t, runs in first.items()}
    for t, runs in more.items():
        out.setdefault(t, []).extend(runs)
    return out


def futile_decision(
    candidate: Outcomes,
    incumbent: Outcomes,
    left: Sequence[str],
    epochs: int,
    bar: float | None = None,
    alpha: float | None = None,
) -> GateDecision:
    """The rejection of a validation stopped for futility: the numbers of the tasks it ran, and the
    rollouts the stop saved (``details.futility``). ``bar``: the mean difference the best case had
    to beat (the gate's `futility_bar`), shown as the decision's dead zone; without one, the dead
    zone of the whole validation at the default confidence. ``alpha``: the level the gate would
    have tested at, spent (``details.alpha``): the stop is non-binding, so the candidate could be
    accepted until it stopped, and a stop that spent nothing would let the next round test at the
    level this one had (``gate.run_alpha``), more false accepts in a run than its budget says."""
    p = _Paired.of(candidate, incumbent)
    details = _base_details(candidate, incumbent, p)
    if alpha is not None:
        details["alpha"] = alpha
    n, saved = len(p.ids), len(left) * max(epochs, 1)
    details["futility"] = {"done": n, "left": len(left), "saved_rollouts": saved}
    delta = p.score(p.cand) - p.score(p.inc)
    could_not = (
        "beat the incumbent (two looks: no look could accept)"
        if bar is not None and bar <= 0.0
        else "clear the dead zone"
    )
    reason = (
        f"rejected: stopped for futility after {n} val tasks ({_sign(delta)}): even all {len(left)} "
        f"remaining in its favour could not {could_not}; {saved} rollouts saved"
    )
    zone = stats.dead_zone(n + len(left), 0.0) if bar is None else bar
    fixed, broken = stats.flips({t: candidate[t] for t in p.ids}, {t: incumbent[t] for t in p.ids})
    cand, inc = p.score(p.cand), p.score(p.inc)
    return GateDecision(False, reason, n, cand, inc, delta, zone, fixed, broken, details=details)


def spent_decision(cfg: GateConfig) -> GateDecision:
    """The rejection of a round whose run has spent ``gate.run_alpha``: nothing is tested."""
    reason = (
        f"rejected: gate.run_alpha {cfg.run_alpha} is spent ({cfg.run_rounds} gate decisions of "
        "gate.run_rounds); raise gate.run_rounds to give later rounds a share of the run's budget"
    )
    return GateDecision(False, reason, 0, 0.0, 0.0, 0.0, 1.0, details={"run_alpha_spent": True})


def make_gate(cfg: GateConfig) -> GatePolicy:
    """The gate policy named by ``cfg.policy`` (a registry name or a dotted path)."""
    from harnessopt import registry

    gate: GatePolicy = registry.build("gate", cfg.policy, cfg)
    return gate
