"""Measure acceptance rules under real conditions with the REAL gate and smoke-test code.

World (docs/gate.md, "Simulation"): a population of tasks with latent pass probabilities (most near
0 or 1, some in between); every rollout is a fresh pass/fail draw; 5% of rollouts crash at random
on both sides (a flaky harness or sandbox: score 0, no soft value, fewer tokens). The scorer is
pass/fail. A soft score exists only for the labelled variant "secondary soft": per run
``clip(0.5 pass + 0.5 c + N(0, 0.1))`` where ``c`` is a per-task partial-credit level only loosely
tied to the pass probability, which an edit moves with its pass changes plus a drift of its own.

Proposals (kinds): ``null`` (no effect; fixes some tasks, breaks as many), ``churn`` (no effect,
3x more tasks fixed and broken: helps some, breaks others), ``cheap-harm`` (-0.02 and 10% fewer
tokens), and real gains of +0.02, +0.05, +0.10. An effect is the exact change of the population
mean pass probability; a val sample sees more or less of it.

Three experiments at val size m (50 by default):

* per round: each proposal kind against a freshly measured incumbent (not selected by anything);
* 20-round runs on a mixed stream, the incumbent's val outcomes cached (the accepted candidate's
  outcomes become the incumbent's, as in the loop): final quality, reported-gain inflation;
* 20-round runs of no-effect edits only: P(any accepted), the run-level false accepts.

    python benchmarks/gate_simulation.py            # the figures of docs/gate.md (2-9 min on 2 cores, by the load: docs/gate.md quotes its printed wall time)
    python benchmarks/gate_simulation.py --quick    # a fast look at the same tables
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.baselines import FixedDeadBand, MeanImproved  # noqa: E402
from harnessopt.config import GateConfig  # noqa: E402
from harnessopt.gate.bank import IncumbentBank
from harnessopt.gate.noise_floor import measure
from harnessopt.gate.policy import PairedGate, make_gate
from harnessopt.gate.smoke import smoke_verdict
from harnessopt.protocols import GatePolicy, Outcome, Outcomes  # noqa: E402

POPULATION = 1000
MID_SHARE = 0.3  # tasks with a latent pass probability between ~0.2 and ~0.8 (Beta(2, 2))
CRASH = 0.05  # flaky crash rate of every rollout, both sides
SMOKE = 5  # smoke-test tasks (the loop's default)
ROUNDS = 20
HOLDOUT = 25  # tasks of a held-out confirm split (never used by the gate)
EFFECT = {
    "null": 0.0,
    "churn": 0.0,
    "cheap-harm": -0.02,
    "-0.10": -0.10,
    "+0.02": 0.02,
    "+0.05": 0.05,
    "+0.10": 0.10,
}
NULLS = ("null", "churn", "cheap-harm", "-0.10")  # no real gain: an accept is a false accept
MIX = {
    "null": 0.25,
    "churn": 0.1,
    "cheap-harm": 0.1,
    "-0.10": 0.15,
    "+0.02": 0.15,
    "+0.05": 0.15,
    "+0.10": 0.1,
}
CHECK_EVERY = 5  # validation checks for futility after the smoke test and every 5 tasks
RUN_ALPHA, RUN_ROUNDS = 0.05, ROUNDS


@dataclass
class Policy:
    label: str
    make: Callable[[], GatePolicy]
    epochs: int = 1
    smoke: bool = False  # the loop's smoke test (harnessopt only; the baselines have none)
    confirm: bool = False  # the gate's reruns (flip confirmation, second look)
    detail: str = ""  # what its outcomes must carry besides the score: "soft" or "tokens"
    futility: bool = False  # validation stops early for futility (PairedGate.futile)
    inc_epochs: int = (
        0  # gate.incumbent_epochs: the incumbent's banked runs (harnessopt.gate.bank), 0: epochs
    )


UNBANKED = {
    "policy": "paired",
    "incumbent_epochs": 1,
    "second_look": 2,
    "first_look_share": 0.2,
}  # before issue 21


def _paired(**cfg: object) -> Callable[[], GatePolicy]:
    """harnessopt's gate; the rows below keep the pre-issue-21 settings unless they say otherwise."""
    return lambda: PairedGate(GateConfig.model_validate({**UNBANKED, **cfg}))


BANK = {
    "incumbent_epochs": 5,
    "second_look": 4,
    "first_look_share": 0.05,
}  # docs/gate.md, "Cached incumbent runs"


HO: dict[str, Any] = {"smoke": True, "confirm": True, "futility": True}
POLICIES = [
    Policy("harnessopt (default before issue 21: secondary none)", _paired(), **HO),
    Policy(f"harnessopt, run_alpha {RUN_ALPHA} over {RUN_ROUNDS} rounds", _paired(confidence=1 - RUN_ALPHA / RUN_ROUNDS), **HO),
    Policy("harnessopt, banked incumbent (incumbent_epochs 5, second_look 4, first_look_share 0.05: the paired gate's defaults since issue 21)", _paired(**BANK), inc_epochs=5, **HO),
    Policy("harnessopt, the banked gate (policy banked, incumbent_epochs 11, second_look 10: the default now)", lambda: make_gate(GateConfig()), inc_epochs=GateConfig().banked_epochs, **HO),
    Policy("harnessopt, looks split evenly (first_share 0.5)", lambda: PairedGate(GateConfig.model_validate(UNBANKED), first_share=0.5), **HO),
    Policy("harnessopt, secondary cost (margin 0.02)", _paired(secondary="cost"), detail="tokens", **HO),
    Policy("harnessopt, secondary soft [soft-score variant]", _paired(secondary="soft"), detail="soft", **HO),
    Policy("strict improvement [SkillOpt], 1 epoch", MeanImproved),
    Policy("strict improvement, 3 epochs", MeanImproved, epochs=3),
    Policy("fixed band 0.05 [SkillOpt-Lite], 1 epoch", lambda: FixedDeadBand(0.05)),
    Policy("fixed band 0.05, 3 epochs", lambda: FixedDeadBand(0.05), epochs=3),
    Policy("fixed band 0.10, 3 epochs", lambda: FixedDeadBand(0.10), epochs=3),
    Policy("fixed band 0.10, 4 epochs", lambda: FixedDeadBand(0.10), epochs=4),
]  # fmt: skip


# --------------------------------------------------------------------------- the world


@dataclass
class State:
    """A skill + harness as the world sees it: per-task pass probability, partial credit, token cost."""

    p: np.ndarray
    c: np.ndarray
    tokens: np.ndarray


def population(rng: np.random.Generator) -> State:
    kind = rng.choice(3, size=POPULATION, p=[0.55 * (1 - MID_SHARE), 0.45 * (1 - MID_SHARE), MID_SHARE])
    low, high, mid = (
        rng.beta(0.5, 8.0, POPULATION),
        rng.beta(8.0, 0.5, POPULATION),
        rng.beta(2, 2, POPULATION),
    )
    p = np.where(kind == 0, low, np.where(kind == 1, high, mid))
    c = np.clip(0.4 * p + 0.6 * rng.beta(2, 2, POPULATION), 0, 1)
    return State(p, c, rng.lognormal(math.log(2000), 0.5, POPULATION))


def _take_mass(pool: np.ndarray, gains: np.ndarray, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """First tasks of ``pool`` whose per-task changes add up to exactly ``mass`` (last one partial)."""
    if mass <= 0 or len(pool) == 0:
        return pool[:0], gains[:0]
    csum = np.cumsum(gains)
    k = min(int(np.searchsorted(csum, mass)) + 1, len(pool))
    take = gains[:k].copy()
    take[-1] -= max(0.0, float(csum[k - 1]) - mass)
    return pool[:k], take


def propose(s: State, kind: str, rng: np.random.Generator, effect: float | None = None) -> State:
    """A proposal of ``kind``: fixes some tasks, breaks others; the population-mean change is exact
    (``EFFECT[kind]``, or ``effect`` when given: a power curve's points)."""
    n, target = POPULATION, EFFECT[kind] if effect is None else effect
    broken_mass = rng.uniform(0.01, 0.06) * n * (3 if kind == "churn" else 1)
    fixed_mass = broken_mass + target * n
    if fixed_mass < 0:  # a harmful edit that breaks more than its churn: it fixes nothing
        broken_mass, fixed_mass = -target * n, 0.0
    order = rng.permutation(n)
    fixable = order[s.p[order] < 0.9]
    fix_ids, up = _take_mass(fixable, (1 - s.p[fixable]) * rng.uniform(0.5, 1.0, len(fixable)), fixed_mass)
    rest = rng.permutation(np.setdiff1d(order[s.p[order] > 0.1], fix_ids, assume_unique=True))
    brk_ids, down = _take_mass(rest, s.p[rest] * rng.uniform(0.5, 1.0, len(rest)), broken_mass)
    p = s.p.copy()
    p[fix_ids] += up
    p[brk_ids] -= down
    p = np.clip(p, 0.0, 1.0)
    drift = rng.normal(0.0, 0.02)  # partial credit an edit moves without moving the pass rate
    c = np.clip(s.c + 0.5 * (p - s.p) + drift, 0.0, 1.0)
    factor = 0.9 if kind == "cheap-harm" else float(np.exp(rng.normal(0.0, 0.03)))
    return State(p, c, s.tokens * factor)


_PLAIN = {(s, c): Outcome(float(s), None, 0, bool(c)) for s in (0, 1) for c in (0, 1)}


def rollout(
    s: State, ids: np.ndarray, rng: np.random.Generator, runs: int = 1, detail: str = "", crash: float = CRASH
) -> Outcomes:
    """``runs`` runs of each task: pass ~ Bernoulli(p), a flaky crash (5%), a soft value and tokens.

    Every call draws all of them (so policies see the same runs); the Outcome carries the soft
    value or the tokens only for the policy that reads them (``detail``: "soft", "tokens")."""
    shape = (runs, len(ids))
    crashed = rng.random(shape) < crash
    score = ((rng.random(shape) < s.p[ids]) & ~crashed).astype(int)
    soft = np.clip(0.5 * score + 0.5 * s.c[ids] + rng.normal(0.0, 0.1, shape), 0.0, 1.0)
    tokens = s.tokens[ids] * rng.lognormal(0.0, 0.2, shape) * np.where(crashed, rng.uniform(0.1, 1, shape), 1)
    keys = [f"t{t}" for t in ids.tolist()]
    sc, cr = score.T.tolist(), crashed.T.tolist()
    if not detail:
        return {k: [_PLAIN[(a, b)] for a, b in zip(sc[j], cr[j], strict=True)] for j, k in enumerate(keys)}
    so, to = soft.T.tolist(), tokens.T.astype(int).tolist()
    return {
        k: [Outcome(float(sc[j][r]), None if cr[j][r] else so[j][r], to[j][r], cr[j][r]) for r in range(runs)]
        for j, k in enumerate(keys)
    }


def measure_incumbent(
    s: State,
    ids: np.ndarray,
    rng: np.random.Generator,
    runs: int,
    detail: str = "",
    rollout: Callable[..., Outcomes] = rollout,
    retry: bool = False,
) -> tuple[Outcomes, int]:
    """The incumbent's cached val runs and the rollouts they took: with ``retry`` (the banked gate,
    as ``round.evaluate.rerun_crashed``) each crashed run is run once more and the rerun takes its place."""
    out = {t: list(r) for t, r in rollout(s, ids, rng, runs, detail).items()}
    spent = len(ids) * runs
    if retry:
        slots = [(t, i) for t, r in out.items() for i, o in enumerate(r) if o.crashed]
        for layer in sorted({i for _, i in slots}):
            keys = [t for t, i in slots if i == layer]
            again = rollout(s, _ids(keys), rng, 1, detail)
            spent += len(keys)
            for t in keys:
                out[t][layer] = again[t][0]
    return out, spent


def top_up(
    s: State,
    cached: Outcomes,
    runs: int,
    rng: np.random.Generator,
    detail: str = "",
    rollout: Callable[..., Outcomes] = rollout,
    retry: bool = False,
) -> tuple[Outcomes, int]:
    """A new incumbent's cached runs topped up to ``runs`` a task, as ``round.evaluate.incumbent_outcomes``
    does after an accept (only the runs each task lacks); and the rollouts that took."""
    out, spent = {t: list(r) for t, r in cached.items()}, 0
    for n in sorted({len(r) for r in out.values() if len(r) < runs}):
        keys = [t for t, r in out.items() if len(r) == n]
        more, k = measure_incumbent(s, _ids(keys), rng, runs - n, detail, rollout, retry)
        spent += k
        for t in keys:
            out[t] += more[t]
    return out, spent


def _ids(keys: list[str]) -> np.ndarray:
    return np.array([int(t[1:]) for t in keys], dtype=int)


# --------------------------------------------------------------------------- one decision


@dataclass
class Decision:
    accept: bool
    delta: float  # what the gate reports (its confirmed mean difference)
    rollouts: int  # candidate runs, smoke reruns and the gate's reruns
    saved: int = 0  # candidate runs early stopping saved
    smoke_reject: bool = False
    smoke_reject_old: bool = False  # the old rule: any first-run crash the cached incumbent lacks


def decide(
    pol: Policy,
    gate: GatePolicy,
    inc: State,
    cand: State,
    val: np.ndarray,
    inc_out: Outcomes,
    rng: np.random.Generator,
    rollout: Callable[..., Outcomes] = rollout,
) -> tuple[Decision, Outcomes]:
    """Smoke test (harnessopt), validation and the gate, as the loop runs them; the candidate's outcomes.

    ``rollout`` draws runs (``benchmarks/run_yield.py`` passes one with correlated crashes)."""
    cand_out = rollout(cand, val, rng, pol.epochs, pol.detail)
    spent = len(val) * pol.epochs
    dec = Decision(False, 0.0, spent)
    if pol.smoke:
        first: Outcomes = {f"t{t}": cand_out[f"t{t}"][:1] for t in val[:SMOKE].tolist()}
        crashed = [t for t, runs in first.items() if runs[0].crashed]
        dec.smoke_reject_old = any(not all(o.crashed for o in inc_out[t]) for t in crashed)
        again: tuple[Outcomes, Outcomes] = ({}, {})
        if crashed:
            again = (rollout(cand, _ids(crashed), rng), rollout(inc, _ids(crashed), rng))  # crashes only
            dec.rollouts += 2 * len(crashed)
        if smoke_verdict(first, again[0], again[1], inc_out).reject:
            dec.smoke_reject = True
            dec.rollouts -= (len(val) - SMOKE) * pol.epochs  # validation never ran
            return dec, cand_out

    bank = IncumbentBank(inc_out, pol.epochs)  # as loop.gate: the first look sees `epochs` runs
    banked = gate.bank_first_look  # the banked gate: every cached run, reruns of the candidate only
    first = inc_out if banked else bank.first
    if pol.futility and isinstance(gate, PairedGate):
        order = [f"t{t}" for t in val.tolist()]
        for j in range(SMOKE if pol.smoke else CHECK_EVERY, len(order), CHECK_EVERY):
            done = {t: cand_out[t] for t in order[:j]}
            if gate.futile(done, first, order[j:], can_rerun=pol.confirm):
                dec.saved = (len(order) - j) * pol.epochs
                dec.rollouts -= dec.saved
                return dec, cand_out

    def confirm(ids: object) -> tuple[Outcomes, Outcomes]:
        keys = list(ids)  # type: ignore[call-overload]
        dec.rollouts += len(keys)
        if banked:
            return rollout(cand, _ids(keys), rng, 1, pol.detail), {}
        base = bank.draw(keys, lambda miss: rollout(inc, _ids(miss), rng, 1, pol.detail))
        dec.rollouts += bank.ran - ran[0]  # the incumbent's runs the bank did not cover
        ran[0] = bank.ran
        return rollout(cand, _ids(keys), rng, 1, pol.detail), base

    ran = [0]
    d = gate.decide(cand_out, first, confirm if pol.confirm else None)
    dec.accept, dec.delta = d.accept, d.delta
    return dec, cand_out


def _gain(a: State, b: State, ids: np.ndarray, rng: np.random.Generator, runs: int) -> float:
    """Measured mean score difference b - a on ``ids``: fresh runs, not selected by anything."""
    ra, rb = rollout(a, ids, rng, runs), rollout(b, ids, rng, runs)
    return statistics.fmean(
        statistics.fmean(o.score for o in rb[t]) - statistics.fmean(o.score for o in ra[t]) for t in ra
    )


# --------------------------------------------------------------------------- experiments


@dataclass
class Tally:
    asked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EFFECT, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EFFECT, 0))
    smoke_rejects: dict[str, list[int]] = field(default_factory=lambda: {"new": [0, 0], "old": [0, 0]})
    rollouts: list[float] = field(default_factory=list)  # per round
    saved: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k in EFFECT})
    final: list[float] = field(default_factory=list)
    inflation_round: dict[str, list[float]] = field(
        default_factory=lambda: {"claimed": [], "val rerun": [], "held-out": []}
    )
    inflation_run: list[float] = field(default_factory=list)
    confirm_rollouts: list[float] = field(default_factory=list)
    any_null: list[int] = field(default_factory=list)
    noise: list[tuple[float, float, float]] = field(default_factory=list)  # A/A: flip rate, SD, detectable

    def merge(self, o: Tally) -> None:
        for k in EFFECT:
            self.asked[k] += o.asked[k]
            self.accepted[k] += o.accepted[k]
        for k in ("new", "old"):
            self.smoke_rejects[k] = [
                a + b for a, b in zip(self.smoke_rejects[k], o.smoke_rejects[k], strict=True)
            ]
        for k in self.inflation_round:
            self.inflation_round[k] += o.inflation_round[k]
        for k in EFFECT:
            self.saved[k] += o.saved[k]
        self.rollouts += o.rollouts
        self.final += o.final
        self.inflation_run += o.inflation_run
        self.confirm_rollouts += o.confirm_rollouts
        self.any_null += o.any_null
        self.noise += o.noise


def per_round(m: int, seed: int) -> list[Tally]:
    """Every kind once against a freshly measured (unselected) incumbent, for every policy."""
    out = [Tally() for _ in POLICIES]
    world = np.random.default_rng([seed, m, 1])
    s0 = population(world)
    val = world.permutation(POPULATION)[:m]
    aa = np.random.default_rng([seed, m, 8])  # the noise floor, as the loop measures it (own stream)
    nf = measure(rollout(s0, val, aa), rollout(s0, val, aa), GateConfig.model_validate(UNBANKED))
    out[0].noise.append((nf["flip_rate"], nf["paired_sd"], nf["detectable"]))
    for ki, kind in enumerate(EFFECT):
        cand = propose(s0, kind, np.random.default_rng([seed, m, 2, ki]))
        for pol, tally in zip(POLICIES, out, strict=True):
            rng = np.random.default_rng([seed, m, 3, ki])  # common random numbers
            gate = pol.make()
            runs = pol.inc_epochs or pol.epochs
            inc_out, _ = measure_incumbent(s0, val, rng, runs, pol.detail, retry=gate.bank_first_look)
            dec, _ = decide(pol, gate, s0, cand, val, inc_out, rng)
            tally.asked[kind] += 1
            tally.accepted[kind] += dec.accept
            tally.rollouts.append(dec.rollouts)
            tally.saved[kind].append(dec.saved)
            if kind == "+0.10" and pol.smoke:
                for rule, rejected in (("new", dec.smoke_reject), ("old", dec.smoke_reject_old)):
                    tally.smoke_rejects[rule][0] += rejected
                    tally.smoke_rejects[rule][1] += 1
    return out


def run(m: int, seed: int, kinds: list[str], confirm_checks: bool) -> list[Tally]:
    """One 20-round optimization run per policy on the same proposal stream (cached incumbent)."""
    out = [Tally() for _ in POLICIES]
    world = np.random.default_rng([seed, m, 4])
    s0 = population(world)
    perm = world.permutation(POPULATION)
    val, holdout = perm[:m], perm[m : m + HOLDOUT]
    for pi, (pol, tally) in enumerate(zip(POLICIES, out, strict=True)):
        gate, rng = pol.make(), np.random.default_rng([seed, m, 5, pi])
        s, reported, accepted_null = s0, 0.0, 0
        runs = pol.inc_epochs or pol.epochs
        inc_out, _ = measure_incumbent(s0, val, rng, runs, pol.detail, retry=gate.bank_first_look)
        confirm_spent = 0
        for r, kind in enumerate(kinds):
            cand = propose(s, kind, np.random.default_rng([seed, m, 6, r]))
            dec, cand_out = decide(pol, gate, s, cand, val, inc_out, rng)
            tally.asked[kind] += 1
            tally.rollouts.append(dec.rollouts)
            if not dec.accept:
                continue
            true = float(cand.p.mean() - s.p.mean())
            tally.accepted[kind] += 1
            accepted_null += kind in NULLS
            reported += dec.delta
            if confirm_checks:
                infl = tally.inflation_round
                infl["claimed"].append(dec.delta - true)
                infl["val rerun"].append(_gain(s, cand, val, rng, pol.epochs) - true)
                infl["held-out"].append(_gain(s, cand, holdout, rng, 1) - true)
                if not gate.bank_first_look:  # the banked gate's confirmation is the winner's fresh bank
                    confirm_spent += 2 * (len(val) * pol.epochs)  # (counted in its rollouts/round)
            s = cand
            # The banked gate's confirmation (confirm_epochs fresh runs of the winner) and the top-up
            # the next round makes: the winner's bank, measured fresh (counted whole, as if a round follows).
            if gate.bank_first_look:
                inc_out, n = measure_incumbent(s, val, rng, pol.inc_epochs, pol.detail, retry=True)
                tally.rollouts[-1] += n
            elif pol.inc_epochs > pol.epochs:  # as loop.incumbent_outcomes: topped up to incumbent_epochs
                inc_out, n = top_up(s, cand_out, pol.inc_epochs, rng, pol.detail, retry=gate.bank_first_look)
                tally.rollouts[-1] += n
            else:
                inc_out = cand_out
        tally.final.append(float(s.p.mean()))
        tally.inflation_run.append(reported - float(s.p.mean() - s0.p.mean()))
        tally.confirm_rollouts.append(confirm_spent / len(kinds))
        tally.any_null.append(int(accepted_null > 0))
    return out


def work(args: tuple[str, int, list[int]]) -> tuple[str, list[Tally]]:
    what, m, seeds = args
    total = [Tally() for _ in POLICIES]
    for seed in seeds:
        if what == "round":
            parts = per_round(m, seed)
        else:
            rng = np.random.default_rng([seed, m, 9])
            if what == "runs":
                kinds = [str(k) for k in rng.choice(list(MIX), size=ROUNDS, p=list(MIX.values()))]
            else:
                kinds = [str(k) for k in rng.choice(["null", "churn"], size=ROUNDS)]
            parts = run(m, seed, kinds, confirm_checks=what == "runs")
        for t, p in zip(total, parts, strict=True):
            t.merge(p)
    return what, total


# --------------------------------------------------------------------------- tables


def _rate(t: Tally, k: str) -> str:
    return f"{t.accepted[k] / max(1, t.asked[k]):.3f}"


def _mean(xs: Sequence[float], fmt: str = "{:+.3f}") -> str:
    return fmt.format(statistics.fmean(xs)) if xs else "-"


def _mean_se(xs: list[float]) -> str:
    """Mean and its standard error (n = how many values)."""
    if len(xs) < 2:
        return _mean(xs)
    return f"{statistics.fmean(xs):+.3f} ±{statistics.stdev(xs) / len(xs) ** 0.5:.3f} (n={len(xs)})"


def tables(m: int, res: dict[str, list[Tally]], n: dict[str, int]) -> str:
    kinds = " | ".join(f"{'FA' if k in NULLS else 'power'} {k}" for k in EFFECT)
    lines = [
        f"val size m={m}; per round: {n['round']} trials per kind against a freshly measured (unselected) "
        f"incumbent; crash rate {CRASH:.0%}; cheap-harm = -0.02 with 10% fewer tokens",
        f"| policy | {kinds} | rollouts/round | saved by early stop on -0.10 |",
        "|---" * (len(EFFECT) + 3) + "|",
    ]
    for pol, t in zip(POLICIES, res["round"], strict=True):
        cells = " | ".join(_rate(t, k) for k in EFFECT)
        saved = _mean(t.saved["-0.10"], "{:.1f}") if pol.futility else "-"
        lines.append(f"| {pol.label} | {cells} | {statistics.fmean(t.rollouts):.1f} | {saved} |")
    t0 = res["round"][0]
    new, old = t0.smoke_rejects["new"], t0.smoke_rejects["old"]
    flip, sd, mde = (statistics.fmean(x) for x in zip(*t0.noise, strict=True))
    lines.append(
        f"\nnoise floor (gate.noise_floor.measure on an A/A test of the incumbent, mean of {len(t0.noise)}): "
        f"flip rate {flip:.3f}, paired SD {sd:.3f}, stated detectable gain (80% power) {mde:+.3f}; "
        f"simulated power of harnessopt: +0.05 {_rate(t0, '+0.05')}, +0.10 {_rate(t0, '+0.10')}"
    )
    lines.append(
        f"smoke test, +0.10 gains rejected at a {CRASH:.0%} flaky crash rate: rerun rule "
        f"{new[0] / max(1, new[1]):.3f}, old rule (one crash rejects) {old[0] / max(1, old[1]):.3f} "
        f"({new[1]} trials)"
    )
    lines += [
        "",
        f"{n['runs']} runs x {ROUNDS} rounds, mixed stream {MIX}, cached incumbent",
        "| policy | final true quality | FA null | FA churn | FA cheap-harm | FA -0.10 | power +0.05 | power +0.10 "
        "| inflation/accept: claimed | val rerun | held-out | inflation/run (claimed) | rollouts/round "
        "| + confirmation/round |",
        "|---" * 14 + "|",
    ]
    for pol, t in zip(POLICIES, res["runs"], strict=True):
        infl = t.inflation_round
        rates = " | ".join(_rate(t, k) for k in ("null", "churn", "cheap-harm", "-0.10", "+0.05", "+0.10"))
        lines.append(
            f"| {pol.label} | {statistics.fmean(t.final):.3f} | {rates} | {_mean_se(infl['claimed'])} "
            f"| {_mean_se(infl['val rerun'])} | {_mean_se(infl['held-out'])} | {_mean_se(t.inflation_run)} "
            f"| {statistics.fmean(t.rollouts):.1f} | {_mean(t.confirm_rollouts, '{:.1f}')} |"
        )
    lines += [
        "",
        f"{n['nulls']} runs x {ROUNDS} rounds of no-effect edits only (null, churn): run-level false accepts",
        "| policy | P(any accepted) |",
        "|---|---|",
    ]
    for pol, t in zip(POLICIES, res["nulls"], strict=True):
        lines.append(f"| {pol.label} | {statistics.fmean(t.any_null):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=1000, help="per-round trials per proposal kind")
    ap.add_argument("--runs", type=int, default=300, help="20-round runs (mixed stream, and no-effect only)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[50], help="val sizes m")
    ap.add_argument("--quick", action="store_true", help="60 trials and 20 runs: a fast look")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    n = (
        {"round": 60, "runs": 20, "nulls": 20}
        if a.quick
        else {"round": a.trials, "runs": a.runs, "nulls": a.runs}
    )
    started = time.monotonic()
    chunks = 4 * a.workers  # several chunks a worker: the kinds of job differ in cost
    jobs = [(what, m, list(range(w, n[what], chunks))) for m in a.sizes for what in n for w in range(chunks)]
    with mp.Pool(a.workers) as pool:
        parts = pool.map(work, jobs)
    for m in a.sizes:
        res: dict[str, list[Tally]] = {what: [Tally() for _ in POLICIES] for what in n}
        for (what, mm, _), (_, tallies) in zip(jobs, parts, strict=True):
            if mm == m:
                for t, p in zip(res[what], tallies, strict=True):
                    t.merge(p)
        print(tables(m, res, n), end="\n\n")
    print(f"wall time {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
