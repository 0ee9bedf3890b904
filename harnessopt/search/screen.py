"""Which of a round's candidates go to smoke and validation: screening on train (pure, no I/O).

Each candidate ran on the same train tasks (and epochs) as the incumbent, so the evidence is the
paired per-task difference ``d_i = mean_k cand_{i,k} - mean_k inc_{i,k}`` over the tasks both
sides ran. Train is not val: choosing among candidates on train spends nothing of the val gate's
error budget. Only when more than one candidate goes on to validation is the gate's alpha split
among them (Bonferroni, ``alpha_split``), because then the val data does the choosing.

Order (deterministic, never by val data): higher mean train difference first, then more tasks
won, then fewer tasks lost, then fewer crashed runs, then the candidate's id in natural order
(``c2`` before ``c10``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from harnessopt.gate.stats import mean, paired_diffs
from harnessopt.protocols import Outcomes


@dataclass(frozen=True)
class Screened:
    """One candidate's screen result, as the manifest, ``log``, ``diff`` and the report show it."""

    name: str  # candidate id ("c1", "c2", ...)
    mean_delta: float  # mean paired train difference against the incumbent (tasks both ran)
    wins: tuple[str, ...]  # train task ids where it beat the incumbent (higher mean score)
    chosen: bool  # goes on to smoke and validation
    reason: str  # why it was or was not validated, one line
    losses: tuple[str, ...] = ()  # train task ids where the incumbent beat it
    n: int = 0  # paired train tasks
    crashes: int = 0  # crashed train runs


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _dominates(a: dict[str, float], b: dict[str, float]) -> bool:
    """``a`` is at least as good as ``b`` on every task both ran and better on one."""
    ids = set(a) & set(b)
    return bool(ids) and all(a[i] >= b[i] for i in ids) and any(a[i] > b[i] for i in ids)


def screen(
    candidates: Mapping[str, Outcomes],
    incumbent: Outcomes,
    *,
    keep: int = 1,
    floor: float | None = None,
) -> list[Screened]:
    """Screen candidates on their train outcomes against the incumbent's on the same tasks.

    Returns one ``Screened`` per candidate, best first. At most ``keep`` are chosen: with
    ``keep == 1`` the best by the order above; with ``keep > 1`` the best non-dominated ones
    (no other candidate does at least as well on every task and better on one), so that two
    chosen candidates are never one the other's copy. ``floor``: a candidate whose mean train
    difference is below it is never chosen (``None``: the best is validated whatever its train
    result, as a round with one candidate does). A candidate without a paired train task is
    chosen only when it is the only candidate and no floor is set.
    """
    if keep < 1:
        raise ValueError("keep must be at least 1")
    rows: list[tuple[Screened, dict[str, float]]] = []
    for name, outcomes in candidates.items():
        ids, diffs = paired_diffs(outcomes, incumbent)
        per_task = dict(zip(ids, diffs, strict=True))
        crashes = sum(o.crashed for i in ids for o in outcomes[i])
        s = Screened(
            name=name,
            mean_delta=mean(diffs),
            wins=tuple(i for i, d in per_task.items() if d > 0),
            chosen=False,
            reason="",
            losses=tuple(i for i, d in per_task.items() if d < 0),
            n=len(ids),
            crashes=crashes,
        )
        rows.append((s, per_task))
    rows.sort(
        key=lambda r: (-r[0].mean_delta, -len(r[0].wins), len(r[0].losses), r[0].crashes, _natural(r[0].name))
    )

    only = len(rows) == 1
    chosen: list[str] = []
    out: list[Screened] = []
    for rank, (s, per_task) in enumerate(rows, 1):
        better = next((o.name for o, t in rows if o.name != s.name and _dominates(t, per_task)), None)
        if only and s.n == 0 and floor is None:
            why, ok = "the only candidate (not screened)", True
        elif s.n == 0:
            why, ok = "no train run paired with the incumbent's", False
        elif floor is not None and s.mean_delta < floor:
            why, ok = f"train difference {s.mean_delta:+.3f} below the screen floor {floor:+.3f}", False
        elif keep > 1 and better is not None:
            why, ok = f"dominated on train by {better}", False
        elif len(chosen) >= keep:
            why, ok = (
                f"ranked {rank} of {len(rows)} on train; {' and '.join(chosen)} validated instead",
                False,
            )
        else:
            why, ok = f"ranked {rank} of {len(rows)} on train", True
        if ok:
            chosen.append(s.name)
        summary = f" ({s.mean_delta:+.3f} on {s.n} train tasks, won {len(s.wins)}, lost {len(s.losses)})"
        reason = f"{'validated' if ok else 'not validated'}: {why}{summary if s.n else ''}"
        out.append(replace(s, chosen=ok, reason=reason))
    return out


def alpha_split(screened: list[Screened]) -> int:
    """Into how many parts the gate's alpha is split: the number of candidates validated (>= 1)."""
    return max(1, sum(s.chosen for s in screened))


def _names(names: list[str]) -> str:
    return ", ".join(names)
