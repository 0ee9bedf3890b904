"""``mode: skill | harness | joint``: the whitelist each mode gives, the read-only set no whitelist opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.config import ALWAYS_READ_ONLY, Config, parse_config
from harnessopt.errors import UserError
from harnessopt.optimizer.view import build_view, copy_back


def test_each_mode_has_its_whitelist() -> None:
    assert Config(mode="skill").allowed_globs() == ["skill/**"]
    assert Config(mode="harness").allowed_globs() == ["harness/**"]
    assert Config(mode="joint").allowed_globs() == ["skill/**", "harness/**"]
    assert Config(mode="harness", whitelist=["harness/tools/**"]).allowed_globs() == ["harness/tools/**"]
    with pytest.raises(UserError, match="mode"):
        parse_config({"mode": "everything"}, "harnessopt.yaml")


def test_the_read_only_set_is_always_there() -> None:
    cfg = parse_config({"read_only": ["harness/vendor/**"]}, "harnessopt.yaml")
    assert cfg.read_only_globs() == [*ALWAYS_READ_ONLY, "harness/vendor/**"]
    assert set(ALWAYS_READ_ONLY) == {"tasks/**", "scorer.py", "perturb.py", "harnessopt.yaml", ".git/**"}


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    for rel, text in {
        "skill/SKILL.md": "---\nname: s\ndescription: d\n---\n",
        "harness/run.py": "print(1)\n",
        "harness/vendor/lib.py": "X = 1\n",
    }.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    return ws


@pytest.mark.parametrize("mode", ["skill", "harness", "joint"])
def test_a_whitelist_of_everything_still_cannot_open_the_read_only_set(tmp_path: Path, mode: str) -> None:
    ws = _ws(tmp_path)
    view = tmp_path / "private" / "view"
    snap = build_view(ws, view, history_md="", brief_md="")
    for rel in ("skill/SKILL.md", "harness/run.py", "harness/vendor/lib.py", "scorer.py", "harnessopt.yaml"):
        (view / rel).parent.mkdir(parents=True, exist_ok=True)
        (view / rel).write_text("changed\n")
    (view / "tasks").mkdir()
    (view / "tasks" / "val.jsonl").write_text("{}\n")
    cfg = Config(mode=mode, whitelist=["**"], read_only=["harness/vendor/**"])  # type: ignore[arg-type]
    got = copy_back(view, ws, cfg.allowed_globs(), snapshot=snap, read_only=cfg.read_only_globs())
    assert got.changed == ["harness/run.py", "skill/SKILL.md"]
    assert got.violations == ["harness/vendor/lib.py", "harnessopt.yaml", "scorer.py", "tasks/val.jsonl"]
    assert (ws / "harness" / "vendor" / "lib.py").read_text() == "X = 1\n" and not (ws / "scorer.py").exists()


def test_each_mode_default_discards_the_other_part(tmp_path: Path) -> None:
    for mode, kept, dropped in (
        ("skill", "skill/SKILL.md", "harness/run.py"),
        ("harness", "harness/run.py", "skill/SKILL.md"),
    ):
        ws = _ws(tmp_path / mode)
        view = tmp_path / mode / "private" / "view"
        snap = build_view(ws, view, history_md="", brief_md="")
        (view / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: e\n---\n")
        (view / "harness" / "run.py").write_text("print(2)\n")
        got = copy_back(view, ws, Config(mode=mode).allowed_globs(), snapshot=snap)  # type: ignore[arg-type]
        assert got.changed == [kept] and got.violations == [dropped]
