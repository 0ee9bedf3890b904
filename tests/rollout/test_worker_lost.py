"""A run whose worker died is run again, and said in harnessopt's words: a note (the manifest
keeps it, ``run`` prints it) and an entry for the journal."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from harnessopt.rollout.executors import WorkerLost
from harnessopt.rollout.runner import Candidate
from harnessopt.round.services import open_services
from harnessopt.workspace.core import Workspace
from tests.support.workspace import make_ws


def test_a_lost_worker_is_rerun_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_ws(tmp_path)
    w = Workspace.open(ws)
    root = tmp_path / "cand"
    for part in ("skill", "harness"):
        shutil.copytree(ws / part, root / part)
    task = w.tasks("val")[0]
    with open_services(ws, w.cfg, lambda _m: None, with_optimizer=False, keep_rollouts=False) as svc:
        ex = svc.runner.executor
        monkeypatch.setattr(ex, "max_retries", 2, raising=False)
        real = ex.sandbox_for
        died: list[int] = []

        def dies_once(cand_root: Path) -> Any:
            call = real(cand_root)

            def run(spec: Any, out_dir: Path) -> Any:
                if not died:
                    died.append(1)
                    raise WorkerLost("the Ray worker or node running it died (NodeDiedError)")
                return call(spec, out_dir)

            return run

        monkeypatch.setattr(ex, "sandbox_for", dies_once)
        (result,) = svc.runner.run(Candidate(root, "incumbent", "c0"), [task], 3, phase="rollout")
        retried, notes = list(svc.runner.retried), list(svc.runner.notes)
    assert result.task_id == task.id and result.error_class is None  # the rerun counted, once
    assert retried == [
        {
            "round": 3,
            "task": task.id,
            "epoch": 0,
            "attempt": 1,
            "why": str(WorkerLost("the Ray worker or node running it died (NodeDiedError)")),
        }
    ]
    assert notes == [
        f"round 3: task {task.id} (attempt 1): the Ray worker or node running it died (NodeDiedError); "
        "ran it again on another node"
    ]
