"""Workspace creation (harnessopt.workspace.core): what ``init`` commits as round 0."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli, git, write_example


def test_round_zero_holds_the_skill_its_own_gitignore_would_leave_out(tmp_path: Path) -> None:
    """A skill with its own .gitignore (``*.csv``): round 0's commit lacked the file the incumbent's
    runs read, and round 1's diff credited the optimizer with adding it. Round 0 now holds the
    skill as copied, as a round's commit would (bytecode left out, as there)."""
    skill, tasks = write_example(tmp_path)
    (skill / ".gitignore").write_text("*.csv\n")
    (skill / "references").mkdir()
    (skill / "references" / "rates.csv").write_text("a,b\n")
    (skill / "__pycache__").mkdir()
    (skill / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    ws = tmp_path / "ws"
    out = cli("init", ws, "--skill", skill, "--tasks", tasks)
    assert out.returncode == 0, out.stderr
    files = git(ws, "ls-tree", "-r", "--name-only", "ho/round-0", "skill").splitlines()
    assert "skill/references/rates.csv" in files and "skill/.gitignore" in files
    assert not any("__pycache__" in f for f in files)
    assert git(ws, "status", "--porcelain") == ""
