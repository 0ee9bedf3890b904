"""`harnessopt demo` as a newcomer runs it: offline, scripted, accept + reject + accept."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.image.build import owner_alive
from tests.support.cli import cli, git, start_cli, wait_for_phase
from tests.support.cli_errors import assert_user_error


def _check_demo(tmp_path: Path, sandbox: str, during: Callable[[Path], None] | None = None) -> Path:
    """The demo, checked; ``during(target)`` runs while its round 1 is at its checks."""
    target = tmp_path / "demo"
    proc = start_cli("demo", target, "--sandbox", sandbox)
    try:
        if during is not None:
            wait_for_phase(target, proc, "check", timeout=600)
            during(target)
        out, err = proc.communicate(timeout=900)
    finally:
        proc.kill()
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "SCRIPTED" in r.stdout and "no real model is called" in r.stdout
    notes = [line for line in r.stdout.splitlines() if "SCRIPTED" in line]
    assert len(notes) == 2 and all(f"replayed from {target}/scripted_model.yaml;" in n for n in notes)
    assert "where to look next" in r.stdout
    assert ("sandbox: docker" in r.stdout) == (sandbox == "docker")
    # each phase's count runs to the total it was announced with: validation comes in chunks (checked
    # for futility) and the incumbent's A/A test in two arms, and a chunk's end read as the phase's
    # end ("validation: 5/5 tasks", then "6/9"); nor is a line said twice as the next batch starts
    for phase in ("incumbent", "validation"):
        counts = [m.groups() for m in re.finditer(rf"^round 1 {phase}: (\d+)/(\d+) tasks", r.stdout, re.M)]
        assert counts and {total for _, total in counts} == {counts[-1][1]}, (phase, counts)
        assert len(set(counts)) == len(counts) and counts[-1][0] == counts[-1][1], (phase, counts)
    announced = re.search(
        r"^round 1: validating the candidate on (\d+) more val tasks x 1 epoch", r.stdout, re.M
    )
    assert announced and counts[-1][1] == announced.group(1)
    rows = json.loads(cli("log", target, "--json").stdout)
    assert [row["status"] for row in rows] == ["accepted", "rejected", "accepted"]
    assert rows[1]["violations"] == ["harness/NOTES.txt"]  # discarded: skill mode allows skill/** only
    assert not (target / "harness" / "NOTES.txt").exists()
    assert (
        git(target, "rev-parse", "HEAD")
        == git(target, "rev-parse", "ho/round-3")
        == git(target, "rev-parse", "ho/best")
    )
    assert "not its largest city" in (target / "best_skill.md").read_text()
    assert git(target, "status", "--porcelain") == ""
    return target


def _refused_while_it_runs(target: Path) -> None:
    """The demo's rounds hold the workspace's lock as a run's do: a rollback during one committed,
    and the demo's round then died on a git error with no record (QA)."""
    head = git(target, "rev-parse", "HEAD")
    for command in (("rollback", target, "0"), ("audit", target)):
        r = cli(*command)
        assert_user_error(r, "in use by 'harnessopt demo'")
    assert git(target, "rev-parse", "HEAD") == head


def test_demo_local(tmp_path: Path) -> None:
    target = _check_demo(tmp_path, "local", during=_refused_while_it_runs)
    again = cli("demo", target, "--sandbox", "local")
    assert again.returncode == 2 and "not empty" in again.stderr
    assert again.stdout == ""  # the refusal is the demo's one line


@pytest.mark.docker
def test_demo_docker(tmp_path: Path, docker_client: Any) -> None:
    def ours() -> set[str]:  # containers whose owning run has ended (other live runs may share the engine)
        listed = docker_client.containers.list(all=True, filters={"label": "harnessopt"}, ignore_removed=True)
        return {c.id for c in listed if not owner_alive(dict(c.labels or {}))}

    before = ours()
    _check_demo(tmp_path, "docker")
    assert ours() - before == set()
