"""proc.Prestarted: a child started ahead in its own session, its job on fd 3."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harnessopt.util.proc import Prestarted
from tests.support.proc import live_in_session

# Reads its job on fd 3 and runs it as Python code; reports its open descriptors first.
CHILD = (
    "import os, sys\n"
    "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
    "job = os.read(3, 65536)\n"
    "print('fds', fds[:4], len(fds), flush=True)\n"
    "exec(job) if job else sys.exit(0)\n"
)


def _gone(sid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while live_in_session(sid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_job_arrives_on_fd_3_and_nothing_else_is_inherited(tmp_path: Path) -> None:
    leak = os.open(tmp_path, os.O_RDONLY)
    os.set_inheritable(leak, True)  # an inheritable descriptor of the host must not reach the child
    try:
        child = Prestarted([sys.executable, "-c", CHILD], cap=1000, env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(leak)
    done = child.run(b"print('ran', 6 * 7)\nsys.exit(4)\n", timeout_s=10)
    assert done.returncode == 4 and not done.timed_out
    # 0-2, the job pipe at 3, and the descriptor listdir itself opens: nothing else
    assert done.stdout.splitlines() == ["fds [0, 1, 2, 3] 5", "ran 42"]


def test_the_deadline_counts_from_the_job_and_kills_the_session(tmp_path: Path) -> None:
    child = Prestarted([sys.executable, "-c", CHILD], cap=1000, env={"PATH": "/usr/bin:/bin"})
    time.sleep(1.5)  # waiting for the job costs none of the task's time
    job = b"import subprocess, time\nsubprocess.Popen(['sleep', '30'])\ntime.sleep(0.5)\nprint('in time')\n"
    done = child.run(job, timeout_s=1.2)
    assert not done.timed_out and done.returncode == 0 and "in time" in done.stdout
    assert done.wall_s < 1.2 and _gone(child.pid)  # the background sleep died with it

    late = Prestarted([sys.executable, "-c", CHILD], cap=1000, env={"PATH": "/usr/bin:/bin"})
    t0 = time.monotonic()
    done = late.run(b"import time\ntime.sleep(30)\n", timeout_s=0.5)
    assert done.timed_out and done.returncode is None and time.monotonic() - t0 < 3
    assert _gone(late.pid)


def test_discard_closes_the_pipe_and_kills_the_session() -> None:
    child = Prestarted(
        [sys.executable, "-c", CHILD + "import time; time.sleep(30)\n"],
        cap=1000,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert live_in_session(child.pid) == [child.pid]
    child.discard()
    child.discard()  # idempotent
    assert child.proc.returncode is not None and _gone(child.pid)


def test_a_child_gone_before_its_job_gives_its_own_exit() -> None:
    child = Prestarted(
        [sys.executable, "-c", "import sys; sys.exit(9)"], cap=1000, env={"PATH": "/usr/bin:/bin"}
    )
    child.proc.wait(10)
    done = child.run(b"x" * (1 << 20), timeout_s=5)  # more than a pipe holds: the write fails, not hangs
    assert done.returncode == 9 and not done.timed_out
