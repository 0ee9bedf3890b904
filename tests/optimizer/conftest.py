"""A small but complete workspace on disk, for view and copy-back tests."""

from __future__ import annotations

from pathlib import Path

import pytest

GOLD = "GOLD-ANSWER-7f3a"  # appears only in tasks/ and scorer.py: it must never reach the view


def _trajectory(task_id: str, split: str, passed: bool) -> str:
    return (
        f"---\ntask_id: {task_id}\nsplit: {split}\nround: 1\nscore: {1.0 if passed else 0.0}\n"
        f"passed: {str(passed).lower()}\nfeedback: expected a number\n---\n\n# Task {task_id}\n\nanswer: 12\n"
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "skill" / "scripts").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("---\nname: arith\ndescription: Do sums.\n---\n\nAdd numbers.\n")
    (root / "skill" / "scripts" / "helper.py").write_text("print('help')\n")
    (root / "harness").mkdir()
    (root / "harness" / "run.py").write_text("import sys\nprint('run')\n")
    (root / "tasks").mkdir()
    (root / "tasks" / "tasks.jsonl").write_text(f'{{"id": "t1", "input": "1+1", "answer": "{GOLD}"}}\n')
    (root / "scorer.py").write_text(f"GOLD = '{GOLD}'\n")
    (root / "harnessopt.yaml").write_text("mode: skill\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".harnessopt").mkdir()
    (root / ".harnessopt" / "journal.jsonl").write_text("{}\n")
    traj = root / "trajectories"
    traj.mkdir()
    (traj / "t1.md").write_text(_trajectory("t1", "train", False))
    (traj / "t2.md").write_text(_trajectory("t2", "train", True))
    (traj / "v1.md").write_text(_trajectory("v1", "val", False) + GOLD)  # must be skipped
    (traj / "notes.txt").write_text("no front matter\n")  # skipped: not declared train
    (root / "skill" / "leak").symlink_to(root / "tasks" / "tasks.jsonl")  # never followed
    return root
