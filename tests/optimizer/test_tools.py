from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harnessopt.optimizer.tools import BashTool, EditorTool, cap_output
from harnessopt.sandbox.local.sandbox import LocalShell


@pytest.fixture
def view(tmp_path: Path) -> Path:
    root = tmp_path / "view"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("line one\nline two\nline three\nrepeat\nrepeat\n")
    return root


# --------------------------------------------------------------------------- bash


def test_local_shell_runs_in_the_view_with_a_scrubbed_env(
    view: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-host-secret")
    res = LocalShell(view).run("pwd; echo HOME=$HOME; env | grep -c ANTHROPIC || true; ls skill", 10)
    assert res.exit_code == 0 and not res.timed_out
    lines = res.output.splitlines()
    assert lines[0] == str(view.resolve())
    assert lines[1] == f"HOME={view.resolve()}"
    assert lines[2] == "0"
    assert "SKILL.md" in lines
    assert "sk-host-secret" not in res.output


def test_local_shell_reports_exit_codes_and_stderr(view: Path) -> None:
    res = LocalShell(view).run("echo oops >&2; exit 3", 10)
    assert res.exit_code == 3 and "oops" in res.output


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent, bash, is gone too and init reaps it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_timeout_kills_the_whole_process_group(view: Path) -> None:
    started = time.monotonic()
    res = LocalShell(view).run("sleep 60 & echo $! > child.pid; sleep 60", 1.0)
    assert res.timed_out and res.exit_code is None
    assert time.monotonic() - started < 5
    assert _wait_dead(int((view / "child.pid").read_text()))


def test_background_children_do_not_hang_the_call_and_are_reaped(view: Path) -> None:
    started = time.monotonic()
    res = LocalShell(view).run("(sleep 60; echo late) & echo $! > child.pid; echo done", 20)
    assert time.monotonic() - started < 5
    assert res.exit_code == 0 and res.output.strip() == "done"
    assert _wait_dead(int((view / "child.pid").read_text()))


def test_output_is_capped_in_the_middle(view: Path) -> None:
    res = LocalShell(view, output_cap=1000).run("head -c 200000 /dev/zero | tr '\\0' a; echo; echo END", 10)
    assert len(res.output) < 1100
    assert "bytes elided" in res.output
    assert res.output.startswith("a") and res.output.rstrip().endswith("END")
    assert "chars elided" in cap_output("x" * 50, cap=10)


def test_bash_tool_results(view: Path) -> None:
    bash = BashTool(LocalShell(view), timeout_s=1.0)
    assert bash({"command": "echo hi"}) == ("hi\n", False)
    text, err = bash({"command": "false"})
    assert err and "[exit code 1]" in text
    text, err = bash({"command": "sleep 5"})
    assert err and "timed out" in text
    assert bash({"restart": True})[1] is False
    assert bash({})[1] is True


# --------------------------------------------------------------------------- editor


def test_editor_view_file_range_and_directory(view: Path) -> None:
    ed = EditorTool(view)
    text, err = ed({"command": "view", "path": "skill/SKILL.md"})
    assert not err and "     1\tline one" in text and "     3\tline three" in text
    text, err = ed({"command": "view", "path": "skill/SKILL.md", "view_range": [2, 3]})
    assert not err and "line two" in text and "line one" not in text
    text, err = ed({"command": "view", "path": "skill/SKILL.md", "view_range": [4, -1]})
    assert not err and "     5\trepeat" in text
    assert ed({"command": "view", "path": "skill/SKILL.md", "view_range": [9, 10]})[1]
    text, err = ed({"command": "view", "path": "."})
    assert not err and "skill/" in text and "skill/SKILL.md" in text


def test_editor_create_replace_insert(view: Path) -> None:
    ed = EditorTool(view)
    assert ed({"command": "create", "path": "skill/refs/new.md", "file_text": "a\nb\n"})[1] is False
    assert (view / "skill" / "refs" / "new.md").read_text() == "a\nb\n"
    text, err = ed(
        {"command": "str_replace", "path": "skill/SKILL.md", "old_str": "line two", "new_str": "LINE 2"}
    )
    assert not err and "LINE 2" in text
    assert "LINE 2" in (view / "skill" / "SKILL.md").read_text()
    text, err = ed({"command": "str_replace", "path": "skill/SKILL.md", "old_str": "absent", "new_str": "x"})
    assert err and "did not appear verbatim" in text
    text, err = ed({"command": "str_replace", "path": "skill/SKILL.md", "old_str": "repeat", "new_str": "x"})
    assert err and "occurs 2 times" in text and "[4, 5]" in text
    assert (
        ed({"command": "insert", "path": "skill/SKILL.md", "insert_line": 0, "insert_text": "top\n"})[1]
        is False
    )
    assert (
        ed({"command": "insert", "path": "skill/SKILL.md", "insert_line": 1, "insert_text": "second"})[1]
        is False
    )
    assert (view / "skill" / "SKILL.md").read_text().startswith("top\nsecond\nline one\nLINE 2\n")
    assert ed({"command": "insert", "path": "skill/SKILL.md", "insert_line": 99, "insert_text": "x"})[1]
    text, err = ed({"command": "undo_edit", "path": "skill/SKILL.md"})
    assert err and "not available" in text
    assert ed({"command": "delete", "path": "skill/SKILL.md"})[1]


@pytest.mark.parametrize("path", ["../outside.md", "skill/../../outside.md", "/etc/passwd", "/tmp/x.md", ""])
def test_editor_refuses_paths_outside_the_view(view: Path, path: str) -> None:
    ed = EditorTool(view)
    for command in ({"command": "view"}, {"command": "create", "file_text": "x"}):
        text, err = ed({**command, "path": path})
        assert err and text.startswith("Error:")
    assert not (view.parent / "outside.md").exists()
    assert not Path("/tmp/x.md").exists()


def test_editor_refuses_symlinks_pointing_out_and_accepts_absolute_inside(view: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (view / "skill" / "link.md").symlink_to(secret)
    ed = EditorTool(view, aliases=("/view",))
    text, err = ed({"command": "view", "path": "skill/link.md"})
    assert err and "host secret" not in text
    assert ed({"command": "create", "path": "skill/link.md", "file_text": "overwrite"})[1]
    assert secret.read_text() == "host secret"
    assert ed({"command": "view", "path": str(view / "skill" / "SKILL.md")})[1] is False
    assert ed({"command": "view", "path": "/view/skill/SKILL.md"})[1] is False
