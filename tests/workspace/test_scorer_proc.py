"""The scorer in its own process: a crash, a leak, a hang or a wrong answer costs one task, not the run."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.workspace.scorer_proc import ScorerProcess

SCORER = """
import ctypes, os, sys, time

def score(task, answer, out_dir):
    kind = task["kind"]
    print("noise on stdout must not break the protocol")
    if kind == "segfault":
        ctypes.string_at(0)
    if kind == "exit":
        os._exit(7)
    if kind == "leak":
        hog = []
        while True:
            hog.append(bytearray(64 * 1024 * 1024))
    if kind == "hang":
        time.sleep(600)
    if kind == "raise":
        raise ValueError("bad answer format")
    return {"nan": float("nan"), "big": 1.7, "yes": "yes"}.get(kind, 1.0 if answer == "ok" else 0.0)
"""


@pytest.fixture
def scorer(tmp_path: Path):
    path = tmp_path / "scorer.py"
    path.write_text(SCORER)
    s = ScorerProcess(path, timeout_s=3, memory_mb=512)
    yield s
    s.close()


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("segfault", "killed by signal"),
        ("exit", "exited with code 7"),
        ("leak", "MemoryError"),  # its address-space limit
        ("hang", "did not return within 3 s"),
        ("raise", "ValueError: bad answer format"),
        ("nan", "finite"),
        ("big", "outside [0, 1]"),
        ("yes", "of type str"),
    ],
)
def test_every_kind_of_scorer_failure_scores_zero_with_its_reason(
    scorer, tmp_path: Path, kind, reason
) -> None:
    t0 = time.monotonic()
    r = scorer.score({"id": "t", "kind": kind}, "ok", tmp_path)
    assert r.score == 0.0 and not r.passed and r.error is not None and reason in r.error, r.error
    assert time.monotonic() - t0 < 30
    good = scorer.score({"id": "t", "kind": "fine"}, "ok", tmp_path)  # the next task is scored as usual
    assert good.score == 1.0 and good.passed and good.error is None
    assert not math.isnan(r.score)


def test_concurrent_calls_each_get_their_own_answer(scorer, tmp_path: Path) -> None:
    got: dict[int, float] = {}

    def one(i: int) -> None:
        got[i] = scorer.score({"id": str(i), "kind": "fine"}, "ok" if i % 2 else "no", tmp_path).score

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {i: float(i % 2) for i in range(8)}


def test_a_scorer_that_does_not_import_stops_before_any_rollout(tmp_path: Path) -> None:
    path = tmp_path / "scorer.py"
    path.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(UserError, match="nonexistent_module_xyz"):
        ScorerProcess(path, timeout_s=3)
