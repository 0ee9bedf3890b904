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
    monkeypatch.setattr(worker, "_run", lambda run_id: None)
    monkeypatch.setattr(worker, "_candidate", lambda run, bundle: tmp_path)
    relay = SimpleNamespace(base_url="http://127.0.0.1:9", socket_path=None)
    monkeypatch.setattr(worker, "_relay", lambda run, ingress, secret: relay)
    monkeypatch.setattr(worker, "_sandbox", lambda run, settings: SwallowedCancel())
    job = worker.WorkerJob({"id": "t1"}, {}, "token", 20.0, {}, ("127.0.0.1", 9), "secret", 1 << 20)
    with handlers_restored():
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            worker.run_job(job, worker.Bundle("digest", b""))
        assert time.monotonic() - t0 < 2


class Closes:
    closed = 0

    def close(self) -> None:
        self.closed += 1


def test_the_end_of_a_run_closes_what_its_worker_processes_kept(tmp_path: Path, monkeypatch: Any) -> None:
    """Ray kills worker processes without ``atexit``: the head's ``close_node`` has the live ones
    close their sandboxes and relays, and removes the run's folder on the node."""
    monkeypatch.setattr(worker.tempfile, "tempdir", str(tmp_path))
    run = worker._run("r1")
    sandbox, relay = Closes(), Closes()
    run.sandboxes["s"] = sandbox  # type: ignore[assignment]
    run.relays[(("h", 1), "s")] = relay  # type: ignore[assignment]
    cand = worker._candidate(run, worker.make_bundle(_candidate_root(tmp_path)))
    assert cand.is_dir() and cand.is_relative_to(tmp_path / "ho-ray-r1")
    assert worker.close_node("r1", wait_s=10) == 1
    assert (sandbox.closed, relay.closed) == (1, 1)
    assert not (tmp_path / "ho-ray-r1").exists() and "r1" not in worker._runs
    assert worker.close_node("r1") == 0  # a node that ran none of the run's tasks


def _candidate_root(tmp: Path) -> Path:
    root = tmp / "cand"
    for part in ("skill", "harness"):
        (root / part).mkdir(parents=True)
        (root / part / "f.txt").write_text(part)
    return root


def test_a_run_killed_outright_leaves_nothing_on_a_node_for_long(tmp_path: Path, monkeypatch: Any) -> None:
    """A run killed outright (kill -9 of the head) never runs ``close_node``, and Ray kills its
    workers without ``atexit``: the run's folder stayed on every node. A worker holds its folder's
    lock while it lives, so the next run's first job there sweeps the folder of a run whose workers
    are all gone, and leaves one with a live worker alone."""
    import os
    import signal
    import sys

    from harnessopt.util import tmpdirs

    code = (
        "import sys, tempfile, time\n"
        f"tempfile.tempdir = {str(tmp_path)!r}\n"
        "from harnessopt.rollout.ray import worker\n"
        "worker._run(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    workers = {
        run_id: subprocess.Popen([sys.executable, "-c", code, run_id], stdout=subprocess.PIPE, text=True)
        for run_id in ("dead", "live")
    }
    try:
        for proc in workers.values():
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        workers["dead"].send_signal(signal.SIGKILL)  # no way out runs
        workers["dead"].wait(timeout=30)
        for run_id in ("dead", "live"):
            assert (tmp_path / f"ho-ray-{run_id}" / str(workers[run_id].pid) / "owner").is_file()
            old = time.time() - 2 * tmpdirs.YOUNG_S
            os.utime(tmp_path / f"ho-ray-{run_id}", (old, old))
        monkeypatch.setattr(worker.tempfile, "tempdir", str(tmp_path))
        worker._run("next")
        assert not (tmp_path / "ho-ray-dead").exists()
        assert (tmp_path / "ho-ray-live" / str(workers["live"].pid)).is_dir()  # its worker holds it
    finally:
        for proc in workers.values():
            proc.kill()
            proc.wait(timeout=30)
        worker.close_node("next", wait_s=10)
    old = time.time() - 2 * tmpdirs.YOUNG_S
    os.utime(tmp_path / "ho-ray-live", (old, old))
    assert tmpdirs.sweep(tmp_path) == [tmp_path / "ho-ray-live"]  # once its worker is gone
