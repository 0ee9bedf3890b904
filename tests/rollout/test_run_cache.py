"""Nothing paid twice: a run killed mid-round, run again, reuses what it had finished."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from harnessopt.ledger import store as ledger
from harnessopt.workspace.core import Workspace
from tests.support.cli import git, wait_for_phase
from tests.support.workspace import DEMO_LINE, FORM, make_ws


def _run(ws: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "--sandbox", "local"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def _phases(ws: Path) -> list[dict]:
    path = ws / ".harnessopt" / "journal.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_sigkill_in_validation_then_rerun_calls_no_finished_task_again(tmp_path: Path) -> None:
    ws = make_ws(tmp_path, gate={"incumbent_epochs": 1})  # no bank: the A/A test runs twice
    head = git(ws, "rev-parse", "HEAD")
    proc = subprocess.Popen(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "--sandbox", "local"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    kept = ws / ".harnessopt" / "resume" / "round-1" / "rollouts"
    deadline = time.monotonic() + 400
    while not any(e["phase"] == "smoke" for e in _phases(ws)) and time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before its smoke test"
        time.sleep(0.05)
    smoked = len(list(kept.rglob("*.json")))
    while len(list(kept.rglob("*.json"))) < smoked + 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # two validation tasks finished: kill in the middle of validation
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list(kept.rglob("*.json")))
    assert finished >= smoked + 2 and git(ws, "rev-parse", "HEAD") == head  # nothing applied
    incumbent_runs = next(e["n"] for e in _phases(ws) if e["phase"] == "incumbent_val")

    again = _run(ws)
    assert again.returncode == 0, again.stderr
    assert "reusing the optimizer's proposal" in again.stdout
    (rnd,) = ledger.past_rounds(Workspace.open(ws).repo)
    m = rnd.manifest
    assert "optimizer" not in m.tokens  # the optimizer was not paid again
    reused = int(again.stdout.split("reused ")[1].split()[0])
    # Round 1 measures the incumbent twice (the A/A noise floor); the rerun takes both passes from
    # the val cache, and every other finished run (train, smoke, validation) from the kept store.
    assert reused == finished - 2 * incumbent_runs
    assert not (ws / ".harnessopt" / "resume" / "round-1").exists()  # cleared once recorded


def test_kept_rollouts_survive_a_change_of_executor_or_concurrency_but_not_of_a_limit(tmp_path: Path) -> None:
    from harnessopt.config import Config
    from harnessopt.rollout.run_cache import rollout_settings

    cfg = Config.model_validate({})
    base = rollout_settings(cfg, tmp_path)
    moved = cfg.model_copy(
        update={"rollout": cfg.rollout.model_copy(update={"executor": "ray", "concurrency": 9})}
    )
    assert rollout_settings(moved, tmp_path) == base  # where and how many at once change no run
    tighter = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"timeout_s": 5.0})})
    assert rollout_settings(tighter, tmp_path) != base


def test_only_runs_another_process_finished_count_as_reused(tmp_path: Path) -> None:
    """``resumed(k)``: the runs of round k taken from an interrupted run, each once; a run this
    process made and read again (a later step's base on a task the round ran) is not one."""
    from harnessopt.protocols import Task
    from harnessopt.rollout.run_cache import RoundStore
    from tests.support.results import make_result

    root = tmp_path / "cand"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("x\n")
    tasks = [Task(id=f"t{i}", input=f"q{i}", answer="a", split="train") for i in range(3)]
    done = make_result(round=1)
    before = RoundStore(tmp_path / "state", "settings")  # the interrupted process
    for t in tasks[:2]:
        before.put(1, root, t, 0, dataclasses.replace(done, task_id=t.id))
    now = RoundStore(tmp_path / "state", "settings")
    now.put(1, root, tasks[2], 0, dataclasses.replace(done, task_id=tasks[2].id))
    for _ in range(2):
        assert all(now.get(1, root, t, 0) is not None for t in tasks)
    assert now.resumed(1) == 2 and now.resumed(2) == 0 and before.resumed(1) == 0
    now.clear(1)
    assert now.resumed(1) == 0 and now.get(1, root, tasks[0], 0) is None


EXTRA_FILE_AGENT = (
    f"sed -i 's/{DEMO_LINE}/{FORM}/' skill/SKILL.md; mkdir -p skill/scripts; "
    "echo 'echo extra' > skill/scripts/extra.sh; echo 'Title: city only'"
)


def test_a_saved_proposal_is_not_reused_under_a_narrower_whitelist(tmp_path: Path) -> None:
    """A proposal kept from an interrupted run was made under that run's rules: rerun with a file
    made read-only, the candidate it copied back must not reach the gate (it did: the resume
    restored the saved tree, and a read-only file was committed to main). A rerun under other rules
    asks the optimizer anew."""
    ws = make_ws(
        tmp_path,
        search={"explore": 0},
        optimizer={"backend": "command", "command": ["bash", "-c", EXTRA_FILE_AGENT], "unsafe_host": True},
    )
    first = subprocess.Popen(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "--sandbox", "local"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert "skill/scripts/extra.sh" in wait_for_phase(ws, first, "check")["changed"]
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    again = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "--sandbox", "local",
         "-c", 'read_only=["skill/scripts/**"]'],
        capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert again.returncode in (0, 3), again.stderr
    assert "reusing the optimizer's proposal" not in again.stdout
    (rnd,) = ledger.past_rounds(Workspace.open(ws).repo)
    assert "skill/scripts/extra.sh" not in rnd.manifest.changed
    assert "skill/scripts/extra.sh" in rnd.manifest.violations
    assert not (ws / "skill" / "scripts" / "extra.sh").exists()
