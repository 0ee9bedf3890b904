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
    # detectable d = the dead zone of the gate's last look + z_0.8 standard errors, at the spread
    # s^2 = sd^2 + d (1 - d) that a gain d adds to the A/A noise
    sd, d = nf["paired_sd"], nf["detectable"]
    s = math.sqrt(sd * sd + d * (1 - d))
    zone = stats.dead_zone(50, s, 0.96, step=1.0)
    assert d == pytest.approx(zone + NormalDist().inv_cdf(0.8) * s / math.sqrt(50), abs=1e-5)
    # 50 tasks cannot see +0.05 however often they run: a gain fixes too few of them
    assert d > 0.05 and nf["reach"]["tasks"] > 50 and nf["reach"]["epochs"] is None
    text = " ".join(noisefloor.lines(nf))
    assert "20% of tasks flipped" in text and "val tasks (now 50) would reach it" in text


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
    cfg = GateConfig(target_effect=0.1)
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
    assert len(tiny) == 1 and "val has 4 task(s): too small to detect anything" in tiny[0]
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
    assert "val has 14 task(s): too small to detect anything" in r.stdout
    assert "val tasks would detect +0.050" in r.stdout and "next: harnessopt run" in r.stdout
