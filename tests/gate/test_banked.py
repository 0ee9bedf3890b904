"""The banked gate (harnessopt.gate.banked, the default): a paired t-test of the candidate's runs
against the mean of the incumbent's whole bank, crashes rerun once, two looks at one alpha."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from harnessopt.config import GateConfig
from harnessopt.gate.banked import LOOK_STEP, BankedGate
from harnessopt.gate.policy import PairedGate, make_gate
from harnessopt.protocols import Outcome, Outcomes


def _bank(p: dict[str, float], runs: int, rng: random.Random) -> Outcomes:
    return {t: [Outcome(float(rng.random() < q)) for _ in range(runs)] for t, q in p.items()}


class Reruns:
    """``confirm`` as the loop passes it to a banked gate: runs the candidate alone, counts calls."""

    def __init__(self, p: dict[str, float], rng: random.Random, crash: Sequence[str] = ()):
        self.p, self.rng, self.crash, self.calls = p, rng, set(crash), []  # type: ignore[var-annotated]

    def __call__(self, ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        self.calls.append(list(ids))
        return {
            t: [
                Outcome(0.0, crashed=True)
                if t in self.crash
                else Outcome(float(self.rng.random() < self.p[t]))
            ]
            for t in ids
        }, {}


def test_it_is_the_default_and_falls_back_to_the_paired_gate_with_a_secondary_test() -> None:
    gate = make_gate(GateConfig())
    assert isinstance(gate, BankedGate) and gate.bank_first_look
    soft = make_gate(GateConfig(secondary="soft"))
    assert isinstance(soft, PairedGate) and not soft.bank_first_look
    assert make_gate(GateConfig(policy="paired")).bank_first_look is False


def test_a_candidate_without_an_effect_is_accepted_at_most_alpha_of_the_time() -> None:
    """A/A against the incumbent's bank, on heterogeneous tasks (most near 0 or 1): every accept
    path (first look, second look) together stays within alpha = 0.05."""
    rng, accepted, trials = random.Random(7), 0, 400
    gate = BankedGate(GateConfig())
    for _ in range(trials):
        p = {f"t{i:02d}": rng.choice((0.02, 0.05, 0.5, 0.3, 0.7, 0.95, 0.98)) for i in range(50)}
        inc = _bank(p, gate.cfg.banked_epochs, rng)
        cand = _bank(p, 1, rng)
        accepted += gate.decide(cand, inc, Reruns(p, rng)).accept
    assert accepted / trials <= 0.05 + 2 * (0.05 * 0.95 / trials) ** 0.5, accepted


def test_a_real_gain_is_found_with_the_second_look_on_the_candidate_alone() -> None:
    rng = random.Random(1)
    base = {f"t{i:02d}": (0.5 if i < 30 else 0.95) for i in range(50)}
    better = {t: (0.8 if q == 0.5 else q) for t, q in base.items()}  # +0.18 on 30 of 50 tasks
    gate = BankedGate(GateConfig())
    inc = _bank(base, gate.cfg.banked_epochs, rng)
    reruns = Reruns(better, rng)
    d = gate.decide(_bank(better, 1, rng), inc, reruns)
    assert d.accept, d.reason
    assert d.details["design"] == "banked" and d.details["incumbent_runs"] == 11
    if d.details["look"] == 2:  # every call reruns every val task of the candidate, in steps
        assert all(sorted(c) == sorted(base) for c in reruns.calls)
        assert d.details["second_look_runs"] == len(reruns.calls) <= 10
        assert d.details["epochs_total"] == 1 + len(reruns.calls)


def test_the_second_look_stops_for_futility_after_a_step() -> None:
    """A first look that is promising by luck: the second look's first step shows nothing, so the
    rest of its runs are not spent."""
    p = {f"t{i:02d}": 0.5 for i in range(50)}
    inc = {t: [Outcome(float(k % 2)) for k in range(11)] for t in p}  # mean 0.5 on every task
    cand = {t: [Outcome(float(i < 32))] for i, t in enumerate(p)}  # 32 of 50 passed once: t ~ 2
    calls: list[int] = []

    def confirm(ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        calls.append(len(ids))
        return {t: [Outcome(0.0)] for t in ids}, {}  # the candidate fails every rerun

    gate = BankedGate(GateConfig())
    d = gate.decide(cand, inc, confirm)
    assert d.details["look"] == 2 and not d.accept
    assert d.details["second_look_stopped"] == {"runs": LOOK_STEP, "of": 10}
    assert len(calls) == LOOK_STEP


def test_a_crashed_candidate_run_is_rerun_once_and_a_reproduced_crash_scores_zero() -> None:
    ids = [f"t{i:02d}" for i in range(20)]
    inc = {t: [Outcome(1.0)] * 11 for t in ids}
    cand: dict[str, list[Outcome]] = {t: [Outcome(1.0)] for t in ids}
    cand["t00"] = [Outcome(0.0, crashed=True)]  # an outage: passes when rerun
    cand["t01"] = [Outcome(0.0, crashed=True)]  # crashes again: a failure
    asked: list[list[str]] = []

    def confirm(got: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        asked.append(list(got))
        return {t: [Outcome(0.0, crashed=True) if t == "t01" else Outcome(1.0)] for t in got}, {}

    d = BankedGate(GateConfig(second_look=0)).decide(cand, inc, confirm)
    assert asked == [["t00", "t01"]]  # one rerun each, never a second
    assert d.details["crash_reruns"] == 2 and "_retried" not in d.details
    assert d.broken == ["t01"] and d.delta == pytest.approx(-1 / 20)
