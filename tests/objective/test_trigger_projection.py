"""Cost guardrails: the projection counts trigger runs like any others (issue 24, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from harnessopt.commands.demo import DEMO_DATA
from harnessopt.reporting.projection import project
from harnessopt.workspace.core import Workspace
from tests.support.workspace import make_ws


def test_the_projection_counts_the_objectives_runs(tmp_path: Path) -> None:
    rows = [json.loads(x) for x in (DEMO_DATA / "tasks.jsonl").read_text().splitlines() if x.strip()]
    extra = [
        {"id": f"trig-{i}", "input": f"query {i}", "answer": {"trigger": i % 2 == 0}, "split": split}
        for i, split in enumerate(["train"] * 4 + ["val"] * 12)
    ]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    ws = Workspace.open(make_ws(tmp_path, tasks=tasks))
    runs = {}
    for objective in ("task", "trigger", "both"):
        cfg = ws.cfg.model_copy(update={"objective": objective})
        runs[objective] = project(Workspace(ws.root, cfg, ws.repo, ws.journal), 1).total().target_runs
    n_task_val = sum(r["split"] == "val" for r in rows)
    assert runs["trigger"] > 0 and runs["task"] > 0
    assert runs["both"] > max(runs["task"], runs["trigger"])  # the trigger tasks' runs are added
    assert n_task_val != 12 or runs["task"] == runs["trigger"]
