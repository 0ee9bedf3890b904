"""The explore head (``refs/harnessopt/explore/head``): a chain end the gate judged and did not
accept is where the next round's chain starts, until an accept takes it onto main or main's skill
changes under it. End to end on the demo workspace with the scripted model, and each rule of the
head's life on a real workspace repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.store import EXPLORE_HEAD_REF
from harnessopt.optimizer.view import CopyBackResult
from harnessopt.protocols import Proposal
from harnessopt.rollout.runner import Candidate
from harnessopt.round import driver
from harnessopt.round.context import RoundContext
from harnessopt.search.clusters import Focus
from harnessopt.search.explore import _overlay, carried_head, keep_head
from harnessopt.search.state import Proposed, Search
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git
from tests.support.workspace import DEMO_LINE, FORM, SEAT, make_ws, scripted_edits

OLD = DEMO_LINE
TAIL = "Keep it short."


def _commit_config(ws: Path, **gate: object) -> None:
    """A person changes the gate settings between runs and commits them (main moves; the skill does not)."""
    path = ws / "harnessopt.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg.setdefault("gate", {}).update(gate)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    git(ws, "commit", "-qam", "gate settings")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list, str]:
    """Run 1: round 1's chain (s1: the answers' form; s2: nothing the scorer sees) ends at s1, which
    a gate asking for a gain above 0.95 rejects. Run 2, the gate back to its default: round 2 goes
    on from round 1's s1 (its s1 finds FORM in its files) and is accepted."""
    tmp = tmp_path_factory.mktemp("head")
    edits = {
        "r1s1": (r"# Round 1:[\s\S]*Your step: s1,", OLD, FORM),
        "r1s2": (r"# Round 1:[\s\S]*Your step: s2,", FORM, f"{FORM} {TAIL}"),
        "r2s1": (
            r"# Round 2:[\s\S]*Your step: s1,[\s\S]*the kept head round-1/s1",
            FORM,
            f"{FORM}\n\n{SEAT}",
        ),
        "r2s2": (r"# Round 2:[\s\S]*Your step: s2,", SEAT, f"{SEAT} {TAIL}"),
    }
    root = make_ws(tmp, model=scripted_edits(tmp, edits), search={"explore": 2}, gate={"min_effect": 0.95})
    said: list[str] = []
    [first] = driver.run(Workspace.open(root), 1, said.append)
    head_after_first = git(root, "rev-parse", EXPLORE_HEAD_REF)
    said.append(cli("status", root).stdout)
    _commit_config(root, min_effect=0.0)
    [second] = driver.run(Workspace.open(root), 1, said.append)
    return root, [first, second, said], head_after_first


def test_a_chain_end_the_gate_rejects_is_kept_as_the_head(two_runs: tuple[Path, list, str]) -> None:
    root, (first, _, said), head = two_runs
    m = first.manifest
    assert first.status == "rejected" and first.reason.startswith("rejected"), first.reason
    assert m.search is not None and m.search.validated == ["s1"] and m.search.head == ""
    assert head == git(root, "rev-parse", "refs/harnessopt/candidates/round-1/s1")
    assert "round 1: kept s1, the chain's end, as the explore head: the next round goes on from it" in said
    status = next(
        line for text in said if "workspace:" in text for line in text.splitlines() if "explore head" in line
    )
    assert status.startswith(f"explore head: {head[:10]} (harnessopt round 1 candidate s1: ") and (
        "the next round goes on from it (git update-ref -d refs/harnessopt/explore/head" in status
    )


def test_the_next_round_goes_on_from_the_head_and_its_accept_takes_the_whole_chain(
    two_runs: tuple[Path, list, str],
) -> None:
    root, (_, second, said), head = two_runs
    m = second.manifest
    assert second.status == "accepted", second.reason
    assert m.search is not None and m.search.head == "round-1/s1" and m.search.validated == ["s1"]
    assert f"round 2: exploring on from the kept head round-1/s1 ({head[:10]}), not from main" in said
    assert "round 2: rollout of the kept head round-1/s1 on 8 train tasks" in said
    by_name = {c.name: c for c in m.search.candidates}
    assert by_name["s1"].reason.startswith(
        "validated: the chain's end (round-1/s1 -> s1); beat the kept head round-1/s1 on train"
    )
    assert by_name["s1"].focus == "step 1 on the kept head round-1/s1"
    assert "did not beat s1 on train" in by_name["s2"].reason  # s2 was built on s1 and dropped
    # main has round 1's edit and round 2's, in one commit whose summary names the whole chain
    skill = (root / "skill" / "SKILL.md").read_text()
    assert FORM in skill and SEAT in skill and OLD not in skill and TAIL not in skill
    assert m.summary.startswith("round-1/s1 -> s1: Edit of r1s1; Edit of r2s1") and m.changed == [
        "skill/SKILL.md"
    ]
    # the trajectories the round read and recorded are the head's runs, stamped with its commit
    stamped = [p.read_text() for p in (root / "trajectories").glob("*.md")]
    assert len(stamped) == 8 and all(f"harness_commit: {head}" in text for text in stamped)
    assert not vcs.ref_exists(Workspace.open(root).repo, EXPLORE_HEAD_REF)  # the accept took it
    rows = json.loads(cli("log", root, "--json").stdout)
    assert [r["explore_head"] for r in rows] == ["", "round-1/s1"]


# ------------------------------------------------------------------ the head's rules, on real git


def _ws_with_head(tmp_path: Path) -> tuple[Workspace, str]:
    """A workspace whose head is a commit on main's skill with one edit (as a chain end is recorded)."""
    ws = Workspace.open(make_ws(tmp_path))
    edited = tmp_path / "edited"
    vcs.export(ws.repo, "HEAD", ["skill"], edited)
    (edited / "skill" / "SKILL.md").write_text((edited / "skill" / "SKILL.md").read_text().replace(OLD, FORM))
    parent = vcs.head_sha(ws.repo)
    sha = vcs.build_commit(
        ws.repo, parent, edited, ["skill"], "harnessopt round 3 candidate s2: Edit of s2\n"
    )
    vcs.set_ref(ws.repo, EXPLORE_HEAD_REF, sha)
    return ws, sha


def _rc(ws: Workspace, tmp_path: Path, k: int = 4) -> RoundContext:
    parent = vcs.head_sha(ws.repo)
    return RoundContext(k, tmp_path / f"scratch-{k}", Candidate(ws.root, "incumbent", parent), parent, [])


def test_a_head_on_mains_skill_is_exported_with_its_edits(tmp_path: Path) -> None:
    ws, sha = _ws_with_head(tmp_path)
    _commit_config(ws.root, min_effect=0.1)  # main moves, its skill and harness do not
    (ws.root / "harness" / "warm.pyc").write_bytes(b"\x00ignored by git")  # what main runs, not in git
    said: list[str] = []
    head = carried_head(ws, _rc(ws, tmp_path), said.append)
    assert head is not None and head.name == "round-3/s2" and head.title == "Edit of s2"
    assert head.candidate.commit == sha and head.changed == ["skill/SKILL.md"]
    assert FORM in (head.candidate.root / "skill" / "SKILL.md").read_text()
    # the head is main's copy with the head's changes: a file git ignores comes along
    assert (head.candidate.root / "harness" / "warm.pyc").read_bytes() == b"\x00ignored by git"
    assert (head.candidate.root / "harness" / "run.py").read_text() == (
        ws.root / "harness" / "run.py"
    ).read_text()
    assert OLD in (ws.root / "skill" / "SKILL.md").read_text()  # main's files are untouched
    assert said == [f"round 4: exploring on from the kept head round-3/s2 ({sha[:10]}), not from main"]


def test_a_head_whose_base_main_no_longer_has_is_dropped(tmp_path: Path) -> None:
    ws, _ = _ws_with_head(tmp_path)
    skill = ws.root / "skill" / "SKILL.md"
    skill.write_text(skill.read_text() + "\nAnswer in English.\n")  # a person's edit of the skill
    git(ws.root, "commit", "-qam", "my edit")
    said: list[str] = []
    assert carried_head(ws, _rc(ws, tmp_path), said.append) is None
    assert not vcs.ref_exists(ws.repo, EXPLORE_HEAD_REF)
    assert said == [
        "round 4: dropped the kept explore head: main's skill or harness changed since it was kept; "
        "this round explores from main"
    ]
    assert [e["dropped"] for e in ws.journal.entries() if e.get("phase") == "explore-head"] == [
        "main's skill or harness changed since it was kept"
    ]


def _found(commit: str) -> Search:
    p = Proposed(
        "s2", Focus("step 2"), Proposal("Edit of s2"), None, CopyBackResult(["skill/SKILL.md"]), None, None
    )
    p.commit = commit
    return Search([p], validated=["s2"])


@pytest.mark.parametrize(
    ("status", "judged", "kept"),
    [
        ("rejected", True, "new"),  # the gate (or its confirmation) said no: go on from it
        ("rejected", False, "old"),  # a check said no (leakage, smoke, memorised): never built on
        ("failed", False, "old"),  # the round failed: the head it began with stays
        ("noop", False, "old"),
        ("accepted", True, None),  # main has the chain now
    ],
)
def test_which_round_endings_move_the_head(
    tmp_path: Path, status: str, judged: bool, kept: str | None
) -> None:
    ws, old = _ws_with_head(tmp_path)
    new = git(ws.root, "rev-parse", "HEAD")  # any other commit stands for this round's chain end
    keep_head(ws.repo, 5, _found(new), status, judged, lambda _m: None)
    want = {"new": new, "old": old, None: None}[kept]
    assert (git(ws.root, "rev-parse", EXPLORE_HEAD_REF) if want else None) == want
    assert vcs.ref_exists(ws.repo, EXPLORE_HEAD_REF) == (want is not None)
    assert ledger.EXPLORE_HEAD_REF == "refs/harnessopt/explore/head"  # the contract docs/workspace.md names


def test_a_head_is_never_written_through_a_link_out_of_the_copy(tmp_path: Path) -> None:
    ws, sha = _ws_with_head(tmp_path)
    outside, root = tmp_path / "outside", tmp_path / "copy"
    outside.mkdir()
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "out").symlink_to(outside)
    with pytest.raises(RuntimeError, match="under a link out of the workspace copy"):
        _overlay(ws.repo, sha, ["harness/out/SKILL.md"], root)
    assert list(outside.iterdir()) == []


def test_a_head_whose_runs_crash_is_dropped_and_the_round_runs_from_main(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path, search={"explore": 2}))
    broken = tmp_path / "broken"
    vcs.export(ws.repo, "HEAD", ["harness"], broken)
    (broken / "harness" / "run.py").write_text("raise SystemExit('the kept head cannot start')\n")
    parent = vcs.head_sha(ws.repo)
    sha = vcs.build_commit(
        ws.repo, parent, broken, ["harness"], "harnessopt round 1 candidate s2: Edit of s2\n"
    )
    vcs.set_ref(ws.repo, EXPLORE_HEAD_REF, sha)
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    assert (
        "round 1: dropped the kept explore head: most of its runs on the round's train batch crashed; "
        "this round explores from main" in said
    )
    assert "round 1: rollout of the incumbent on 8 train tasks" in said  # again, from main
    m = result.manifest
    assert m.search is not None and m.search.head == "" and m.train_tasks == 8
    assert m.phases["rollout"].failures["harness crash"] == 8  # the head's batch; main's ran fine
    assert result.status == "accepted" and not vcs.ref_exists(ws.repo, EXPLORE_HEAD_REF)  # the demo's edit
