"""A Ray worker's job (rollout.ray.worker.run_job) without Ray: how it meets a cancel."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harnessopt.protocols import RunOutput, RunSpec
from harnessopt.rollout.ray import worker
from harnessopt.util.proc import wait_for_exit
from tests.support.interrupts import handlers_restored, swallow_an_interrupt_main


class SwallowedCancel:
    """A sandbox whose run meets a Ray cancel inside a finalizer, then waits for its harness (3 s)
    with the sandboxes' own wait."""

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        swallow_an_interrupt_main()
        proc = subprocess.Popen(["sleep", "3"])
        try:
            wait_for_exit(proc, 20)
        finally:
            proc.kill()
            proc.wait()
        out_dir.mkdir(parents=True, exist_ok=True)
        return RunOutput(0, 3.0, out_dir)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
def test_a_cancel_a_finalizer_swallowed_still_ends_the_job(tmp_path: Path, monkeypatch: Any) -> None:
    """Ray cancels a task with ``_thread.interrupt_main()``; where its KeyboardInterrupt lands in a
    finalizer it is dropped. The job installs the flag's handler, so the sandbox's wait raises it
    again and the task unwinds, rather than running its harness to the end."""
    monkeypatch.setattr(worker, "_candidate", lambda bundle: tmp_path)
    relay = SimpleNamespace(base_url="http://127.0.0.1:9", socket_path=None)
    monkeypatch.setattr(worker, "_relay", lambda ingress, secret: relay)
    monkeypatch.setattr(worker, "_sandbox", lambda settings: SwallowedCancel())
    job = worker.WorkerJob({"id": "t1"}, {}, "token", 20.0, {}, ("127.0.0.1", 9), "secret", 1 << 20)
    with handlers_restored():
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            worker.run_job(job, worker.Bundle("digest", b""))
        assert time.monotonic() - t0 < 2
