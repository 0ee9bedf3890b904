"""`touch WS/.harnessopt/STOP` ends a run at the next phase boundary, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from harnessopt.ledger import store as ledger
from harnessopt.workspace.core import Workspace
from tests.support.cli import git, start_cli, wait_for_phase
from tests.support.workspace import make_ws


def _workspace(tmp_path: Path) -> Path:
    # manual optimizer: it waits for a person, so the run is reliably inside round 1's propose step
    return make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 120})


def _journal(ws: Path) -> list[dict]:
    path = ws / ".harnessopt" / "journal.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_stop_file_ends_the_run_at_the_next_phase_boundary(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    proc = start_cli("run", ws, "--rounds", "3", "--sandbox", "local")
    try:
        view = Path(wait_for_phase(ws, proc, "propose")["view"])
        (ws / ".harnessopt" / "STOP").touch()  # while the optimizer works: honoured after it
        skill = view / "skill" / "SKILL.md"
        skill.write_text(skill.read_text().replace("Explain your answer", "Reply with only the city name"))
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "stopped at your request" in out and "Traceback" not in err
    assert not (ws / ".harnessopt" / "STOP").exists()  # honoured, so removed
    # main stays on the incumbent; the partial round is recorded as failed: stopped, with its candidate
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "status", "--porcelain") == ""
    repo = Workspace.open(ws).repo
    (r1,) = ledger.past_rounds(repo)
    assert (r1.round, r1.status, r1.manifest.reason) == (1, "failed", "stopped")
    assert r1.ref == "refs/harnessopt/failed/round-1"
    assert "Reply with only the city name" in git(ws, "show", f"{r1.commit}:skill/SKILL.md")
    assert "validation" not in r1.manifest.phases  # no batch started after the STOP file was seen
    assert not any(e["round"] == 2 and e["phase"] == "start" for e in _journal(ws))
    assert ledger.next_round(repo) == 2
