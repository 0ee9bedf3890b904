"""The gate of ``objective: both``: the task score and triggering, each gated within half the
round's alpha (docs/gate.md, "Objectives").

The val tasks split into two families, task tasks and trigger tasks. Each family is decided by the
configured gate policy at level alpha/2 (``policy`` is built for that level), so by the union bound
a candidate that improves neither is accepted with probability at most alpha, the round's whole
budget. The candidate is accepted when at least one family's gate accepts and neither family lost
significantly: a family whose mean paired difference is below minus its dead zone vetoes (a
description edit must not lower the task score, a body edit must not lower triggering). A veto
only rejects, so it spends nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from harnessopt.objective.trigger import is_trigger_task
from harnessopt.protocols import ConfirmFn, GateDecision, GatePolicy, Outcomes, Task

SHARE = 0.5  # each family's share of the round's alpha


def decide(
    val: Sequence[Task], cand: Outcomes, inc: Outcomes, policy: GatePolicy, confirm: ConfirmFn | None
) -> GateDecision:
    """Both families gated; one decision with each family's verdict in ``details.objectives``."""
    families = {
        "task": {t.id for t in val if not is_trigger_task(t)},
        "trigger": {t.id for t in val if is_trigger_task(t)},
    }
    parts: dict[str, GateDecision] = {}
    for name, ids in families.items():
        if ids & set(cand):
            sub_c = {k: v for k, v in cand.items() if k in ids}
            sub_i = {k: v for k, v in inc.items() if k in ids}
            parts[name] = policy.decide(sub_c, sub_i, confirm)
    wins = [n for n, d in parts.items() if d.accept]
    lost = [n for n, d in parts.items() if d.delta < -d.dead_zone]
    accept = bool(wins) and not lost
    said = "; ".join(f"{n}: {d.reason}" for n, d in parts.items())
    if lost:
        reason = f"rejected: {' and '.join(lost)} lower beyond the dead zone ({said})"
    elif wins:
        reason = f"accepted on {' and '.join(wins)}, each objective at alpha/2 ({said})"
    else:
        reason = f"rejected: neither objective cleared its gate at alpha/2 ({said})"
    n = sum(d.n for d in parts.values()) or 1
    total = {
        k: sum(getattr(d, k) * d.n for d in parts.values()) / n
        for k in ("candidate_score", "incumbent_score", "delta")
    }
    first = next(iter(parts.values()), None)
    return GateDecision(
        accept=accept,
        reason=reason,
        n=sum(d.n for d in parts.values()),
        candidate_score=round(total["candidate_score"], 4),
        incumbent_score=round(total["incumbent_score"], 4),
        delta=round(total["delta"], 4),
        dead_zone=max((d.dead_zone for d in parts.values()), default=0.0),
        fixed=sorted(f for d in parts.values() for f in d.fixed),
        broken=sorted(b for d in parts.values() for b in d.broken),
        noise_flips=sorted(x for d in parts.values() for x in d.noise_flips),
        details={
            "alpha": sum(float(d.details.get("alpha", 0.0)) for d in parts.values()),
            "alpha_split": f"each objective at {SHARE:g} of the round's alpha",
            "objectives": {
                name: {
                    "accept": d.accept,
                    "reason": d.reason,
                    "delta": d.delta,
                    "dead_zone": d.dead_zone,
                    "n": d.n,
                    "alpha": d.details.get("alpha"),
                }
                for name, d in parts.items()
            },
            **({"look_levels": first.details.get("look_levels")} if first else {}),
        },
    )
