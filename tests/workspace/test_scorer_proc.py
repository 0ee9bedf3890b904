"""The scorer in its own process: a crash, a leak, a hang or a wrong answer costs one task, not the run."""

from __future__ import annotations

import math
import os
import subprocess
import sys
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
    with pytest.raises(UserError, match="nonexistent_module_xyz") as err:
        ScorerProcess(path, timeout_s=3)
    assert str(err.value).count("fix scorer.py") == 1  # the child's line, not wrapped in a second one


PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def test_the_scorer_process_runs_no_pth_file_or_customize_module_a_harness_planted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local-mode harness without bwrap can write to the user's site dir (or site-packages): a
    ``.pth`` there runs in every interpreter that processes site dirs, the scorer's included. The
    site dir here is the user site of a PYTHONUSERBASE the test controls (the real one untouched),
    visible to the scorer's process as the real one would be: by its inherited environment."""
    user_base = tmp_path / "userbase"
    site_dir = user_base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site_dir.mkdir(parents=True)
    pth_marker, custom_marker = tmp_path / "pth-ran", tmp_path / "usercustomize-ran"
    (site_dir / "zz-harness.pth").write_text(PLANTED.format(marker=str(pth_marker)))
    (site_dir / "usercustomize.py").write_text(PLANTED.format(marker=str(custom_marker)))
    monkeypatch.setenv("PYTHONUSERBASE", str(user_base))
    probe = subprocess.run([sys.executable, "-c", "pass"], env=dict(os.environ), check=True)
    assert probe.returncode == 0 and pth_marker.exists()  # the plant works on a normal interpreter
    pth_marker.unlink()
    custom_marker.unlink(missing_ok=True)
    path = tmp_path / "scorer.py"
    path.write_text("import json\n\ndef score(task, answer, out_dir):\n    return 1.0\n")
    s = ScorerProcess(path, timeout_s=10, memory_mb=512)
    try:
        assert s.score({"id": "t"}, "ok", tmp_path).score == 1.0
    finally:
        s.close()
    assert not pth_marker.exists() and not custom_marker.exists()
