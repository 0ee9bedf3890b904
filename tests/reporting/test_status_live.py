"""`status` while a run is in progress says so: who holds the workspace, and what it is doing."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cli import cli, start_cli, wait_for_phase
from tests.support.workspace import make_ws


def test_status_during_a_live_run_names_the_run_and_its_phase(tmp_path: Path) -> None:
    # the manual optimizer (chosen on the command line, not in harnessopt.yaml) waits for a person:
    # the run reliably sits in round 1's propose step
    ws = make_ws(tmp_path, optimizer={"settle_s": 0.5, "wall_s": 40})  # STOP waits for it to end
    run = ["run", str(ws), "--rounds", "2", "--sandbox", "local", "--optimizer", "manual"]
    run += ["-c", "gate.epochs=2", "-c", "rollout.batch_size=3"]  # harnessopt.yaml says 1 and 8
    proc = start_cli(*run)
    try:
        wait_for_phase(ws, proc, "propose")
        out = cli("status", ws)
        assert out.returncode == 0, out.stderr
        assert f"in progress: 'harnessopt run' (pid {proc.pid} on" in out.stdout
        assert "now: round 1, phase 'propose'" in out.stdout
        assert "last run stopped" not in out.stdout and "next: harnessopt run" not in out.stdout
        assert f"touch {ws / '.harnessopt' / 'STOP'}" in out.stdout
        # log named the command to start a run, which the lock refuses (QA)
        log = cli("log", ws).stdout
        assert f"'harnessopt run' (pid {proc.pid}) is running" in log and "start with" not in log
        (ws / ".harnessopt" / "STOP").touch()
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
    after = cli("status", ws).stdout
    assert "in progress" not in after and "next: harnessopt run" in after
    # which parts the run used, by the names users set them with; the report's header names them
    assert "last run used: sandbox local, executor local, target scripted:" in after
    assert ", optimizer manual\n" in after  # a person: no model named
    from harnessopt.reporting.data import report_data
    from harnessopt.workspace.core import Workspace

    header = report_data(Workspace.open(ws))["config"]
    assert header["optimizer"] == "manual"
    assert header["target"].startswith("scripted:")  # the run's, as the optimizer is, not the yaml's alone
    assert (header["epochs"], header["batch_size"]) == (2, 3)  # and so are its settings (-c)


def test_status_during_a_measuring_command_shows_no_stale_phase_and_no_stop_file(tmp_path: Path) -> None:
    """While `audit` ran, status showed the phase of an `ablate` that had ended (audit writes no
    journal line when it starts) and said to touch STOP, which audit never reads: it ran to its end
    and the file was left for the next run (QA)."""
    import time

    from harnessopt.reporting.log import _in_progress
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(make_ws(tmp_path))
    now = time.time()
    ended = {"t": now - 10, "round": 0, "phase": "ablate"}
    audit = {"command": "audit", "pid": 4242, "host": "here", "since": now - 3}
    lines = _in_progress(ws, audit, ended)
    assert not any(line.startswith("now:") for line in lines)
    assert "STOP" not in lines[-1] and lines[-1].endswith("with Ctrl-C in its terminal, or kill -INT 4242")
    run = {**audit, "command": "run", "since": now - 30}
    lines = _in_progress(ws, run, ended)  # a run's own journal line, written after it started
    assert "now: round 0, phase 'ablate'" in lines[1] and lines[-1].endswith(
        str(ws.root / ".harnessopt" / "STOP")
    )
