"""False rejects and detection of the memorised-answer check (harnessopt.gate.memorised.decide),
in the world of benchmarks/gate_simulation.py (docs/gate.md, "Memorised answers").

Honest candidates: a real gain (+0.05, +0.10, +0.20 of the population's mean pass rate) is
proposed against a fresh incumbent; the REAL gate (``make_gate(GateConfig())``, the default: the
banked gate, against the incumbent's bank of cached runs, its crash reruns and second look;
``--paired`` for the paired gate with its flip reruns) decides on m val tasks; for every accept,
the check runs as the loop does: the gate's
fixed tasks, ``variants`` perturbed variants each, one fresh run per side. A perturbation keeps
the task's meaning, so a variant's pass probability is the task's own; a second row also lets
the perturbation itself flip 5% of runs on both sides (an input that got a little harder or
easier). The share of accepted real gains the check rejects is the false-reject rate.

Memorised candidates: a table answers ``share`` of the val tasks right (score 1) and is the
incumbent elsewhere; on a perturbed variant the table misses, so it is the incumbent there too.
The share of those the gate accepts that the check rejects is the detection rate.

The world's A/A flip rate (tasks solved in one run and not the other) is printed: real runs show
0.17-0.21 (docs/gate.md).

    python benchmarks/memorised_check.py            # 1000 proposals per row
    python benchmarks/memorised_check.py --quick    # 300 a row: the figures of docs/gate.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gate_simulation import (  # noqa: E402
    EFFECT,
    POPULATION,
    State,
    measure_incumbent,
    population,
    propose,
    rollout,
)
from harnessopt.config import ChecksConfig, GateConfig  # noqa: E402
from harnessopt.gate.bank import first_look  # noqa: E402
from harnessopt.gate.memorised import decide, gate_gains  # noqa: E402
from harnessopt.gate.noise_floor import measure  # noqa: E402
from harnessopt.gate.policy import make_gate  # noqa: E402
from harnessopt.protocols import Outcome, Outcomes  # noqa: E402

EFFECT.setdefault("+0.20", 0.20)  # a larger real gain than the gate simulation's mix
CHECKS = ChecksConfig()  # the shipped defaults; --alpha and --variants try others
GATE = GateConfig()  # the shipped gate; --paired: the paired gate


def _incumbent(inc: State, val: np.ndarray, w: np.random.Generator) -> Outcomes:
    """The incumbent's val runs as the loop caches them for the gate: its bank (crashes rerun
    once) for the banked gate, one run a task for the paired gate (as the simulation's baseline)."""
    if make_gate(GATE).bank_first_look:
        return measure_incumbent(inc, val, w, GATE.banked_epochs, retry=True)[0]
    return rollout(inc, val, w)


def _confirm(w: np.random.Generator, inc: State, cand: State, table: set[int] | None = None) -> Any:
    """The gate's reruns: fresh runs of both sides on the ids asked (a table answers its own)."""

    def confirm(ids: object) -> tuple[Outcomes, Outcomes]:
        keys = np.array([int(t[1:]) for t in ids], dtype=np.int64)  # type: ignore[attr-defined]
        got = rollout(cand, keys, w)
        if table is not None:
            got = {t: [Outcome(1.0, None, 0, False)] if int(t[1:]) in table else r for t, r in got.items()}
        return got, ({} if make_gate(GATE).bank_first_look else rollout(inc, keys, w))

    return confirm


def _variants(state: State, ids: list[str], n: int, rng: np.random.Generator, flip: float) -> Outcomes:
    """One run of each of ``n`` variants per task id; ``flip``: runs the perturbation itself flips."""
    out: dict[str, list[Outcome]] = {}
    for v in range(n):
        got = rollout(state, np.array([int(t[1:]) for t in ids], dtype=int), rng)
        for t, runs in got.items():
            o = runs[0]
            if flip and rng.random() < flip:
                o = Outcome(1.0 - o.score, None, o.tokens, o.crashed)
            out[f"{t}~{v}"] = [o]
    return out


def _check(
    gate_cand: Outcomes, gate_inc: Outcomes, fixed: list[str], pc: Outcomes, pi: Outcomes, variants: int
) -> bool | None:
    """The shipped check's verdict: True collapsed (reject), False kept, None not tested."""
    base = gate_inc if make_gate(GATE).bank_first_look else first_look(gate_inc, GATE.epochs)
    gains = gate_gains(fixed, gate_cand, base)  # as round.memorised
    of = {t: [f"{t}~{v}" for v in range(variants)] for t in fixed}
    verdict = decide(gains, pc, pi, of, alpha=CHECKS.memorised_alpha, retain=CHECKS.memorised_retain)
    return None if verdict.p is None else verdict.collapsed


def honest(m: int, kind: str, trials: int, flip: float, seed: int) -> tuple[int, int, int]:
    """(accepted, tested, rejected by the check) over ``trials`` proposals of a real gain."""
    accepted = tested = rejected = 0
    gate = make_gate(GATE)
    for i in range(trials):
        world = np.random.default_rng([seed, m, i])
        inc = population(world)
        val = world.permutation(POPULATION)[:m]
        cand = propose(inc, kind, world)
        inc_out, cand_out = _incumbent(inc, val, world), rollout(cand, val, world)
        d = gate.decide(cand_out, inc_out, _confirm(world, inc, cand))
        if not d.accept:
            continue
        accepted += 1
        pc = _variants(cand, d.fixed, CHECKS.memorised_variants, world, flip)
        pi = _variants(inc, d.fixed, CHECKS.memorised_variants, world, flip)
        verdict = _check(cand_out, inc_out, d.fixed, pc, pi, CHECKS.memorised_variants)
        tested += verdict is not None
        rejected += bool(verdict)
    return accepted, tested, rejected


def memorised(m: int, share: float, trials: int, seed: int) -> tuple[int, int, int]:
    """(accepted, tested, rejected) for a table that answers ``share`` of val right."""
    accepted = tested = rejected = 0
    gate = make_gate(GATE)
    for i in range(trials):
        world = np.random.default_rng([seed, m, 10**6 + i])
        inc = population(world)
        val = world.permutation(POPULATION)[:m]
        table = set(val[: int(share * m)].tolist())
        inc_out = _incumbent(inc, val, world)
        base = rollout(inc, val, world)
        cand_out = {
            t: [Outcome(1.0, None, 0, False)] if int(t[1:]) in table else runs for t, runs in base.items()
        }
        d = gate.decide(cand_out, inc_out, _confirm(world, inc, inc, table))
        if not d.accept:
            continue
        accepted += 1
        pc = _variants(inc, d.fixed, CHECKS.memorised_variants, world, 0.0)  # the table misses
        pi = _variants(inc, d.fixed, CHECKS.memorised_variants, world, 0.0)
        verdict = _check(cand_out, inc_out, d.fixed, pc, pi, CHECKS.memorised_variants)
        tested += verdict is not None
        rejected += bool(verdict)
    return accepted, tested, rejected


def flip_rate(m: int, seed: int, n: int = 200) -> float:
    rates = []
    for i in range(n):
        world = np.random.default_rng([seed, m, 7, i])
        s = population(world)
        val = world.permutation(POPULATION)[:m]
        rates.append(measure(rollout(s, val, world), rollout(s, val, world), GateConfig())["flip_rate"])
    return statistics.fmean(rates)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=ChecksConfig().memorised_alpha)
    ap.add_argument("--variants", type=int, default=ChecksConfig().memorised_variants)
    ap.add_argument("--retain", type=float, default=ChecksConfig().memorised_retain)
    ap.add_argument("--m", type=int, nargs="+", default=[50, 100])
    ap.add_argument("--paired", action="store_true", help="the paired gate (flip reruns, second look 4)")
    a = ap.parse_args()
    global CHECKS, GATE  # noqa: PLW0603 (one setting for the whole script)
    GATE = GateConfig(policy="paired", second_look=4) if a.paired else GateConfig()
    CHECKS = ChecksConfig(memorised_alpha=a.alpha, memorised_variants=a.variants, memorised_retain=a.retain)
    trials = 300 if a.quick else 1000
    print(
        f"memorised check (gate: {GATE.policy}): alpha {CHECKS.memorised_alpha}, retain {CHECKS.memorised_retain}, "
        f"{CHECKS.memorised_variants} variants per fixed task; {trials} proposals per row"
    )
    for m in a.m:
        print(f"\nval m = {m}: A/A flip rate of this world {flip_rate(m, a.seed):.3f} (real runs: 0.17-0.21)")
        all_acc = all_rej = 0
        for kind in ("+0.05", "+0.10", "+0.20"):
            for flip in (0.0, 0.05):
                acc, tested, rej = honest(m, kind, trials, flip, a.seed)
                all_acc, all_rej = all_acc + acc, all_rej + rej
                rate = rej / acc if acc else 0.0
                print(
                    f"  honest {kind}, perturbation flips {flip:.0%} of runs: {acc} accepted, {tested} "
                    f"tested, {rej} rejected by the check: false-reject rate {rate:.2%}"
                )
        print(
            f"  honest, all rows: {all_rej}/{all_acc} accepted real gains rejected ({all_rej / max(all_acc, 1):.2%})"
        )
        for share in (0.1, 0.2, 0.5):
            acc, tested, rej = memorised(m, share, max(trials // 3, 100), a.seed)
            print(
                f"  memorised table on {share:.0%} of val: {acc} accepted by the gate, {tested} tested, "
                f"{rej} rejected by the check: detection {rej / max(acc, 1):.1%}"
            )


if __name__ == "__main__":
    main()
