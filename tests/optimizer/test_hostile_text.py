"""Attacks through the optimizer's files and text (issue 8, classes 9 and 10), end to end where
they reach git: copy-back, the static check, trajectory files."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harnessopt.ledger import vcs
from harnessopt.optimizer.view import build_view, copy_back
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.round.checks import static_check
from tests.support.results import make_result

SKILL = "---\nname: demo\ndescription: A demo skill. Use it for demos.\n---\nBody\n"


def _incumbent(tmp_path: Path) -> Path:
    root = tmp_path / "incumbent"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text(SKILL)
    (root / "harness").mkdir()
    (root / "harness" / "run.py").write_text("print('hi')\n")
    (root / "trajectories").mkdir()
    return root


def test_git_metadata_from_the_view_is_never_copied_back(tmp_path: Path) -> None:
    inc = _incumbent(tmp_path)
    view = tmp_path / "view"
    snap = build_view(inc, view, history_md="", brief_md="")
    (view / "skill" / "SKILL.md").write_text(SKILL + "\nBe terse.\n")
    subprocess.run(["git", "init", "-q", str(view / "skill" / "nested")], check=True)
    (view / "skill" / "nested" / "f.md").write_text("x")
    (view / "skill" / ".gitignore").write_text("*.md\n")
    (view / "skill" / ".gitattributes").write_text("SKILL.md export-ignore\n")
    cand = tmp_path / "cand"
    subprocess.run(["cp", "-r", str(inc), str(cand)], check=True)
    result = copy_back(view, cand, ["skill/**"], snapshot=snap)
    assert result.changed == ["skill/SKILL.md", "skill/nested/f.md"]
    assert {"skill/.gitignore", "skill/.gitattributes"} <= set(result.violations)
    assert any(v.startswith("skill/nested/.git/") for v in result.violations)
    assert not (cand / "skill" / "nested" / ".git").exists()
    # and the record holds exactly the evaluated candidate
    repo, _ = vcs.init_repo(tmp_path / "ws")
    (tmp_path / "ws" / "x").write_text("x")
    repo.git.add("-A")
    repo.git.commit("-qm", "init")
    sha = vcs.build_commit(repo, vcs.head_sha(repo), cand, ["skill"], "r1\n")
    assert vcs.tree_differences(repo, sha, cand, ["skill"]) == []


def test_static_check_rejects_what_would_crash_the_checker(tmp_path: Path) -> None:
    """A 20,000-deep YAML front matter and a 200k-term expression reject the candidate; no exception."""
    root = _incumbent(tmp_path)
    deep = "---\nname: demo\ndescription: d\nx: " + "[" * 20000 + "]" * 20000 + "\n---\nbody\n"
    (root / "skill" / "SKILL.md").write_text(deep)
    assert "static check" in (static_check(root) or "")
    (root / "skill" / "SKILL.md").write_text(SKILL)
    (root / "harness" / "big.py").write_text("x = " + "+".join(["1"] * 200_000) + "\n")
    problem = static_check(root) or ""
    assert problem.startswith(("candidate fails its static check", "candidate harness does not compile"))
    (root / "harness" / "big.py").write_text("x = 1\n")
    assert static_check(root) is None


def test_terminal_escapes_in_model_output_are_shown_not_run(tmp_path: Path) -> None:
    evil = "Paris\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x00"
    paths = write_trajectories(
        tmp_path / "t", [make_result(answer=evil, feedback=evil)], harness_commit="abc", target_model="m"
    )
    data = paths[0].read_bytes()
    assert b"\x1b" not in data and b"\x00" not in data and b"\x07" not in data
    assert b"\\x1b]52;c;" in data
