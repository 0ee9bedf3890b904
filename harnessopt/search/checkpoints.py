"""A chain's pick (``search.checkpoints``): the state validated when a long chain drifts past its best.

A chain keeps a step when it beats its base on a train batch, and every kept step is a chance to keep
a lucky one: over a long chain the head drifts, and its end can be worse than a state it passed
through. GEPA-style scores every state on the same tasks and keeps the best; checkpoints do that on
train, which is not val, so the pick costs the val gate nothing. Every ``every`` steps the head
runs once on fixed train tasks (``search.checkpoint_tasks``, ``TASKS`` where no rule or person set
it; the same tasks for every state of the run, ``fixed``), and so does the chain's end; the best
scored state is validated instead of the end only when it scored more than
``search.checkpoint_margin`` above it (``MARGIN`` where unset; a state chosen from several by its score is flattered by it, and the
end is what the chain's last steps were kept on). The chain's start is not scored, except where a
checkpoint finds the head has not moved from it.

A checkpoint's runs go through the runner (``search.explore``) at ``CHECKPOINT_EPOCH``: a state a
checkpoint scored is not run again in its round (a checkpoint the head did not move past, the end
on a checkpoint), and a resumed round finds the runs in the run cache. A later round scores its
states afresh (the cache is per round).

When ``search.checkpoints`` is null they are switched on by budget (``search.length``): where the
run's budget pays for ``SWITCH_VALIDATIONS`` whole validations (``search.budget.validation_runs``
with both looks and the whole bank to measure), chains of ``LONG_STEPS`` steps with checkpoints
every ``EVERY``; below that, and in a run without a budget, the chain's end as before. The yield
benchmark (``benchmarks/run_yield.py``; docs/gate.md, "Yield") chose the threshold: at 2,000
rollouts (1.35 validations at m = 50) checkpoints cost 0.02-0.10 of true gain in every form tried,
and from 5,000 (3.37) they pay. It chose the narrow pick's 200 steps and checkpoints every 20 (150
and 10 before) at 5,000 rollouts, where 150 and 10 were level with GEPA-style minibatch acceptance
or below it and 200 and 20 are above (tuned on seeds 0-799, then confirmed on seeds no rule was
chosen on). The first chain's pick passes the gate in nearly every run there, so what the budget
spends after it (with 150 steps, the rest of a validation with both looks and a short second
chain that seldom commits) buys little; a longer chain scored less often spends more of it on
the chain (how, the benchmark does not print). Where it pays for ``WIDE.validations`` (10,000 rollouts at m = 50
pay for 6.7), the pick is wider (``WIDE``): chains of 300 steps, checkpoints every 10, each on all
the train tasks up to 100, and a margin of 0.03. There the default commits about once a run, so the first
chain's pick decides the run: a pick on more tasks and a longer chain to pick from are what the
yield benchmark's larger tables found worth paying for (docs/gate.md, "Yield").
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from harnessopt.config import SearchConfig
from harnessopt.protocols import Task, TaskResult

LONG_STEPS = 200  # a chain's steps where checkpoints are switched on by budget
EVERY = 20  # steps between checkpoints, switched on by budget (the narrow pick's; the wide one's: WIDE.every)
TASKS = 50  # fixed train tasks a checkpoint runs (at most the train split's)
MARGIN = 0.04  # the best scored state replaces the chain's end only when above it by more than this
SWITCH_VALIDATIONS = 2.0  # on by budget where the run's budget pays for this many whole validations


@dataclass(frozen=True)
class Pick:
    """How a chain's pick is made where the budget switches checkpoints on."""

    steps: int  # the chain's steps
    tasks: int  # fixed train tasks a checkpoint runs (at most the train split's)
    margin: float  # the best scored state replaces the end only when above it by more than this
    validations: float  # on where the run's budget pays for this many whole validations
    every: int  # steps between checkpoints


NARROW = Pick(LONG_STEPS, TASKS, MARGIN, SWITCH_VALIDATIONS, EVERY)
WIDE = Pick(300, 100, 0.03, 6.0, 10)  # where the budget pays for 6 whole validations: a wider pick


def tasks_of(search: SearchConfig, default: int = TASKS) -> int:
    """The fixed train tasks a checkpoint runs (``search.checkpoint_tasks``; null, where no rule
    filled it in: ``default``, the narrow pick's)."""
    return search.checkpoint_tasks or default


def margin_of(search: SearchConfig, default: float = MARGIN) -> float:
    """The margin the pick must beat the end by (``search.checkpoint_margin``; null: ``default``)."""
    return default if search.checkpoint_margin is None else search.checkpoint_margin


def fixed(split: Sequence[Task], count: int = TASKS) -> list[Task]:
    """The train tasks every checkpoint of a run scores on: ``count`` of the train split, a fixed
    shuffle (the same in every round and every run of the workspace)."""
    tasks = sorted(split, key=lambda t: t.id)
    random.Random(0).shuffle(tasks)
    return tasks[:count]


def held(steps: int, every: int) -> int:
    """Checkpoints a chain of ``steps`` steps holds (0 when checkpoints are off): one after every
    ``every`` steps before the end, as ``explore`` scores them, and the end's."""
    return (steps - 1) // every + 1 if every else 0


def runs(search: SearchConfig, n_train: int) -> int:
    """Runs one checkpoint of ``search`` as it runs takes with ``n_train`` train tasks: its fixed
    tasks (``tasks_of``), at most the train split's (0 when checkpoints are off)."""
    return min(tasks_of(search), n_train) if search.checkpoint_every else 0


def score(results: Sequence[TaskResult]) -> float:
    """A state's score: its mean over the fixed tasks (a crashed run scores what the scorer gave it)."""
    return statistics.fmean(r.score for r in results) if results else 0.0


def above(top: float, end: float, margin: float = MARGIN) -> bool:
    """Did ``top`` score more than ``margin`` above ``end``? (Scores are means over tasks: a
    difference of exactly the margin, 2 of 50 tasks, is not more than it, whatever the rounding.)"""
    return top - end > margin + 1e-9


@dataclass
class Marks:
    """A round's checkpoints in chain order: (how many kept steps the head had, its score)."""

    scored: list[tuple[int, float]] = field(default_factory=list)

    def add(self, kept: int, value: float) -> None:
        self.scored.append((kept, value))

    def pick(self, margin: float = MARGIN) -> int:
        """The kept steps of the state to validate: the best scored (the earliest of equals) when it
        scored more than ``margin`` above the end (the last scored), else the end's."""
        top = max(self.scored, key=lambda m: m[1])  # max keeps the earliest of equals
        end = self.scored[-1]
        return top[0] if above(top[1], end[1], margin) else end[0]

    def of(self, kept: int) -> float | None:
        """The score of the state with ``kept`` kept steps, if a checkpoint ran it."""
        return next((v for k, v in self.scored if k == kept), None)

    @property
    def ran(self) -> int:
        """The checkpoints that ran their tasks: one per state scored (a checkpoint that found its
        state scored already took that score, ``of``)."""
        return len({k for k, _ in self.scored})
