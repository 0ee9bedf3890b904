"""Git integrity of a round's record: the commit holds exactly what was evaluated (attack class 9)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs


def _repo(tmp_path: Path):
    ws = tmp_path / "ws"
    (ws / "skill").mkdir(parents=True)
    (ws / "skill" / "SKILL.md").write_text("v0\n")
    (ws / "skill" / "notes.md").write_text("notes\n")
    repo, _ = vcs.init_repo(ws)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", ledger.initial_message("x", 1))
    return ws, repo


def _overlay(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "overlay"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_nested_repository_is_never_committed_as_a_gitlink(tmp_path: Path) -> None:
    ws, repo = _repo(tmp_path)
    overlay = _overlay(tmp_path, {"skill/SKILL.md": "v1\n", "skill/sub/f.md": "x\n"})
    subprocess.run(["git", "init", "-q", str(overlay / "skill" / "sub")], check=True)
    subprocess.run(["git", "-C", str(overlay / "skill" / "sub"), "add", "f.md"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(overlay / "skill" / "sub"),
            "-c",
            "user.name=a",
            "-c",
            "user.email=a@b",
            "commit",
            "-qm",
            "x",
        ],
        check=True,
    )
    with pytest.raises(vcs.RecordMismatch, match="commit"):
        vcs.build_commit(repo, vcs.head_sha(repo), overlay, ["skill"], "round 1\n")


def test_an_in_tree_gitignore_cannot_hide_evaluated_files(tmp_path: Path) -> None:
    ws, repo = _repo(tmp_path)
    overlay = _overlay(
        tmp_path, {"skill/SKILL.md": "v1\n", "skill/notes.md": "notes\n", "skill/.gitignore": "*.md\n"}
    )
    sha = vcs.build_commit(repo, vcs.head_sha(repo), overlay, ["skill"], "round 1\n")
    assert repo.git.show(f"{sha}:skill/SKILL.md") == "v1"
    assert vcs.tree_differences(repo, sha, overlay, ["skill"]) == []


def test_export_ignores_git_attributes(tmp_path: Path) -> None:
    """export-ignore / export-subst in .gitattributes must not change what the audit runs."""
    ws, repo = _repo(tmp_path)
    (ws / "skill" / ".gitattributes").write_text("SKILL.md export-ignore\nnotes.md export-subst\n")
    (ws / "skill" / "notes.md").write_text("commit $Format:%H$\n")
    (ws / "skill" / "run.sh").write_text("#!/bin/sh\n")
    (ws / "skill" / "run.sh").chmod(0o755)
    repo.git.add("-A")
    repo.git.commit("-qm", "attrs")
    dest = tmp_path / "exported"
    vcs.export(repo, "HEAD", ["skill"], dest)
    assert (dest / "skill" / "SKILL.md").read_text() == "v0\n"
    assert (dest / "skill" / "notes.md").read_text() == "commit $Format:%H$\n"
    assert (dest / "skill" / "run.sh").stat().st_mode & 0o777 == 0o755


def test_a_run_where_git_has_no_identity_commits_as_the_workspace(tmp_path: Path) -> None:
    """A workspace made where git had a global identity, run where it has none (another HOME: a
    cluster's head, CI): the round's commit failed with a traceback after the round was paid for.
    The run gives the workspace its own identity, says so, and records the round."""
    import os
    import sys

    from harnessopt.workspace.core import Workspace
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path, search={"explore": 0})
    for key in ("user.name", "user.email"):  # as if init had found a global identity
        subprocess.run(["git", "-C", str(ws), "config", "--unset", key], check=False)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "EMAIL"))}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", XDG_CONFIG_HOME=str(home))
    assert subprocess.run(
        ["git", "-C", str(ws), "var", "GIT_AUTHOR_IDENT"], env=env, capture_output=True
    ).returncode
    done = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "--sandbox", "local"],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "git has no author identity here" in done.stdout + done.stderr
    (rnd,) = ledger.past_rounds(Workspace.open(ws).repo)
    assert rnd.manifest.status in ("accepted", "rejected")
    author = subprocess.run(["git", "-C", str(ws), "log", "-1", "--format=%an <%ae>", rnd.commit], env=env,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert author == "harnessopt <harnessopt@localhost>"


@pytest.mark.parametrize("found", ["config", "EMAIL", "none"])
def test_init_gives_a_workspace_an_identity_only_where_git_finds_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    """`init` and a run decide alike (`git var`): a workspace made where git finds an identity, in
    its config or in `$EMAIL`, commits as the user; one made where git finds none gets the
    workspace's own. (Init used to ask only for `user.email`, and wrote the workspace's identity
    over one git would have used.)"""
    import os

    home = tmp_path / "home"
    home.mkdir()
    for key in [k for k in os.environ if k.startswith(("GIT_", "EMAIL"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    if found == "config":
        (home / ".gitconfig").write_text("[user]\n\tname = Ada\n\temail = ada@example.org\n")
    elif found == "EMAIL":
        monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada")
        monkeypatch.setenv("GIT_COMMITTER_NAME", "Ada")
        monkeypatch.setenv("EMAIL", "ada@example.org")
    else:  # nor can git derive one here (a host name without a domain)
        assert subprocess.run(
            ["git", "-C", str(tmp_path), "var", "GIT_AUTHOR_IDENT"], capture_output=True
        ).returncode
    ws, repo = _repo(tmp_path)
    local = subprocess.run(
        ["git", "-C", str(ws), "config", "--local", "user.email"], capture_output=True, text=True
    )
    author = repo.git.log("-1", "--format=%an <%ae>")
    if found == "none":
        assert local.stdout.strip() == vcs.IDENTITY[1]
        assert author == "harnessopt <harnessopt@localhost>"
    else:
        assert local.returncode == 1 and local.stdout == ""
        assert author == "Ada <ada@example.org>"
    # init says so when it gives the workspace its own (it said nothing, as the docs say it does)
    from harnessopt.workspace.core import init_workspace
    from tests.support.cli import write_example

    said: list[str] = []
    skill, tasks = write_example(tmp_path / "example")
    init_workspace(tmp_path / "made", skill, tasks, announce=said.append)
    noted = [line for line in said if line.startswith("note: git has no author identity here")]
    assert len(noted) == (found == "none"), said
