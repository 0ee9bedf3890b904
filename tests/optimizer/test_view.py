from __future__ import annotations

import os
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.optimizer.view import build_view, copy_back, matches_any
from tests.optimizer.conftest import GOLD


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _build(ws: Path, tmp_path: Path):
    view = tmp_path / "view"
    snap = build_view(ws, view, history_md="# History\n", brief_md="# Brief\n")
    return view, snap


def test_view_holds_only_skill_harness_train_trajectories_and_briefs(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    assert _files(view) == {
        "skill/SKILL.md",
        "skill/scripts/helper.py",
        "harness/run.py",
        "trajectories/t1.md",
        "trajectories/t2.md",
        "history.md",
        "OPTIMIZE.md",
    }
    for p in view.rglob("*"):
        if p.is_file():
            assert GOLD not in p.read_text(), p
    assert set(snap.hashes) == _files(view)
    assert {"skill/leak", "trajectories/v1.md", "trajectories/notes.txt"} <= set(snap.skipped)


def test_build_view_replaces_a_stale_view_and_refuses_to_contain_the_workspace(
    ws: Path, tmp_path: Path
) -> None:
    view = tmp_path / "view"
    view.mkdir()
    (view / "stale.txt").write_text("old")
    build_view(ws, view, history_md="", brief_md="")
    assert not (view / "stale.txt").exists()
    with pytest.raises(ValueError):
        build_view(ws, tmp_path, history_md="", brief_md="")


def test_whitelisted_edit_is_copied_back(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    (view / "skill" / "SKILL.md").write_text("---\nname: arith\ndescription: Do sums.\n---\n\nShow work.\n")
    (view / "skill" / "references").mkdir()
    (view / "skill" / "references" / "tips.md").write_text("tip\n")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == ["skill/SKILL.md", "skill/references/tips.md"]
    assert res.violations == []
    assert (ws / "skill" / "SKILL.md").read_text().endswith("Show work.\n")
    assert (ws / "skill" / "references" / "tips.md").read_text() == "tip\n"


def test_a_large_file_the_skill_brought_is_no_change_until_it_changes(ws: Path, tmp_path: Path) -> None:
    """A 2 MiB reference the skill came with was a "discarded write outside the whitelist" in
    every round: a file over 1 MiB got a marker digest that never equals its snapshot's (QA)."""
    big = ws / "skill" / "references" / "api.md"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.write_text("".join(f"Line {i}: reference text about the API.\n" for i in range(50_000)))
    view, snap = _build(ws, tmp_path)
    (view / "skill" / "SKILL.md").write_text("---\nname: arith\ndescription: Do sums.\n---\n\nShow work.\n")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == ["skill/SKILL.md"] and res.violations == []
    view, snap = _build(ws, tmp_path)
    with (view / "skill" / "references" / "api.md").open("a") as f:
        f.write("one more line\n")
    before = big.read_bytes()
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == [] and res.violations == ["skill/references/api.md"]  # too large to copy back
    assert big.read_bytes() == before


def test_a_name_that_is_not_utf8_or_holds_a_control_character_is_a_violation(
    ws: Path, tmp_path: Path
) -> None:
    """Such a name failed the round with a raw UnicodeEncodeError once the candidate was hashed;
    it is discarded and listed by its escaped bytes, and the rest of the edit goes on."""
    view, snap = _build(ws, tmp_path)
    (view / "skill" / "SKILL.md").write_text("---\nname: arith\ndescription: Do sums.\n---\n\nBrief.\n")
    skill = os.fsencode(view / "skill")
    for name in (b"bad\xffname.md", b"two\nlines.md"):
        with open(os.path.join(skill, name), "wb") as f:
            f.write(b"x")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == ["skill/SKILL.md"]
    assert res.violations == ["skill/bad\\xffname.md", "skill/two\\nlines.md"]
    assert all(v.isascii() and v.isprintable() for v in res.violations)
    assert not any(b"name.md" in n or b"lines.md" in n for n in os.listdir(os.fsencode(ws / "skill")))


def test_harness_edit_in_skill_mode_is_a_violation_and_ws_is_unchanged(ws: Path, tmp_path: Path) -> None:
    before = (ws / "harness" / "run.py").read_text()
    view, snap = _build(ws, tmp_path)
    (view / "harness" / "run.py").write_text("raise SystemExit(1)\n")
    (view / "notes.txt").write_text("new file at the root\n")
    (view / "tasks").mkdir()
    (view / "tasks" / "tasks.jsonl").write_text("overwrite gold\n")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == []
    assert res.violations == ["harness/run.py", "notes.txt", "tasks/tasks.jsonl"]
    assert (ws / "harness" / "run.py").read_text() == before
    assert not (ws / "notes.txt").exists()
    assert GOLD in (ws / "tasks" / "tasks.jsonl").read_text()


def test_protected_paths_stay_protected_under_a_broad_whitelist(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    (view / "scorer.py").write_text("def score(*a): return 1.0\n")
    (view / "harnessopt.yaml").write_text("mode: harness\n")
    (view / "harness" / "run.py").write_text("print('better')\n")
    res = copy_back(view, ws, ["**"], snapshot=snap)
    assert res.changed == ["harness/run.py"]
    assert res.violations == ["harnessopt.yaml", "scorer.py"]
    assert GOLD in (ws / "scorer.py").read_text()


def test_symlinks_made_by_the_agent_are_violations_and_never_followed(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (view / "skill" / "evil.md").symlink_to(secret)
    (view / "skill" / "evil_dir").symlink_to(tmp_path)
    os.unlink(view / "skill" / "SKILL.md")
    (view / "skill" / "SKILL.md").symlink_to(secret)  # replace a whitelisted file by a link
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert set(res.violations) == {"skill/evil.md", "skill/evil_dir", "skill/SKILL.md"}
    assert res.changed == []
    assert not (ws / "skill" / "evil.md").exists()
    assert (ws / "skill" / "SKILL.md").read_text().startswith("---\nname: arith")


def test_a_workspace_symlink_on_the_way_is_never_written_through(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "skill" / "linked").symlink_to(outside)
    view, snap = _build(ws, tmp_path)
    assert "skill/linked" in snap.skipped
    (view / "skill" / "linked").mkdir()
    (view / "skill" / "linked" / "x.md").write_text("escape")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.violations == ["skill/linked/x.md"]
    assert list(outside.iterdir()) == []


def test_deletion_of_a_whitelisted_file_is_applied(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    (view / "skill" / "scripts" / "helper.py").unlink()
    (view / "harness" / "run.py").unlink()
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == ["skill/scripts/helper.py"]
    assert res.violations == ["harness/run.py"]
    assert not (ws / "skill" / "scripts").exists()  # emptied subdirectory pruned
    assert (ws / "skill" / "SKILL.md").exists()
    assert (ws / "harness" / "run.py").exists()


def test_inputs_and_junk_are_ignored_not_violations(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    (view / "history.md").write_text("rewritten history")
    (view / "OPTIMIZE.md").unlink()
    (view / "trajectories" / "t1.md").write_text("tampered")
    (view / "skill" / "__pycache__").mkdir()
    (view / "skill" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (view / "skill" / ".SKILL.md.swp").write_bytes(b"\0")
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == [] and res.violations == []
    assert {"history.md", "OPTIMIZE.md", "trajectories/t1.md", "skill/__pycache__"} <= set(res.ignored)
    assert "tampered" not in (ws / "trajectories" / "t1.md").read_text()


def test_big_files_are_violations_and_mode_changes_are_changes(ws: Path, tmp_path: Path) -> None:
    view, snap = _build(ws, tmp_path)
    (view / "skill" / "big.txt").write_bytes(b"x" * ((1 << 20) + 1))
    (view / "skill" / "scripts" / "helper.py").chmod(0o755)
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.violations == ["skill/big.txt"]
    assert res.changed == ["skill/scripts/helper.py"]
    assert os.access(ws / "skill" / "scripts" / "helper.py", os.X_OK)
    assert not (ws / "skill" / "big.txt").exists()


@pytest.mark.parametrize(
    ("path", "globs", "expected"),
    [
        ("skill/SKILL.md", ["skill/**"], True),
        ("skill/a/b/c.md", ["skill/**"], True),
        ("skillful/x", ["skill/**"], False),
        ("harness/run.py", ["skill/**"], False),
        ("skill/SKILL.md", ["skill/*.md"], True),
        ("skill/refs/a.md", ["skill/*.md"], False),
        ("skill/refs/a.md", ["**/*.md"], True),
        ("a.md", ["**/*.md"], True),
        ("skill/refs/a.md", ["skill"], True),
        ("skill/f1.txt", ["skill/f[0-9].txt"], True),
        ("skill/fx.txt", ["skill/f[!x].txt"], False),
        ("skill/a.py", ["skill/?.py"], True),
    ],
)
def test_glob_semantics(path: str, globs: list[str], expected: bool) -> None:
    assert matches_any(path, globs) is expected


@pytest.mark.parametrize(
    ("path", "globs", "expected"),
    [
        # Deliberately unlike .gitignore: a pattern without a slash stays at the workspace root,
        # so a short pattern never widens the boundary to every depth.
        ("a.md", ["*.md"], True),
        ("skill/a.md", ["*.md"], False),
        ("skill/SKILL.md", ["SKILL.md"], False),
        ("harness/skill/x.py", ["skill"], False),
        ("skill/SKILL.md", ["**/SKILL.md"], True),
        # As in .gitignore: a later !pattern takes paths back out.
        ("skill/secret.md", ["skill/**", "!skill/secret.md"], False),
        ("skill/other.md", ["skill/**", "!skill/secret.md"], True),
        # As in .gitignore: a trailing slash means directories only.
        ("skill/a.md", ["skill/"], True),
        ("skill", ["skill/"], False),
        # As in .gitignore: a backslash escapes a wildcard.
        ("skill/*", ["skill/\\*"], True),
        ("skill/a", ["skill/\\*"], False),
        # Kept from the old matcher: empty and "." segments are dropped; "#" is not a comment.
        ("skill/a.md", ["./skill//**"], True),
        ("skill/#notes.md", ["skill/#notes.md"], True),
        ("x", ["", "/"], False),
    ],
)
def test_glob_semantics_where_gitignore_differs(path: str, globs: list[str], expected: bool) -> None:
    assert matches_any(path, globs) is expected


def test_invalid_glob_is_a_user_error() -> None:
    with pytest.raises(UserError, match=r"invalid glob .*fix 'whitelist' in harnessopt.yaml"):
        matches_any("skill/a", ["skill/[z-a]"])
