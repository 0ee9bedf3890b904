"""What each of a round's candidates is aimed at: the failure clusters of the round's train runs.

A cluster is a failure class of ``rollout.taxonomy`` with the train tasks whose run failed that way.
With K candidates, candidate i gets the i-th largest cluster; when there are fewer clusters than
candidates, the largest cluster is split by task (so two candidates read different failing runs);
past that a candidate gets an open brief (a different improvement than the others'). When earlier
rounds left complementary candidates in the archive, the last candidate is asked to merge them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harnessopt.protocols import TaskResult
from harnessopt.rollout.taxonomy import FAILURE_CLASSES, classify

OPEN = "open"
MERGE = "merge"


@dataclass(frozen=True)
class Focus:
    """What one candidate's brief aims it at: a failure class and the train tasks that show it."""

    label: str  # a failure class ("wrong answer"), "open" or "merge"
    task_ids: tuple[str, ...] = ()


def clusters(train: Sequence[TaskResult]) -> list[Focus]:
    """Failed train runs grouped by failure class: largest first, then in the taxonomy's order."""
    by_class: dict[str, list[str]] = {}
    for r in train:
        if (cls := classify(r)) is not None and r.task_id not in by_class.setdefault(cls, []):
            by_class[cls].append(r.task_id)
    order = sorted(by_class, key=lambda c: (-len(by_class[c]), FAILURE_CLASSES.index(c)))
    return [Focus(c, tuple(sorted(by_class[c]))) for c in order]


def assign(train: Sequence[TaskResult], k: int, *, merge: bool = False) -> list[Focus]:
    """One focus per candidate (``k`` of them); ``merge``: the last one merges archived candidates."""
    slots = k - 1 if merge and k >= 2 else k
    found = clusters(train)
    while len(found) < slots:
        big = max(found, key=lambda f: len(f.task_ids), default=None)
        if big is None or len(big.task_ids) < 2:
            break
        i, half = found.index(big), (len(big.task_ids) + 1) // 2
        found[i : i + 1] = [Focus(big.label, big.task_ids[:half]), Focus(big.label, big.task_ids[half:])]
    found = _numbered(found)
    found = found[:slots] + [Focus(OPEN)] * (slots - len(found))
    return found + ([Focus(MERGE)] if slots < k else [])


def _numbered(found: list[Focus]) -> list[Focus]:
    """A class split into n parts reads "wrong answer (part 1 of 3)", ..."""
    total = {f.label: sum(g.label == f.label for g in found) for f in found}
    seen: dict[str, int] = {}
    out = []
    for f in found:
        if total[f.label] == 1:
            out.append(f)
            continue
        seen[f.label] = seen.get(f.label, 0) + 1
        out.append(Focus(f"{f.label} (part {seen[f.label]} of {total[f.label]})", f.task_ids))
    return out
