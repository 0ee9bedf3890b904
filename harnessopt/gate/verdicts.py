"""The round's verdicts besides the gate's own (docs/gate.md): the smoke test's, the rejection of
a spent run budget, the confirmation of an accepted round, and the held-out share of val.

Pure functions of outcomes and config; the loop runs the rollouts and records what they return.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import stats
from harnessopt.protocols import GateDecision, Outcomes, Task


@dataclass
class SmokeVerdict:
    """The smoke test's finding: which first-run crashes reproduce and are the candidate's own."""

    crashed: list[str]  # tasks whose first candidate run crashed
    flaky: list[str]  # ... whose candidate rerun did not crash
    shared: list[str]  # ... that crashed again, but so did the incumbent there
    reproduced: list[str]  # ... that crashed again where the incumbent did not: these reject

    @property
    def reject(self) -> bool:
        return bool(self.reproduced)


def smoke_verdict(
    first: Outcomes, rerun_cand: Outcomes, rerun_inc: Outcomes, incumbent: Outcomes
) -> SmokeVerdict:
    """Judge the smoke test (docs/gate.md, "Smoke test"): a crashed task was rerun once on both
    sides (``rerun_cand``, ``rerun_inc``). It rejects only when the candidate's rerun crashed too
    and the incumbent does not have the crash: its rerun did not crash and not every cached run of
    it crashed. A task without a candidate rerun counts as reproduced (a crash never passes
    unchecked); one without any incumbent outcome counts as a crash the incumbent does not have.
    """
    v = SmokeVerdict([], [], [], [])
    for t in sorted(first):
        if not any(o.crashed for o in first[t]):
            continue
        v.crashed.append(t)
        again = rerun_cand.get(t, ())
        if again and not any(o.crashed for o in again):
            v.flaky.append(t)
            continue
        inc_cached = incumbent.get(t, ())
        inc_has = any(o.crashed for o in rerun_inc.get(t, ())) or (
            bool(inc_cached) and all(o.crashed for o in inc_cached)
        )
        (v.shared if inc_has else v.reproduced).append(t)
    return v


def spent_decision(cfg: GateConfig) -> GateDecision:
    """The rejection of a round whose run has spent ``gate.run_alpha``: nothing is tested."""
    reason = (
        f"rejected: gate.run_alpha {cfg.run_alpha} is spent ({cfg.run_rounds} gate decisions of "
        "gate.run_rounds); raise gate.run_rounds to give later rounds a share of the run's budget"
    )
    return GateDecision(False, reason, 0, 0.0, 0.0, 0.0, 1.0, details={"run_alpha_spent": True})


def confirmation_record(candidate: Outcomes, incumbent: Outcomes, on: str) -> dict[str, Any]:
    """The confirmation of an accepted round: its gain on runs that did not select it, with a 95%
    interval; ``confirmed`` when that gain is positive (then ``ho/best`` may move)."""
    a = stats.audit_stats(incumbent, candidate)
    confirmed = a["n"] > 0 and a["gain"] > 0
    lo, hi = a["interval"]
    rollouts = sum(len(r) for r in candidate.values()) + sum(len(r) for r in incumbent.values())
    summary = (
        f"{'confirmed' if confirmed else 'not confirmed'} on {a['n']} {on} tasks, runs that did not "
        f"select it: {a['gain']:+.3f} (95% interval {lo:+.3f} to {hi:+.3f})"
        + ("" if confirmed else "; ho/best does not move")
    )
    return {
        "on": on,
        "n": a["n"],
        "candidate_score": a["best_score"],
        "incumbent_score": a["base_score"],
        "gain": a["gain"],
        "interval": [lo, hi],
        "confirmed": confirmed,
        "rollouts": rollouts,
        "summary": summary,
    }


def split_val(val: Sequence[Task], cfg: GateConfig) -> tuple[list[Task], list[Task]]:
    """(the val tasks the gate sees, the held-out ones): with ``confirm: holdout`` a fixed share of
    val, chosen by a hash of the task id (stable as tasks are added), is set aside for confirming
    accepted rounds; otherwise nothing is."""
    if cfg.confirm != "holdout" or len(val) < 4:
        return list(val), []
    order = sorted(val, key=lambda t: hashlib.sha256(t.id.encode()).hexdigest())
    n_held = max(2, round(cfg.holdout_share * len(val)))
    held = {t.id for t in order[:n_held]}
    return [t for t in val if t.id not in held], [t for t in val if t.id in held]
