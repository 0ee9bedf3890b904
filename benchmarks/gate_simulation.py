"""Simulate optimization runs and measure acceptance policies with the REAL gate code.

Environment (docs/gate.md, "Simulation"): a population of tasks with latent pass probabilities
(most near 0 or 1, some in between); a stream of proposals whose true effect on the population
mean is mostly zero or harmful, with a few real +0.10 gains; every proposal fixes some tasks and
breaks others; every rollout is a fresh Bernoulli draw. Each policy runs its own optimization
(its own incumbent) on the same proposal stream and the same val tasks.

    python benchmarks/gate_simulation.py            # 1000 runs x val sizes 16, 50, 200
    python benchmarks/gate_simulation.py --quick    # 40 runs, a smoke check of the numbers
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.baselines import FixedDeadBand, MeanImproved, MinibatchImproved  # noqa: E402
from harnessopt.config import GateConfig  # noqa: E402
from harnessopt.gate import PairedGate  # noqa: E402
from harnessopt.protocols import GatePolicy, Outcome, Outcomes  # noqa: E402

POPULATION = 1000  # tasks in the "true" distribution; true quality = mean pass probability
MID_SHARE = 0.3  # tasks with a latent pass probability between ~0.2 and ~0.8 (Beta(2, 2))
MINIBATCH = 3  # GEPA's default reflection minibatch size
MIX = (("null", 0.50), ("harmful", 0.35), ("gain", 0.15))  # proposal stream
# Outcome objects are immutable: one per (pass, soft rounded to 0.01) keeps the simulation fast.
_OUTCOMES = {(s, k): Outcome(score=float(s), soft=k / 100) for s in (0, 1) for k in range(101)}


@dataclass
class PolicySpec:
    label: str
    make: Callable[[int], GatePolicy]
    rerun_incumbent: bool = False
    minibatch: bool = False


POLICIES = [
    PolicySpec(
        "(a) minibatch improved [GEPA]", lambda seed: MinibatchImproved(MINIBATCH, seed), minibatch=True
    ),
    PolicySpec("(b) val mean improved [SkillOpt]", lambda seed: MeanImproved()),
    PolicySpec("(c) fixed band 0.05 [SkillOpt-Lite]", lambda seed: FixedDeadBand(0.05)),
    PolicySpec("(d) harnessopt, one look", lambda seed: PairedGate(GateConfig(), second_look=0)),
    PolicySpec("(d) harnessopt, cached incumbent", lambda seed: PairedGate(GateConfig())),
    PolicySpec(
        "(d) harnessopt, rerun incumbent",
        lambda seed: PairedGate(GateConfig(rerun_incumbent=True)),
        rerun_incumbent=True,
    ),
]


def latent_population(rng: np.random.Generator, n: int) -> np.ndarray:
    """Pass probabilities: a share MID_SHARE of tasks is genuinely stochastic, the rest near 0 or 1."""
    kind = rng.choice(3, size=n, p=[0.55 * (1 - MID_SHARE), 0.45 * (1 - MID_SHARE), MID_SHARE])
    low, high, mid = rng.beta(0.5, 8.0, n), rng.beta(8.0, 0.5, n), rng.beta(2.0, 2.0, n)
    return np.where(kind == 0, low, np.where(kind == 1, high, mid))


def _take_mass(pool: np.ndarray, gains: np.ndarray, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """First tasks of ``pool`` whose per-task changes add up to exactly ``mass`` (last one partial)."""
    if mass <= 0 or len(pool) == 0:
        return pool[:0], gains[:0]
    csum = np.cumsum(gains)
    k = int(np.searchsorted(csum, mass)) + 1
    k = min(k, len(pool))
    take = gains[:k].copy()
    take[-1] -= max(0.0, float(csum[k - 1]) - mass)
    return pool[:k], take


def make_proposal(p: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """New pass probabilities: fixes some tasks, breaks others; population-mean change is exact."""
    n = len(p)
    target = {"null": 0.0, "gain": 0.10}.get(kind, -rng.uniform(0.02, 0.10))
    broken_mass = rng.uniform(0.01, 0.06) * n
    fixed_mass = broken_mass + target * n
    if fixed_mass < 0:
        broken_mass, fixed_mass = -target * n, 0.0
    order = rng.permutation(n)
    fixable = order[p[order] < 0.9]
    fix_ids, up = _take_mass(fixable, (1 - p[fixable]) * rng.uniform(0.5, 1.0, len(fixable)), fixed_mass)
    rest = np.setdiff1d(order[p[order] > 0.1], fix_ids, assume_unique=True)
    rest = rng.permutation(rest)
    brk_ids, down = _take_mass(rest, p[rest] * rng.uniform(0.5, 1.0, len(rest)), broken_mass)
    new = p.copy()
    new[fix_ids] += up
    new[brk_ids] -= down
    return np.clip(new, 0.0, 1.0)


def rollout(p: np.ndarray, ids: np.ndarray, rng: np.random.Generator) -> Outcomes:
    """One run per task: pass ~ Bernoulli(p); soft = partial credit that tracks p, with noise."""
    probs = p[ids]
    wins = (rng.random(len(ids)) < probs).astype(int)
    soft = np.clip(0.6 * probs + 0.4 * wins + rng.normal(0.0, 0.1, len(ids)), 0.0, 1.0)
    keys = np.rint(soft * 100).astype(int)
    return {
        f"t{i}": [_OUTCOMES[(w, k)]]
        for i, w, k in zip(ids.tolist(), wins.tolist(), keys.tolist(), strict=True)
    }


@dataclass
class Tally:
    proposals: dict[str, int] = field(default_factory=lambda: {k: 0 for k, _ in MIX})
    accepted: dict[str, int] = field(default_factory=lambda: {k: 0 for k, _ in MIX})
    final: list[float] = field(default_factory=list)
    inflation: list[float] = field(default_factory=list)
    rollouts: list[int] = field(default_factory=list)


def run_policy(
    spec: PolicySpec,
    p0: np.ndarray,
    val: np.ndarray,
    train: np.ndarray,
    seed: int,
    kinds: list[str],
    tally: Tally,
) -> None:
    """One optimization run of ``len(kinds)`` rounds under one policy."""
    gate = spec.make(seed)
    p = p0
    noise = np.random.default_rng([seed, 7])
    cached = None if spec.minibatch else rollout(p, val, noise)
    spent = 0 if spec.minibatch else len(val)
    reported = 0.0
    for r, kind in enumerate(kinds):
        cand_p = make_proposal(p, kind, np.random.default_rng([seed, r, 1]))
        ids = (
            np.random.default_rng([seed, r, 2]).choice(train, MINIBATCH, replace=False)
            if spec.minibatch
            else val
        )
        cand = rollout(cand_p, ids, noise)
        inc = cached if cached is not None and not spec.rerun_incumbent else rollout(p, ids, noise)
        spent += 2 * len(ids) if spec.minibatch or spec.rerun_incumbent else len(ids)

        def confirm(flipped, cand_p=cand_p, p=p):
            nonlocal spent
            arr = np.array([int(t[1:]) for t in flipped])
            spent += 2 * len(arr)
            return rollout(cand_p, arr, noise), rollout(p, arr, noise)

        dec = gate.decide(cand, inc, confirm)
        tally.proposals[kind] += 1
        if dec.accept:
            tally.accepted[kind] += 1
            reported += dec.delta
            p, cached = cand_p, cand
    tally.final.append(float(p.mean()))
    tally.inflation.append(reported - float(p.mean() - p0.mean()))
    tally.rollouts.append(spent)


def simulate(args: tuple[int, list[int], int]) -> tuple[int, list[Tally], list[float]]:
    m, seeds, rounds = args
    tallies = [Tally() for _ in POLICIES]
    initial = []
    for seed in seeds:
        rng = np.random.default_rng([seed, m])
        p0 = latent_population(rng, POPULATION)
        perm = rng.permutation(POPULATION)
        val, train = perm[:m], perm[m:]
        names, weights = zip(*MIX, strict=True)
        kinds = [str(k) for k in rng.choice(names, size=rounds, p=weights)]
        initial.append(float(p0.mean()))
        for spec, tally in zip(POLICIES, tallies, strict=True):
            run_policy(spec, p0, val, train, seed * 1000 + m, kinds, tally)
    return m, tallies, initial


def merge(parts: list[Tally]) -> Tally:
    out = Tally()
    for t in parts:
        for k in out.proposals:
            out.proposals[k] += t.proposals[k]
            out.accepted[k] += t.accepted[k]
        out.final += t.final
        out.inflation += t.inflation
        out.rollouts += t.rollouts
    return out


def table(m: int, tallies: list[Tally], initial: list[float], runs: int, rounds: int) -> str:
    lines = [
        f"val size m={m}: {runs} runs x {rounds} rounds, initial true quality {statistics.mean(initial):.3f}",
        "| policy | final true quality | false-accept null | false-accept harmful | power +0.10 "
        "| inflation (reported - true gain) | rollouts/run |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec, t in zip(POLICIES, tallies, strict=True):
        rate = {k: t.accepted[k] / max(1, t.proposals[k]) for k in t.proposals}
        lines.append(
            f"| {spec.label} | {statistics.mean(t.final):.3f} | {rate['null']:.3f} | {rate['harmful']:.3f} "
            f"| {rate['gain']:.3f} | {statistics.mean(t.inflation):+.3f} | {statistics.mean(t.rollouts):.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000, help="simulated optimization runs per val size")
    ap.add_argument("--rounds", type=int, default=10, help="rounds (proposals) per run")
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 50, 200], help="val sizes m")
    ap.add_argument("--quick", action="store_true", help="40 runs: a fast look at the same table")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    runs = 40 if a.quick else a.runs
    started = time.monotonic()
    chunks = [(m, list(range(w, runs, a.workers)), a.rounds) for m in a.sizes for w in range(a.workers)]
    with mp.Pool(a.workers) as pool:
        parts = pool.map(simulate, chunks)
    for m in a.sizes:
        mine = [(t, i) for mm, t, i in parts if mm == m]
        merged = [merge([t[k] for t, _ in mine]) for k in range(len(POLICIES))]
        print(table(m, merged, [x for _, i in mine for x in i], runs, a.rounds), end="\n\n")
    print(f"wall time {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
