"""A run that SIGKILL ends, so that none of its own clean-up runs: what its containers do then."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any


def start(script: str, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    """``script`` in a new interpreter, which prints its run id once its containers are up."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True, cwd=cwd
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def running_after_sigkill(
    client: Any, proc: subprocess.Popen[str], run_id: str, timeout_s: float = 60
) -> list[Any]:
    """Kill ``proc`` with SIGKILL and wait up to ``timeout_s`` for its run's containers to stop;
    those still running then."""
    proc.kill()
    proc.wait(timeout=30)
    label = {"label": f"harnessopt.run={run_id}"}
    deadline = time.monotonic() + timeout_s
    while (left := client.containers.list(filters=label)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return list(left)


def remove_leftovers(client: Any, proc: subprocess.Popen[str]) -> None:
    """The test's own clean-up: ``proc`` killed, and its containers, stopped or not, removed."""
    proc.kill()
    for c in client.containers.list(all=True, filters={"label": f"harnessopt.pid={proc.pid}"}):
        c.remove(force=True)
