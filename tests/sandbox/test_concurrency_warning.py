"""Concurrency beyond what the cores can serve is warned about, once, when a run starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harnessopt.sandbox.docker.pool import concurrency_warning


def test_warns_past_two_tasks_per_core() -> None:
    assert concurrency_warning(4, cores=2) is None and concurrency_warning(1, cores=1) is None
    line = concurrency_warning(8, cores=2)
    assert line is not None and "\n" not in line
    assert "rollout.concurrency 8" in line and "2 core(s)" in line and "4 tasks at once" in line


def test_run_start_says_it_once(tmp_path: Path) -> None:
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    argv = [sys.executable, "-m", "harnessopt", "run", str(ws), "--dry-run", "--concurrency", "64"]
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    text = " ".join((out.stdout + out.stderr).split())  # a narrow terminal may wrap the line
    assert text.count("rollout.concurrency 64 is more than") == 1
    quiet = subprocess.run(argv[:-1] + ["1"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert quiet.returncode == 0 and "rollout.concurrency" not in quiet.stdout + quiet.stderr
