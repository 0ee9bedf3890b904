"""The gate of ``objective: both``: the task score and triggering, each gated within half the
round's alpha (docs/gate.md, "Objectives").

The val tasks split into two families, task tasks and trigger tasks. Each family is decided by the
configured gate policy at level alpha/2 (``policy`` is built for that level), so by the union bound
a candidate that improves neither is accepted with probability at most alpha, the round's whole
budget. The candidate is accepted when at least one family's gate accepts and neither family lost
significantly: a family whose mean paired difference is below minus its *veto zone* vetoes (a
description edit must not lower the task score, a body edit must not lower triggering). The veto
zone is a one-sided bound at ``VETO_CONFIDENCE`` on that family's paired differences, a test of
harm of its own: the family's gate decision stops at its first look when it cannot accept, and
that look's dead zone, at a small share of alpha/2, is too wide to see a real loss (a trigger
family 0.400 lower on 10 tasks, every run of 4 broken, sat inside its 0.727 and the round was
accepted). A veto only rejects, so it spends nothing of alpha, whatever its level.
"""

from __future__ import annotations

from collections.abc import Sequence

from harnessopt.gate import stats
from harnessopt.objective.trigger import is_trigger_task
from harnessopt.protocols import ConfirmFn, GateDecision, GatePolicy, Outcomes, Task

SHARE = 0.5  # each family's share of the round's alpha
VETO_CONFIDENCE = 0.95  # the one-sided level of the test of harm that vetoes (it only rejects)


def decide(
    val: Sequence[Task], cand: Outcomes, inc: Outcomes, policy: GatePolicy, confirm: ConfirmFn | None
) -> GateDecision:
    """Both families gated; one decision with each family's verdict in ``details.objectives``."""
    families = family_ids(val)
    parts: dict[str, GateDecision] = {}
    for name, ids in families.items():
        if ids & set(cand):
            sub_c = {k: v for k, v in cand.items() if k in ids}
            sub_i = {k: v for k, v in inc.items() if k in ids}
            parts[name] = policy.decide(sub_c, sub_i, confirm)
    wins = [n for n, d in parts.items() if d.accept]
    veto = {n: veto_zone({k: v for k, v in cand.items() if k in families[n]}, inc) for n in parts}
    lost = [n for n, d in parts.items() if d.delta < -veto[n]]
    accept = bool(wins) and not lost
    said = "; ".join(f"{n}: {d.reason}" for n, d in parts.items())
    if lost:
        lower = ", ".join(f"{n} {parts[n].delta:+.3f} < -{veto[n]:.3f}" for n in lost)
        reason = f"rejected: {' and '.join(lost)} significantly lower ({lower}, one-sided {VETO_CONFIDENCE:.0%}; {said})"
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
                    "veto_zone": veto[name],
                    "lost": name in lost,
                    "n": d.n,
                    "alpha": d.details.get("alpha"),
                }
                for name, d in parts.items()
            },
            **({"look_levels": first.details.get("look_levels")} if first else {}),
        },
    )


def family_ids(val: Sequence[Task]) -> dict[str, set[str]]:
    """The val task ids of each family: task tasks, trigger tasks."""
    return {
        "task": {t.id for t in val if not is_trigger_task(t)},
        "trigger": {t.id for t in val if is_trigger_task(t)},
    }


def lower_families(cand: Outcomes, inc: Outcomes, families: dict[str, set[str]]) -> dict[str, float]:
    """Each family significantly lower in these runs (below minus its `veto_zone`), with its mean
    paired difference: what fails a confirmation. (A round's veto compares the family gate's own
    delta, which counts its flip reruns and second look, with the same zone.)"""
    lower = {}
    for name, ids in families.items():
        c, i = {t: v for t, v in cand.items() if t in ids}, {t: v for t, v in inc.items() if t in ids}
        diffs, zone = _harm(c, i)
        if diffs and (delta := stats.mean(diffs)) < -zone:
            lower[name] = delta
    return lower


def veto_zone(cand: Outcomes, inc: Outcomes) -> float:
    """How far below the incumbent a family's mean paired difference must be to veto: the
    one-sided ``VETO_CONFIDENCE`` bound on its task differences (``stats.dead_zone``, no
    ``min_effect``: a loss need not be a large one to count)."""
    return _harm(cand, inc)[1]


def _harm(cand: Outcomes, inc: Outcomes) -> tuple[list[float], float]:
    """The paired task differences of these runs and their `veto_zone`, computed once."""
    c, i = stats.task_means(cand), stats.task_means(inc)
    diffs = [c[t] - i[t] for t in c if t in i]
    epochs = max((len(v) for t, v in cand.items() if t in i), default=1)
    sd = stats.sample_sd(diffs) if len(diffs) > 1 else 0.0
    return diffs, stats.dead_zone(len(diffs), sd, VETO_CONFIDENCE, 0.0, step=1.0 / max(epochs, 1))
