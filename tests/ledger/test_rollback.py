"""ledger.rollback: skill/ and harness/ as of a round, in one new commit on main, or nothing at all."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from harnessopt.ledger import store as ledger
from harnessopt.ledger.rollback import rollback
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git, write_example


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    """A workspace whose main moved past round 0: the skill edited, a harness file added, one removed."""
    skill, tasks = write_example(tmp_path)
    root = tmp_path / "ws"
    assert cli("init", root, "--skill", skill, "--tasks", tasks).returncode == 0
    (root / "skill" / "SKILL.md").write_text((root / "skill" / "SKILL.md").read_text() + "\nmine\n")
    (root / "skill" / "notes.md").write_text("new\n")
    harness_file = next(p for p in sorted((root / "harness").iterdir()) if p.is_file() and p.name != "run.py")
    harness_file.unlink()
    git(root, "add", "-A")
    git(root, "commit", "-qm", "my edits")
    return Workspace.open(root)


def test_a_rollback_restores_both_folders_in_one_commit(ws: Workspace) -> None:
    head = git(ws.root, "rev-parse", "HEAD")
    assert "(a manual commit)" in cli("status", ws.root).stdout  # the fixture's own edits
    said = rollback(ws, 0)
    new = git(ws.root, "rev-parse", "main")
    assert new[:10] in said and git(ws.root, "rev-parse", "HEAD^") == head
    for top in ("skill", "harness"):
        assert git(ws.root, "rev-parse", f"{new}:{top}") == git(ws.root, "rev-parse", f"ho/round-0:{top}")
    assert git(ws.root, "status", "--porcelain") == ""
    assert not (ws.root / "skill" / "notes.md").exists()
    assert ledger.manifest_data(git(ws.root, "log", "-1", "--format=%B"))["to_round"] == 0
    assert f"incumbent: {new[:10]} (a rollback to round 0)" in cli("status", ws.root).stdout
    last = ws.journal.entries()[-1]
    assert last is not None and (last["phase"], last["commit"]) == ("rollback", new)
    assert "already" in rollback(ws, 0)
    assert git(ws.root, "rev-parse", "main") == new


def test_a_journal_that_cannot_be_written_leaves_main_and_the_tree_as_they_were(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit is built aside and the journal line comes before main moves: a refused journal
    (as root in CI chmod refuses nothing, so its write raises here) changes nothing."""
    head, tree = git(ws.root, "rev-parse", "HEAD"), (ws.root / "skill" / "SKILL.md").read_text()

    def refused(*_a: object, **_k: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(ws.journal.path))

    monkeypatch.setattr(ws.journal, "write", refused)
    with pytest.raises(PermissionError):
        rollback(ws, 0)
    assert git(ws.root, "rev-parse", "main") == head
    assert git(ws.root, "status", "--porcelain") == ""
    assert (ws.root / "skill" / "SKILL.md").read_text() == tree


def test_a_round_after_a_rollback_says_where_it_started(tmp_path: Path) -> None:
    """log, log --json and the report name the rollback a round started from: the incumbent's
    score falling back otherwise had no explanation in any of them."""
    from harnessopt.reporting.data import report_data
    from harnessopt.round import driver
    from tests.support.workspace import make_ws

    ws = Workspace.open(make_ws(tmp_path))
    [first] = driver.run(ws, 1, lambda _m: None)
    assert first.status == "accepted"
    assert [r.round for r in ledger.live_accepted(ws.repo, git(ws.root, "rev-parse", "main"))] == [1]
    rollback(ws, 0)
    back = git(ws.root, "rev-parse", "main")
    # log's table ends at round 1, which looked live: it says where main is (QA)
    assert f"incumbent: {back[:10]} (a rollback to round 0)" in cli("log", ws.root).stdout
    # round 1 stays in main's history, but its edit is undone: replay no longer re-validates it (QA)
    assert [r.round for r in ledger.accepted_along(ws.repo, back)] == [1]
    assert ledger.live_accepted(ws.repo, back) == []
    # and replay says why there is nothing to replay ("no accepted round yet" was untrue, QA)
    from tests.support.cli_errors import assert_user_error

    assert_user_error(
        cli("replay", ws.root, "--target", "m2"), "a rollback undid round(s) 1", "harnessopt rollback WS K"
    )
    driver.run(Workspace.open(ws.root), 1, lambda _m: None)
    import json

    rows = json.loads(cli("log", ws.root, "--json").stdout)
    assert [r["started_from"] for r in rows] == ["", "a rollback to round 0"]
    assert rows[1]["incumbent"] == back and rows[0]["incumbent"] == git(ws.root, "rev-parse", "ho/round-0")
    assert "started from a rollback to round 0;" in " ".join(cli("log", ws.root).stdout.split())
    report = report_data(Workspace.open(ws.root))["rounds"]
    assert report[1]["reason"].startswith("started from a rollback to round 0; ")
    assert not report[0]["reason"].startswith("started from")
