"""A chain's pick (``search.checkpoints``): the best scored state is validated only when it scored more
than the margin above the chain's end; the steps after it are said not validated, and why."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harnessopt.config import SearchConfig
from harnessopt.protocols import Task, TaskResult
from harnessopt.rollout.run_cache import CHECKPOINT_EPOCH
from harnessopt.rollout.runner import Candidate
from harnessopt.search import checkpoints
from harnessopt.search.checkpoints import MARGIN, TASKS, Marks, fixed
from harnessopt.search.explore import _end, _Marks
from harnessopt.search.screen import Screened
from harnessopt.search.state import Proposed
from tests.support.search import proposed


def test_the_end_stays_unless_an_earlier_state_scored_clearly_above_it() -> None:
    marks = Marks()
    for kept, value in [(0, 0.50), (3, 0.62), (5, 0.60), (6, 0.60)]:
        marks.add(kept, value)
    assert marks.pick() == 6  # 0.62 is 0.02 above the end: within the margin
    marks.add(7, 0.55)
    assert marks.pick() == 3  # 0.07 above the end
    assert marks.pick(margin=0.10) == 7
    tied = Marks([(2, 0.7), (4, 0.7), (5, 0.6)])
    assert tied.pick() == 2  # the earliest of equals
    start = Marks([(0, 0.9), (2, 0.5)])
    assert start.pick() == 0  # the chain's start, where a checkpoint scored it: no step validated


def test_the_fixed_tasks_are_the_same_whatever_the_splits_order() -> None:
    split = [Task(id=f"t{i:03d}", input="q", answer="a", split="train") for i in range(80)]
    chosen = [t.id for t in fixed(split)]
    assert len(chosen) == TASKS and len(set(chosen)) == TASKS
    assert [t.id for t in fixed(list(reversed(split)))] == chosen
    assert len(fixed(split[:12])) == 12  # a small split: all of it
    every = SearchConfig(checkpoints=10)
    assert (
        checkpoints.runs(every, 12) == 12
        and checkpoints.runs(every, 80) == TASKS
        and checkpoints.runs(SearchConfig(checkpoints=0), 80) == 0
    )
    assert checkpoints.runs(SearchConfig(checkpoints=10, checkpoint_tasks=30), 80) == 30


def _result(task: Task, score: float) -> TaskResult:
    return TaskResult(
        task.id, "train", 1, CHECKPOINT_EPOCH, score, score >= 1.0, None, "", "", 0, None, 0.1, 1, 1, 1
    )


class _Runner:
    """Scores each state's runs as ``scores`` says (by the candidate's directory name)."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores, self.calls = scores, list[tuple[str, int, str]]()

    def run(
        self, cand: Candidate, tasks: list[Task], k: int, *, epochs: list[int], phase: str
    ) -> list[TaskResult]:
        self.calls.append((cand.root.name, epochs[0], phase))
        return [_result(t, self.scores[cand.root.name]) for t in tasks]


def _step(name: str, base: str) -> Proposed:
    """A kept step built on ``base``, its reason as the loop writes it (``explore._step_reason``)."""
    p = proposed(name)
    p.screened = Screened(
        name, 0.125, ("t1",), False, f"not validated: beat {base} on train (+0.125 on 8 train tasks, won 1, "
        "lost 0); a later step built on it", n=8,
    )  # fmt: skip
    return p


def _marks(scores: dict[str, float]) -> tuple[_Marks, _Runner, list[str]]:
    runner, said = _Runner(scores), list[str]()
    svc: Any = SimpleNamespace(runner=runner)
    rc: Any = SimpleNamespace(k=4)
    tasks = [Task(id=f"t{i}", input="q", answer="a", split="train") for i in range(4)]
    start = Candidate(Path("/scratch/incumbent"), "incumbent", "x")
    return _Marks(svc, rc, start, tasks, said.append), runner, said


def test_a_pick_before_the_end_is_validated_and_the_steps_after_it_say_why_not() -> None:
    chain = [_step(f"s{i}", f"s{i - 1}" if i > 1 else "the incumbent") for i in range(1, 5)]
    marks, runner, said = _marks({"s2": 0.80, "s3": 0.75, "s4": 0.70})
    marks.score(chain[:2], "s2")
    marks.score(chain[:2], "s3")  # s3 was dropped: the head is s2 still, not run again
    marks.score(chain[:3], "s4")
    marks.score(chain, "the end")
    assert runner.calls == [(n, CHECKPOINT_EPOCH, "screening") for n in ("s2", "s3", "s4")]
    assert (len(marks.scored), marks.ran) == (4, 3)  # the manifest's checkpoints and checkpoints_run
    assert [p.checkpoint for p in chain] == [None, 0.80, 0.75, 0.70]
    n = marks.choose(chain, None, MARGIN)
    assert n == 2 and said[-1] == (
        "round 4: the chain's pick is s2 (0.800 against the end s4's 0.700, more than 0.04 above it): it is "
        "validated, not the end"
    )
    for i, p in enumerate(chain[2:], start=3):  # s3 and s4, each with the base it beat
        assert p.screened is not None
        assert p.screened.reason == (
            "not validated: the chain's pick, s2, scored 0.800 on 4 fixed train tasks against the end's 0.700; "
            f"beat s{i - 1} on train (+0.125 on 8 train tasks, won 1, lost 0)"
        )
    _end(chain[:n], None, marks)
    s2 = chain[1]
    assert s2.screened is not None and s2.screened.chosen and not chain[3].screened.chosen  # type: ignore[union-attr]
    assert s2.screened.reason.startswith(
        "validated: the chain's pick (s1 -> s2), scored 0.800 on the fixed train tasks; beat s1 on train"
    )
    assert s2.copied.changed == ["skill/s1.md", "skill/s2.md"]  # the diff from main up to the pick
    assert s2.proposal.summary.startswith("s1 -> s2: Edit of s1; Edit of s2")


@pytest.mark.parametrize("end", [0.80 - MARGIN, 0.80])
def test_an_end_within_the_margin_of_the_best_is_validated(end: float) -> None:
    chain = [_step(f"s{i}", f"s{i - 1}" if i > 1 else "the incumbent") for i in range(1, 4)]
    marks, _, said = _marks({"s1": 0.80, "s3": end})
    marks.score(chain[:1], "s1")
    marks.score(chain, "the end")
    assert marks.choose(chain, None, MARGIN) == 3 and not any("pick" in line for line in said)
    _end(chain, None, marks)
    assert chain[2].screened is not None and chain[2].screened.reason.startswith(
        f"validated: the chain's end (s1 -> s2 -> s3), scored {end:.3f} on the fixed train tasks"
    )
