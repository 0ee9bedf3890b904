"""What the target's runs of one round did, per phase: a Runner observer the loop attaches.

A round runs its tasks in batches (``Runner.run`` calls), and each batch says its phase
(``phase=``; every result carries it): the incumbent's train tasks are the *rollout*, a candidate's
the *screening* (several candidates a round, ``search``); the incumbent on val is
*incumbent*; its smoke rerun made ahead is the *probe*; the candidate's first val batch is the
*smoke* test, the rest *validation*; the gate's reruns, the smoke test's reruns and an accept's
confirmation runs are *reruns*; test tasks are an *audit*. The counts (``taxonomy.phase_stats``)
and the identical-rerun groups go into the round's manifest when it is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from harnessopt.ledger.store import PhaseStats
from harnessopt.protocols import Task, TaskResult
from harnessopt.rollout.taxonomy import phase_stats

PHASES = ("rollout", "screening", "incumbent", "probe", "smoke", "validation", "reruns", "audit")


class RoundRuns:
    """Collects every finished run of a round by phase (a ``rollout.runner.RunObserver``)."""

    def __init__(self) -> None:
        self.runs: dict[str, list[TaskResult]] = {}
        self._by_side: dict[tuple[str, str, str], list[bool]] = {}

    def started(
        self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int], phase: str
    ) -> None:
        return None

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        self.runs.setdefault(result.phase, []).append(result)
        if result.split == "val":
            self._by_side.setdefault((label, result.task_id, result.phase), []).append(result.passed)

    def phases(self) -> dict[str, PhaseStats]:
        return {p: phase_stats(self.runs[p]) for p in PHASES if p in self.runs}

    def repeats(self) -> dict[str, list[int]]:
        """Val task -> [groups of identical runs (same side) seen, groups whose runs disagreed].

        The candidate's runs of a round are one group (smoke, validation epochs and reruns are the
        same skill and harness on the same task), and so are the incumbent's.
        """
        sides: dict[tuple[str, str], list[bool]] = {}
        for (label, task, _phase), passed in self._by_side.items():
            sides.setdefault((label, task), []).extend(passed)
        out: dict[str, list[int]] = {}
        for (_label, task), passed in sorted(sides.items()):
            if len(passed) >= 2:
                groups, mixed = out.get(task, [0, 0])
                out[task] = [groups + 1, mixed + (len(set(passed)) > 1)]
        return out
