"""The Runner's runs started ahead (``prefetch``): a real local sandbox, gateway and scorer."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from harnessopt.config import BudgetConfig, Config, RolloutConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Task, TaskResult
from harnessopt.rollout.runner import Candidate, Runner
from harnessopt.sandbox.local.sandbox import LocalSandbox

# Each run appends "<task>.<start time>" to a log beside the candidate, sleeps, then answers.
HARNESS = """import argparse, json, time
ap = argparse.ArgumentParser()
for a in ("--task", "--skill", "--out"):
    ap.add_argument(a)
a = ap.parse_args()
task = json.load(open(a.task))
with open({log!r}, "a") as f:
    f.write(f"{{task['id']}} {{time.time()}}\\n")
time.sleep({sleep})
open(a.out + "/answer.txt", "w").write("Paris")
"""


class Seen:
    """A RunObserver: which batches started and which results it was told of."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []
        self.results: list[str] = []

    def started(
        self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int], phase: str
    ) -> None:
        self.batches.append((label, [t.id for t in tasks]))

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        self.results.append(result.task_id)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[Runner, Candidate, Path]]:
    root = tmp_path / "scratch" / "round-1" / "incumbent"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nAnswer.\n")
    (root / "harness").mkdir()
    log = tmp_path / "runs.log"
    (root / "harness" / "run.py").write_text(HARNESS.format(log=str(log), sleep=0.3))
    cfg = Config(rollout=RolloutConfig(sandbox="local", timeout_s=60, concurrency=2))
    box = LocalSandbox(cfg.rollout, isolation_mode="session")  # the log beside it stays writable
    try:
        with Gateway(ScriptedModel.from_dict({"rules": []}), BudgetConfig()) as gw:
            scorer = lambda task, answer, out: float(answer == task["answer"])  # noqa: E731
            yield Runner(cfg, box, gw, scorer, tmp_path / "scratch"), Candidate(root, "candidate", "c"), log
    finally:
        box.close()


def _tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", "Capital of France?", "Paris", "val") for i in range(n)]


def _runs(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_a_run_started_ahead_is_taken_by_the_batch_that_asks_and_never_run_twice(runner) -> None:
    r, cand, log = runner
    seen = Seen()
    r.observers.append(seen)
    tasks = _tasks(4)
    r.prefetch(cand, [(t, 0) for t in tasks[2:]], 1, phase="validation")
    deadline = time.monotonic() + 20
    while len(_runs(log)) < 2 and time.monotonic() < deadline:  # the idle slots take them now
        time.sleep(0.05)
    assert sorted(_runs(log)) == ["t2", "t3"] and seen.results == []  # observers hear at claim
    results = r.run(cand, tasks, 1, phase="validation")
    assert [x.task_id for x in results] == ["t0", "t1", "t2", "t3"] and all(x.passed for x in results)
    assert sorted(_runs(log)) == ["t0", "t1", "t2", "t3"]  # each ran once
    assert seen.batches == [("candidate", ["t0", "t1", "t2", "t3"])]
    assert sorted(seen.results) == ["t0", "t1", "t2", "t3"]


def test_dropped_runs_that_never_started_never_run(runner) -> None:
    r, cand, log = runner
    tasks = _tasks(6)
    r.prefetch(cand, [(t, 0) for t in tasks], 1, phase="validation")
    time.sleep(0.1)  # two start in the two idle slots, four wait
    ran = r.drop_prefetched()  # waits for the two running ones, returns them
    time.sleep(0.8)
    assert len(ran) == len(_runs(log)) and 1 <= len(ran) <= 2, _runs(log)
    assert all(label == "candidate" and x.passed for label, x in ran)
    # and a later batch of the same jobs runs them afresh
    assert [x.task_id for x in r.run(cand, tasks[:2], 1, phase="validation")] == ["t0", "t1"]


def test_a_batch_goes_before_runs_started_ahead(runner) -> None:
    r, cand, log = runner
    ahead, asked = _tasks(6), [Task("now", "Capital of France?", "Paris", "val")]
    r.prefetch(cand, [(t, 0) for t in ahead], 1, phase="validation")  # 2 start, 4 queue
    r.run(cand, asked, 1, phase="validation")
    order = _runs(log)
    # It waited for a slot, not for the queued ones: it starts when the first two end, beside the
    # next queued run (two slots free at once), so it is among the first four runs (without its
    # priority it would be the seventh).
    assert order.index("now") <= 3, order
    r.drop_prefetched()


def test_each_result_carries_the_phase_of_the_batch_that_claimed_it_or_of_its_prefetch(runner) -> None:
    r, cand, log = runner
    tasks = _tasks(3)
    r.prefetch(cand, [(t, 0) for t in tasks], 1, phase="probe")
    deadline = time.monotonic() + 20
    while len(_runs(log)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    [claimed] = r.run(cand, tasks[:1], 1, phase="smoke")
    assert claimed.phase == "smoke"  # counted where it was asked for
    left = r.drop_prefetched()
    assert left and all(x.phase == "probe" for _label, x in left)  # spent ahead: the phase it ran for
