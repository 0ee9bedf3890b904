"""The noise floor: an A/A test's flip rate, paired SD and the smallest gain the val set detects."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

import pytest

from harnessopt.config import GateConfig
from harnessopt.gate import noise_floor as noisefloor
from harnessopt.gate import stats
from harnessopt.protocols import Outcome


def _runs(passes: list[int]) -> dict[str, list[Outcome]]:
    return {f"t{i:03d}": [Outcome(float(p))] for i, p in enumerate(passes)}


def test_measure_counts_flips_and_the_paired_sd_of_identical_arms() -> None:
    first = _runs([1] * 20 + [0] * 20 + [1] * 5 + [0] * 5)
    second = _runs([1] * 20 + [0] * 20 + [0] * 5 + [1] * 5)  # 10 of 50 tasks flipped, both ways
    nf = noisefloor.measure(first, second, GateConfig())
    assert nf["m"] == 50 and nf["flip_rate"] == pytest.approx(0.2) and nf["aa_delta"] == 0.0
    assert nf["paired_sd"] == pytest.approx(stats.sample_sd([1.0] * 5 + [-1.0] * 5 + [0.0] * 40))
    assert nf["rollouts"] == 100
    # detectable d = the dead zone of the banked gate's second look (1 + 10 runs a task of the
    # candidate against the incumbent's bank of 11, at 95% of alpha) + z_0.8 standard errors, at the
    # spread s^2 = sd^2 / 11 + d (1 - d): run noise averaged over both sides' runs, and the spread
    # a gain d adds
    sd, d = nf["paired_sd"], nf["detectable"]
    s = math.sqrt(sd * sd / 11 + d * (1 - d))
    zone = stats.dead_zone(50, s, 1 - 0.05 * 0.95, step=1 / 11)
    assert d == pytest.approx(zone + NormalDist().inv_cdf(0.8) * s / math.sqrt(50), abs=1e-5)
    # 50 tasks cannot see +0.05 however often they run: a gain fixes too few of them
    assert d > 0.05 and nf["reach"]["tasks"] > 50 and nf["reach"]["epochs"] is None
    text = " ".join(noisefloor.lines(nf))
    assert "20% of tasks flipped" in text and "val tasks (now 50) would reach it" in text


def test_the_stated_detectable_gain_is_the_default_gates_simulated_80_percent_point() -> None:
    """What the noise floor prints at m = 50 is within 10% of the gain the gate that runs (both
    looks, the incumbent's bank, the smoke test) accepts 80% of the time, in the world of
    benchmarks/gate_simulation.py (flip rate about 0.21, paired SD about 0.46, 5% crashes)."""
    import numpy as np

    from benchmarks import gate_simulation as sim
    from harnessopt.gate.policy import make_gate

    m, trials, effects = 50, 150, (0.10, 0.15, 0.20)
    cfg = GateConfig()
    pol = sim.Policy(
        "", lambda: make_gate(cfg), smoke=True, confirm=True, futility=True, inc_epochs=cfg.banked_epochs
    )
    stated, power = [], dict.fromkeys(effects, 0)
    for t in range(trials):
        world = np.random.default_rng([t, m, 1])
        s0 = sim.population(world)
        val = world.permutation(sim.POPULATION)[:m]
        aa = np.random.default_rng([t, m, 8])
        stated.append(
            noisefloor.measure(sim.rollout(s0, val, aa), sim.rollout(s0, val, aa), cfg)["detectable"]
        )
        for e in effects:
            cand = sim.propose(s0, "+0.10", np.random.default_rng([t, m, 2]), effect=e)
            rng = np.random.default_rng([t, m, 3, int(e * 1000)])
            gate = pol.make()
            inc, _ = sim.measure_incumbent(s0, val, rng, pol.inc_epochs, retry=gate.bank_first_look)
            power[e] += sim.decide(pol, gate, s0, cand, val, inc, rng)[0].accept
    curve = [(e, power[e] / trials) for e in effects]
    lo, hi = next((a, b) for a, b in zip(curve, curve[1:], strict=False) if a[1] < 0.8 <= b[1])
    point = lo[0] + (hi[0] - lo[0]) * (0.8 - lo[1]) / (hi[1] - lo[1])  # the simulated 80% point
    said = sum(stated) / trials
    assert abs(said / point - 1) <= 0.10, (said, point, curve)


def test_a_noise_floor_of_all_equal_scores_says_it_measured_nothing() -> None:
    """A model that fails every task both times shows no flip and SD 0: that is not a measurement."""
    nf = noisefloor.measure(_runs([0] * 30), _runs([0] * 30), GateConfig())
    text = " ".join(noisefloor.lines(nf))
    assert nf["blind"] and text.startswith("noise floor measured nothing")
    assert (
        "all 60 runs of the 30 val tasks compared in the A/A test failed:" in text
        and "0% of tasks flipped" not in text
    )
    assert "model answers at all" in text
    passing = noisefloor.lines(noisefloor.measure(_runs([1] * 30), _runs([1] * 30), GateConfig()))
    assert (
        "all 60 runs of the 30 val tasks compared in the A/A test passed:" in passing[0]
        and "model answers" not in passing[0]
    )
    mixed = noisefloor.measure(_runs([1] * 15 + [0] * 15), _runs([1] * 15 + [0] * 15), GateConfig())
    assert not mixed["blind"]  # tasks differ: a flip rate of 0 is then a measurement


def test_the_detectable_gain_matches_a_simulated_gate_of_that_noise() -> None:
    """Power at the stated detectable gain, simulated with the real gate on that noise, is ~80%."""
    from harnessopt.gate.policy import PairedGate

    m, f = 200, 0.2
    sd = math.sqrt(f)
    cfg = GateConfig(confirm_flips=False)  # one look, as the formula assumes
    mde = noisefloor.detectable(m, sd, cfg, 1)
    rng = random.Random(3)
    accepted = 0
    trials = 300
    for _ in range(trials):  # paired differences with SD sqrt(f) around a true gain of mde
        d = [rng.choice((1.0, -1.0)) if rng.random() < f else 0.0 for _ in range(m)]
        d = [1.0 if x == 0 and rng.random() < mde / (1 - f) else x for x in d]  # mean gain: mde
        cand = {f"t{i}": [Outcome(max(0.0, x))] for i, x in enumerate(d)}
        inc = {f"t{i}": [Outcome(max(0.0, -x))] for i, x in enumerate(d)}
        accepted += PairedGate(cfg).decide(cand, inc).accept
    assert 0.72 <= accepted / trials <= 0.88, (mde, accepted / trials)


def test_what_reaches_the_target_more_tasks_or_more_epochs() -> None:
    cfg = GateConfig(target_effect=0.1, confirm_flips=False, confidence=0.96)  # one look at 0.96
    sd = math.sqrt(0.2)
    reach = noisefloor.what_reaches(200, sd, cfg, 1)
    n = reach["tasks"]
    assert noisefloor.detectable(n, sd, cfg, 1) <= 0.1 < noisefloor.detectable(n - 1, sd, cfg, 1)
    k = reach["epochs"]  # epochs shrink the run noise only, not the spread of the gain itself
    assert k == 2 and noisefloor.detectable(200, sd * math.sqrt(1 / k), cfg, k) <= 0.1
    assert noisefloor.what_reaches(50, sd, cfg, 1)["epochs"] is None
    assert noisefloor.what_reaches(50, sd, GateConfig(target_effect=0.0001), 1) == {
        "tasks": None,
        "epochs": None,
    }


def test_init_plan_says_plainly_when_val_is_too_small() -> None:
    tiny = noisefloor.plan(4, GateConfig())
    assert len(tiny) == 1 and "val has 4 task(s): too small to detect a realistic gain" in tiny[0]
    assert "val tasks would detect +0.050" in tiny[0]
    ok = noisefloor.plan(1000, GateConfig())
    assert ok[0].startswith("val has 1000 tasks: if 20% of tasks change outcome") and len(ok) == 1
    mid = noisefloor.plan(50, GateConfig())
    assert "above gate.target_effect +0.050" in mid[1]


def test_the_store_keeps_one_record_per_environment(tmp_path) -> None:
    store = noisefloor.NoiseFloorStore(tmp_path)
    assert store.get("a") is None and store.latest() is None
    store.put("a", {"detectable": 0.2, "measured_round": 1})
    store.put("b", {"detectable": 0.1, "measured_round": 4})
    assert store.get("a") == {"detectable": 0.2, "measured_round": 1}
    assert store.latest() == {"detectable": 0.1, "measured_round": 4}
    store.path.write_text("not json")
    assert store.get("a") is None


def test_init_prints_what_its_val_set_can_detect(tmp_path) -> None:
    from harnessopt.commands.demo import DEMO_DATA
    from tests.support.cli import cli

    demo = ("--skill", DEMO_DATA / "skill", "--tasks", DEMO_DATA / "tasks.jsonl")
    r = cli("init", tmp_path / "ws", *demo, "--skill-rule-off", "folder-name")  # the folder is 'skill'
    assert r.returncode == 0, r.stderr
    # 14 val tasks: the default gate (second look on 5 runs a task) detects about +0.39, not +0.05
    assert "val has 14 tasks: if 20% of tasks change outcome" in r.stdout
    assert "the gate detects a gain of +0.3" in r.stdout
    assert "val tasks (now 14) would reach it" in r.stdout and "next: harnessopt run" in r.stdout
    # docs/gate.md quotes this output: it was +0.386 and 230 tasks two calibrations ago (QA)
    from pathlib import Path

    docs = " ".join((Path(__file__).parents[2] / "docs" / "gate.md").read_text().split())
    gain = r.stdout.split("the gate detects a gain of ")[1].split()[0]
    tasks = r.stdout.split("(now 14) would reach it")[0].rsplit("about ", 1)[1]
    assert f'"the gate detects a gain of {gain} ... about {tasks}(now 14) would reach it"' in docs
