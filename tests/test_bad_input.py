"""Bad input, as users make it (issue 10's matrix): one line that says what to do, exit 2, nothing
changed on disk. Complements tests/test_cli_errors.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli, git, write_example
from tests.support.cli_errors import assert_user_error, snapshot

RUN = ("--sandbox", "local", "--unsafe-host-optimizer")
ENV = {"ANTHROPIC_API_KEY": "x"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", skill, "--tasks", tasks).returncode == 0
    return ws


def _unchanged(ws: Path, before: dict[str, bytes]) -> None:
    after = snapshot(ws)
    assert {k: v for k, v in after.items() if ".harnessopt" not in k} == {
        k: v for k, v in before.items() if ".harnessopt" not in k
    }


@pytest.mark.parametrize(
    "yaml_text, needle",
    [
        ("mode: [unclosed\n", "not valid YAML"),
        ("mode: skill\nno_such_key: 1\n", "no_such_key"),
        ("rollout:\n  concurrency: many\n", "rollout.concurrency"),
        ("rollout:\n  sandbox: vm\n", "known: auto, docker, local"),
    ],
)
def test_a_bad_config_is_one_line(ws: Path, yaml_text: str, needle: str) -> None:
    (ws / "harnessopt.yaml").write_text(yaml_text)
    git(ws, "commit", "-qam", "my config")
    before = snapshot(ws)
    assert_user_error(cli("run", ws, *RUN, env=ENV), needle)
    _unchanged(ws, before)


def test_a_skill_without_front_matter(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    (skill / "SKILL.md").write_text("# Just a heading\n\nNo front matter.\n")
    assert_user_error(cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "front matter")
    assert not (tmp_path / "ws").exists()


def test_a_harness_without_run_py(ws: Path) -> None:
    git(ws, "rm", "-q", "harness/run.py")
    git(ws, "commit", "-qm", "no entry point")
    before = snapshot(ws)
    assert_user_error(cli("run", ws, *RUN, env=ENV), "harness/run.py is missing")
    _unchanged(ws, before)


def test_a_ten_megabyte_task_input(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    with tasks.open("a") as f:
        f.write(json.dumps({"id": "huge", "input": "x" * 10_000_000, "answer": "y", "split": "train"}) + "\n")
    assert_user_error(cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "10.0 MB")
    assert not (tmp_path / "ws").exists()


def test_non_utf8_bytes_in_the_task_file(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    tasks.write_bytes(tasks.read_bytes() + b'{"id": "latin", "input": "caf\xe9", "answer": "x"}\n')
    assert_user_error(cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "UTF-8")


@pytest.mark.parametrize("how", ["rewritten", "foreign"])
def test_a_main_that_left_harnessopt_history(ws: Path, how: str) -> None:
    if how == "rewritten":  # the initial commit amended by hand: ho/round-0 is no longer on main
        git(ws, "commit", "-q", "--amend", "-m", "my own message")
    else:  # main moved to an unrelated commit
        tree = git(ws, "write-tree")
        git(ws, "reset", "-q", "--hard", git(ws, "commit-tree", tree, "-m", "foreign"))
    before = snapshot(ws)
    for command in (("run", *RUN), ("status",), ("log",)):
        assert_user_error(cli(*command, ws, env=ENV), "does not descend from ho/round-0")
    _unchanged(ws, before)


def test_a_deleted_round_0_tag(ws: Path) -> None:
    git(ws, "tag", "-d", "ho/round-0")
    assert_user_error(cli("status", ws), "no ho/round-0 tag")


def test_a_full_disk(tmp_path: Path) -> None:
    """init on a 1 MiB tmpfs: one line, exit 2, nothing left behind (needs root to mount)."""
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        skill, tasks = write_example(tmp_path)
        (skill / "references").mkdir()
        (skill / "references" / "big.md").write_text("x" * 2_000_000)
        r = cli("init", small / "ws", "--skill", skill, "--tasks", tasks)
        assert_user_error(r, "no space left")
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)])
