"""The round ledger: typed manifests written to and read back from real git repositories."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harnessopt.ledger import index as ledger_index
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.journal import Journal
from harnessopt.ledger.store import OptimizerRecord, RoundManifest


def _repo(tmp_path: Path):
    ws = tmp_path / "ws"
    (ws / "skill").mkdir(parents=True)
    (ws / "skill" / "SKILL.md").write_text("---\nname: x\ndescription: y\n---\nbody\n")
    repo, _ = vcs.init_repo(ws)
    repo.git.add("-A")
    repo.git.commit("-q", "-m", ledger.initial_message("x", 3))
    ledger.tag_initial(repo)
    return ws, repo


def _overlay(tmp_path: Path, text: str) -> Path:
    overlay = tmp_path / "overlay"
    (overlay / "skill").mkdir(parents=True, exist_ok=True)
    (overlay / "skill" / "SKILL.md").write_text(text)
    return overlay


def test_rounds_roundtrip_with_types(tmp_path: Path) -> None:
    ws, repo = _repo(tmp_path)
    parent = vcs.head_sha(repo)
    m = RoundManifest(
        round=1,
        status="accepted",
        reason="accepted: +0.2 > dead zone 0.1",
        summary="Terse\n\nbody",
        parent=parent,
        val_score=0.8,
        delta=0.2,
        optimizer=OptimizerRecord(turns=3, stopped_by="done", transcript="/tmp/t.jsonl", view_skipped=["a"]),
        notes=["no list price for model 'x': its cost is counted as $0"],
    )
    overlay = _overlay(tmp_path, "---\nname: x\ndescription: y\n---\nnew\n")
    sha = ledger.record_accepted(repo, Journal(ws), parent, overlay, ["skill"], m, new_best=True)
    rej = m.model_copy(update={"round": 2, "status": "rejected", "parent": sha})
    ledger.record_other(repo, sha, _overlay(tmp_path, "other"), ["skill"], rej)
    got = ledger.rounds(repo)
    assert [(r.round, r.status) for r in got] == [(0, "initial"), (1, "accepted"), (2, "rejected")]
    assert got[1].manifest == m and got[1].manifest.title == "Terse"
    assert ledger.best(repo).round == 1 and ledger.next_round(repo) == 3
    assert ledger.find(repo, 2).ref == "refs/harnessopt/rejected/round-2"
    assert [r.round for r in ledger.accepted_along(repo, sha)] == [1]


def test_older_and_foreign_manifests_are_read(tmp_path: Path) -> None:
    """A manifest without a version and with keys this version does not know still reads."""
    ws, repo = _repo(tmp_path)
    parent = vcs.head_sha(repo)
    old = {"round": 1, "status": "rejected", "reason": "r", "delta": 0.01, "from_the_future": [1, 2]}
    msg = f"harnessopt round 1: rejected: r\n\n{ledger.MANIFEST_PREFIX}{json.dumps(old)}\n"
    sha = repo.git.commit_tree(repo.commit(parent).tree.hexsha, "-p", parent, "-m", msg)
    vcs.set_ref(repo, "refs/harnessopt/rejected/round-1", sha)
    bad = "harnessopt round 2: noop\n\nharnessopt-manifest: {not json\n"
    vcs.set_ref(
        repo, "refs/harnessopt/noop/round-2", repo.git.commit_tree(repo.commit(parent).tree.hexsha, "-m", bad)
    )
    r1, r2 = ledger.past_rounds(repo)
    assert r1.manifest.delta == 0.01 and r1.manifest.version == ledger.MANIFEST_VERSION
    assert r2.status == "noop" and r2.manifest.reason == ""


def test_untrusted_text_never_breaks_or_escapes_a_commit(tmp_path: Path) -> None:
    """A NUL byte (git refuses it) and an OSC 52 clipboard write in the optimizer's summary."""
    ws, repo = _repo(tmp_path)
    parent = vcs.head_sha(repo)
    evil = "Title \x1b]52;c;ZWNobyBwd25lZA==\x07 done\x00\n\nbody \x1b[2J"
    m = RoundManifest(round=1, status="rejected", reason="r", summary=evil, parent=parent)
    sha = ledger.record_other(repo, parent, _overlay(tmp_path, "x"), ["skill"], m)
    log = subprocess.run(["git", "-C", str(ws), "log", "-1", "--format=%B", sha], capture_output=True)
    assert b"\x1b" not in log.stdout and b"\x00" not in log.stdout
    assert b"\\x1b]52" in log.stdout  # shown, not executed
    assert ledger.find(repo, 1).manifest.summary == evil  # the manifest keeps the exact text, JSON-escaped


def test_rollback_and_initial_messages_carry_manifests(tmp_path: Path) -> None:
    ws, repo = _repo(tmp_path)
    assert ledger.manifest_data(ledger.rollback_message(1, "abc"))["to_round"] == 1
    assert ledger.rounds(repo)[0].manifest.status == "initial"
    with pytest.raises(Exception, match="round 7 is not recorded"):
        ledger.find(repo, 7)


def _indexed_ws(tmp_path: Path):
    """A repo with .harnessopt/ (as a workspace has) and rounds 1 (accepted), 2 (rejected)."""
    ws, repo = _repo(tmp_path)
    (ws / ".git" / "info" / "exclude").write_text(".harnessopt/\n")
    (ws / ".harnessopt").mkdir()
    parent = vcs.head_sha(repo)
    m = RoundManifest(round=1, status="accepted", reason="a", summary="One", parent=parent, val_score=0.5)
    sha = ledger.record_accepted(
        repo, Journal(ws), parent, _overlay(tmp_path, "one"), ["skill"], m, new_best=True
    )
    rej = RoundManifest(round=2, status="rejected", reason="r", parent=sha)
    ledger.record_other(repo, sha, _overlay(tmp_path, "two"), ["skill"], rej)
    return ws, repo, ws / ".harnessopt" / ledger_index.INDEX_FILE


def test_index_is_built_from_git_and_rebuilt_when_deleted_or_corrupt(tmp_path: Path) -> None:
    ws, repo, index = _indexed_ws(tmp_path)
    walked = ledger.rounds_from_git(repo)
    assert [(r.round, r.status) for r in walked] == [(0, "initial"), (1, "accepted"), (2, "rejected")]
    assert ledger.rounds(repo) == walked and index.is_file()
    assert set(json.loads(index.read_text())["commits"]) == {r.commit for r in walked}
    index.unlink()
    assert ledger.rounds(repo) == walked and index.is_file()
    index.write_text("{half a file")
    assert ledger.rounds(repo) == walked
    assert json.loads(index.read_text())["version"] == 1
    assert vcs.dirty_paths(repo) == []  # the index is not part of the workspace's content


def test_index_serves_messages_only_for_commits_git_still_lists(tmp_path: Path) -> None:
    """The index is keyed by commit sha and the refs are listed from git on each call: a new
    round, a deleted record, a moved tag and a rollback are all seen."""
    ws, repo, index = _indexed_ws(tmp_path)
    ledger.rounds(repo)
    head = vcs.head_sha(repo)
    m3 = RoundManifest(round=3, status="noop", reason="nothing", parent=head)
    ledger.record_other(repo, head, _overlay(tmp_path, "three"), ["skill"], m3)
    got = ledger.rounds(repo)
    assert [(r.round, r.status) for r in got][-1] == (3, "noop") and got == ledger.rounds_from_git(repo)
    repo.git.update_ref("-d", "refs/harnessopt/rejected/round-2")
    assert [r.round for r in ledger.rounds(repo)] == [0, 1, 3]
    assert len(json.loads(index.read_text())["commits"]) == 3  # the deleted round's entry is dropped
    # A tag moved to another commit (a hand edit): the new commit's manifest is read.
    other = repo.git.commit_tree(
        repo.commit(head).tree.hexsha,
        "-p",
        head,
        "-m",
        ledger.message("x", "", RoundManifest(round=1, status="accepted", reason="moved")),
    )
    vcs.tag(repo, "ho/round-1", other, move=True)
    assert ledger.find(repo, 1).manifest.reason == "moved" and ledger.find(repo, 1).commit == other
    assert ledger.rounds(repo) == ledger.rounds_from_git(repo)
    # A rollback is a new commit on main: the rounds stay, HEAD is none of them.
    repo.git.checkout(ledger.find(repo, 0).commit, "--", "skill")
    repo.git.commit("-q", "-m", ledger.rollback_message(0, ledger.find(repo, 0).commit))
    assert ledger.rounds(repo) == ledger.rounds_from_git(repo)
    assert vcs.head_sha(repo) not in {r.commit for r in ledger.rounds(repo)}


def test_a_stale_index_entry_for_a_listed_sha_cannot_exist(tmp_path: Path) -> None:
    """Entries are per commit sha; an index written by hand with a wrong manifest for a sha git
    does not list is dropped, never shown."""
    ws, repo, index = _indexed_ws(tmp_path)
    ledger.rounds(repo)
    data = json.loads(index.read_text())
    data["commits"]["0" * 40] = ["harnessopt round 9: accepted: ghost", {"round": 9, "status": "accepted"}]
    index.write_text(json.dumps(data))
    assert [r.round for r in ledger.rounds(repo)] == [0, 1, 2]
    assert "0" * 40 not in json.loads(index.read_text())["commits"]
