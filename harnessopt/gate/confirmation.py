"""The confirmation of an accepted round on runs that did not select it (docs/gate.md,
"Selection-corrected reporting"), and the held-out share of val those runs may use."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import stats
from harnessopt.protocols import Outcomes, Task


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


def confirmation_record(
    candidate: Outcomes, incumbent: Outcomes, on: str, families: dict[str, set[str]] | None = None
) -> dict[str, Any]:
    """The confirmation of an accepted round: its gain on runs that did not select it, with a 95%
    interval; ``confirmed`` when that gain is positive (then ``ho/best`` may move). ``families``
    (``objective: both``): and no family significantly lower in those runs, as the gate's veto
    judges it; the pooled gain alone read a trigger loss as confirmed (QA)."""
    from harnessopt.objective.both import lower_families  # (objective code reads the gate's)

    a = stats.audit_stats(incumbent, candidate)
    lower = lower_families(candidate, incumbent, families) if families else {}
    confirmed = a["n"] > 0 and a["gain"] > 0 and not lower
    lo, hi = a["interval"]
    rollouts = sum(len(r) for r in candidate.values()) + sum(len(r) for r in incumbent.values())
    summary = (
        f"{'confirmed' if confirmed else 'not confirmed'} on {a['n']} {on} tasks, runs that did not "
        f"select it: {a['gain']:+.3f} (95% interval {lo:+.3f} to {hi:+.3f})"
        + "".join(f"; {name} significantly lower ({d:+.3f})" for name, d in lower.items())
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
        **({"lower": lower} if families else {}),
        "rollouts": rollouts,
        "summary": summary,
    }
