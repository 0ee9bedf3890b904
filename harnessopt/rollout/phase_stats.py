"""What the target's runs of one round did, per phase: a Runner observer the loop attaches.

A round runs its tasks in batches (``Runner.run`` calls). Each batch belongs to a phase, told
apart by what it runs (``phase_of``): the incumbent's train tasks are the *rollout*, a candidate's
the *screening* (several candidates a round, ``search``); the gate's reruns use
epochs from ``RERUN_EPOCH`` on; the incumbent's smoke rerun made ahead (``PROBE_EPOCH``,
``loop.probe_jobs``) is the *probe*; the incumbent on val is *incumbent*; the candidate's first val
batch is the *smoke* test when one is configured, later ones *validation*; test tasks are an
*audit*. The counts (``taxonomy.phase_stats``) and the identical-rerun groups go into the
round's manifest when it is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from harnessopt.ledger.store import PhaseStats
from harnessopt.protocols import Task, TaskResult
from harnessopt.rollout.taxonomy import phase_stats

RERUN_EPOCH = 1000  # loop.gate numbers the gate's reruns from here
PROBE_EPOCH = 3 * 10**6  # the incumbent's smoke rerun the loop makes while the optimizer works
PHASES = ("rollout", "screening", "incumbent", "probe", "smoke", "validation", "reruns", "audit")


def phase_of(label: str, tasks: Sequence[Task], epochs: Sequence[int], *, smoke_next: bool) -> str:
    """The phase of one batch (module docstring); ``smoke_next``: no candidate val batch ran yet
    this round and a smoke test is configured."""
    splits = {t.split for t in tasks}
    if splits == {"train"}:
        return "rollout" if label == "incumbent" else "screening"
    if "test" in splits:
        return "audit"
    if list(epochs) == [PROBE_EPOCH]:
        return "probe"
    if epochs and min(epochs) >= RERUN_EPOCH:
        return "reruns"
    if label != "candidate":
        return "incumbent"
    return "smoke" if smoke_next and list(epochs) == [0] else "validation"


class RoundRuns:
    """Collects every finished run of a round by phase (a ``rollout.RunObserver``)."""

    def __init__(self, smoke: int):
        self.smoke = smoke
        self.runs: dict[str, list[TaskResult]] = {}
        self._phase = "rollout"
        self._candidate_batches = 0
        self._by_side: dict[tuple[str, str, str], list[bool]] = {}

    def started(self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int]) -> None:
        smoke_next = self.smoke > 0 and self._candidate_batches == 0
        self._phase = phase_of(label, tasks, epochs, smoke_next=smoke_next)
        if label == "candidate" and self._phase in ("smoke", "validation"):
            self._candidate_batches += 1

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        self.runs.setdefault(self._phase, []).append(result)
        if result.split == "val":
            self._by_side.setdefault((label, result.task_id, self._phase), []).append(result.passed)

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
