"""The noise floor: what the val set can detect, measured by an A/A test (docs/gate.md, "Noise floor").

Before round 1, and again whenever something that changes a rollout changes (the environment part
of the val-cache key: scorer, tasks, model, sandbox, limits, epochs...), the loop runs the incumbent
twice on val. Two identical arms differ only by run noise: the share of tasks solved in one run and
not the other (the flip rate), the SD of their paired differences, and from those the smallest true
gain the gate detects with 80% power on this val set. ``init`` has no measurement yet: it states
the same figure under an assumed flip rate.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import stats
from harnessopt.protocols import Outcomes

POWER = 0.8
ASSUMED_FLIP_RATE = 0.2  # tasks whose outcome differs between two identical runs (before any A/A)
MAX_EPOCHS = 64


def detectable(m: int, sd: float, cfg: GateConfig, epochs: int) -> float:
    """The smallest true mean gain d the gate as configured accepts with probability ``POWER``.

    Modelled on the look that decides a close call: with reruns and a second look
    (``second_look`` > 0, ``confirm_flips``), the second look, at its share of alpha, on
    ``epochs + second_look`` runs a task of the candidate against the incumbent's bank
    (``banked_epochs`` runs; the paired gate: as many as the candidate): run noise, the A/A paired
    SD ``sd`` measured at ``epochs`` runs a side, shrinks by sqrt(epochs (1/runs + 1/bank) / 2), and a
    pass/fail flip moves the mean by 1/(runs m). Without them, one look on ``epochs`` runs at the
    primary test's whole alpha. d = dead zone + z_power standard errors at the spread a gain brings:
    a gain d on pass/fail tasks fixes about d of them more than it breaks, which adds d(1 - d) to
    the variance. Within 10% of the gate's simulated 80% point at m = 50 on the noise of
    ``benchmarks/gate_simulation.py`` (tests/gate/test_noise_floor.py)."""
    if m < 2:
        return math.inf
    share = cfg.secondary_share if cfg.secondary != "none" else 0.0
    looks = 2 if cfg.confirm_flips and cfg.second_look > 0 else 1
    level = stats.round_levels(1.0 - cfg.confidence, looks, share, cfg.first_look_share).looks[-1]
    epochs = max(epochs, 1)
    runs = epochs + (cfg.second_look if looks == 2 else 0)
    # the banked gate: the incumbent's side is the mean of its whole bank, the candidate's of its runs
    bank = cfg.banked_epochs if cfg.judges_bank else runs
    noise = sd * math.sqrt(epochs / 2 * (1 / runs + 1 / bank))
    z, step = NormalDist().inv_cdf(POWER), 1.0 / runs
    d = nxt = 0.0
    for _ in range(60):  # the fixed point d = zone(s) + z s / sqrt(m), s^2 = noise^2 + d (1 - d)
        s = math.sqrt(noise * noise + d * (1.0 - d))
        nxt = min(1.0, stats.dead_zone(m, s, level, cfg.min_effect, step=step) + z * s / math.sqrt(m))
        if abs(nxt - d) < 1e-7:
            break
        d = nxt
    return nxt


def what_reaches(m: int, sd: float, cfg: GateConfig, epochs: int) -> dict[str, int | None]:
    """Val tasks (at these epochs), or epochs (on these tasks), that bring the detectable effect down
    to ``cfg.target_effect``; None when no number up to the search limit does. Run noise shrinks like
    1/epochs in variance; the SD per task is assumed to stay as measured for more tasks."""
    target = cfg.target_effect
    tasks: int | None = None
    hi = max(m, 2)
    while hi < 10**6 and detectable(hi, sd, cfg, epochs) > target:
        hi *= 2
    if detectable(hi, sd, cfg, epochs) <= target:
        lo = max(m, 2)
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if detectable(mid, sd, cfg, epochs) > target else (lo, mid)
        tasks = hi
    more = next(
        (
            k
            for k in range(epochs, MAX_EPOCHS + 1)
            if detectable(m, sd * math.sqrt(epochs / k), cfg, k) <= target
        ),
        None,
    )
    return {"tasks": tasks, "epochs": more}


def measure(first: Outcomes, second: Outcomes, cfg: GateConfig) -> dict[str, Any]:
    """The A/A record: two runs of the same incumbent on the same val tasks."""
    a, b = stats.task_means(first), stats.task_means(second)
    ids = sorted(set(a) & set(b))
    diffs = [b[t] - a[t] for t in ids]
    flips = sum(stats.solved(a[t]) != stats.solved(b[t]) for t in ids)
    epochs = max((len(first[t]) for t in ids), default=1)
    m, sd = len(ids), stats.sample_sd(diffs)
    mde = detectable(m, max(sd, stats.sd_floor(m)), cfg, epochs)
    return {
        "blind": blind(first, second, ids),
        "m": m,
        "epochs": epochs,
        "flip_rate": flips / m if m else 0.0,
        "paired_sd": sd,
        "aa_delta": stats.mean(diffs),
        "detectable": mde,
        "target_effect": cfg.target_effect,
        "reach": what_reaches(m, max(sd, stats.sd_floor(m)), cfg, epochs) if mde > cfg.target_effect else {},
        "rollouts": sum(len(first[t]) + len(second[t]) for t in ids),
    }


def blind(first: Outcomes, second: Outcomes, ids: list[str]) -> str:
    """Why an A/A test measured nothing, or "": when every run of both arms scored the same (every
    task failed, or passed, every time) there is no run noise to see, whatever the model did."""
    scores = {o.score for t in ids for o in (*first[t], *second[t])}
    if not ids or len(scores) != 1:
        return ""
    score = next(iter(scores))
    what = "failed" if score <= 0 else "passed" if score >= 1 else f"scored {score:g}"
    runs = sum(len(first[t]) + len(second[t]) for t in ids)  # both arms: 2 a task, or the whole bank
    return (
        f"all {runs} runs of the {len(ids)} val tasks compared in the A/A test {what}: the scores cannot "
        "show run-to-run "
        "noise (the answers may still have changed), so a flip rate of 0 and a paired SD of 0 say nothing"
        + (
            "; check the model answers at all (a model that fails every task gives the gate no signal), "
            "or use tasks it passes some of the time"
            if score <= 0
            else ""
        )
    )


def lines(nf: dict[str, Any]) -> list[str]:
    """What ``run`` and ``status`` print about a measured noise floor."""
    if nf.get("blind"):
        return [f"noise floor measured nothing: {nf['blind']}"]
    out = [
        f"noise floor (incumbent against itself on {nf['m']} val tasks x {nf['epochs']} epoch(s)): "
        f"{nf['flip_rate']:.0%} of tasks flipped, paired SD {nf['paired_sd']:.3f}; the gate detects a gain "
        f"of {_pct(nf['detectable'])} with {POWER:.0%} power"
    ]
    if nf["detectable"] > nf["target_effect"]:
        out.append(_advice(nf["detectable"], nf["target_effect"], nf["m"], nf["epochs"], nf.get("reach", {})))
    return out


def planned_detectable(n_val: int, cfg: GateConfig) -> float:
    """The gain ``n_val`` val tasks detect with 80% power under the assumed flip rate (inf: none)."""
    sd = math.sqrt(ASSUMED_FLIP_RATE)
    return detectable(n_val, max(sd, stats.sd_floor(n_val)), cfg, cfg.epochs)


def detects_nothing(n_val: int, cfg: GateConfig) -> bool:
    """Whether ``plan`` calls ``n_val`` val tasks too small to detect a realistic gain."""
    return n_val < 2 or planned_detectable(n_val, cfg) >= 0.5


def plan(n_val: int, cfg: GateConfig) -> list[str]:
    """What ``init`` can say before any run: the detectable gain under an assumed flip rate."""
    sd = math.sqrt(ASSUMED_FLIP_RATE)
    mde = planned_detectable(n_val, cfg)
    assumption = f"if {ASSUMED_FLIP_RATE:.0%} of tasks change outcome between identical runs"
    if detects_nothing(n_val, cfg):
        reach = what_reaches(n_val, sd, cfg, cfg.epochs)
        enough = f"about {reach['tasks']} val tasks" if reach["tasks"] else "far more val tasks"
        return [
            f"val has {n_val} task(s): too small to detect a realistic gain ({assumption}, the smallest "
            f"it detects is {_pct(mde)}); {enough} would detect {_pct(cfg.target_effect)}: add tasks "
            "or give val a larger --split share"
        ]
    out = [
        f"val has {n_val} tasks: {assumption}, the gate detects a gain of {_pct(mde)} with {POWER:.0%} "
        "power (the first run measures it: an A/A test of the incumbent before round 1)"
    ]
    if mde > cfg.target_effect:
        out.append(
            _advice(mde, cfg.target_effect, n_val, cfg.epochs, what_reaches(n_val, sd, cfg, cfg.epochs))
        )
    return out


def _advice(mde: float, target: float, m: int, epochs: int, reach: dict[str, Any]) -> str:
    ways = []
    if reach.get("tasks"):
        ways.append(f"about {reach['tasks']} val tasks (now {m})")
    if reach.get("epochs"):
        ways.append(f"gate.epochs {reach['epochs']} (now {epochs})")
    how = " or ".join(ways) or f"neither more tasks nor up to {MAX_EPOCHS} epochs"
    return f"that is above gate.target_effect {_pct(target)}: {how} would reach it"


def _pct(x: float) -> str:
    return "nothing" if math.isinf(x) else f"{x:+.3f}"


class NoiseFloorStore:
    """Measured noise floors by environment key (``rollout.val_cache.environment_key``), in ``.harnessopt/``."""

    def __init__(self, state_dir: Path):
        self.path = state_dir / "noise_floor.json"

    def get(self, env_key: str) -> dict[str, Any] | None:
        entry = self._load().get(env_key)
        return entry if isinstance(entry, dict) and "detectable" in entry else None

    def latest(self) -> dict[str, Any] | None:
        """The most recently measured noise floor (for ``status``)."""
        entries = [e for e in self._load().values() if isinstance(e, dict) and "detectable" in e]
        return max(entries, key=lambda e: e.get("measured_round", 0), default=None)

    def put(self, env_key: str, record: dict[str, Any]) -> None:
        data = self._load()
        data[env_key] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(self.path)

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: measured afresh
            return {}
        return data if isinstance(data, dict) else {}
