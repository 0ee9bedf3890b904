"""Bad input: one line that says what to do, exit code 2, no traceback, nothing changed."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, git, write_example
from tests.support.cli_errors import assert_unchanged, assert_user_error, snapshot
from tests.support.interrupts import handlers_restored


@pytest.fixture
def example(tmp_path: Path) -> tuple[Path, Path]:
    return write_example(tmp_path)


def _init_fails(tmp_path: Path, skill: Path, tasks: Path, *needles: str, extra: tuple[str, ...] = ()) -> None:
    ws = tmp_path / "ws"
    before = snapshot(tmp_path)
    assert_user_error(cli("init", ws, "--skill", skill, "--tasks", tasks, *extra), *needles)
    assert not ws.exists()
    assert snapshot(tmp_path) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ws.init-")]


def test_missing_skill_dir(tmp_path: Path, example) -> None:
    _init_fails(tmp_path, tmp_path / "nope", example[1], "nope")


def test_missing_skill_md(tmp_path: Path, example) -> None:
    (example[0] / "SKILL.md").unlink()
    _init_fails(tmp_path, example[0], example[1], "SKILL.md")


@pytest.mark.parametrize(
    "front, needle",
    [
        ("name: Bad_Name\ndescription: x", "name"),
        ("name: ok-name", "description"),
        ("name: a--b\ndescription: x", "name"),
        ("name: ok\ndescription: " + "x" * 1025, "description"),
    ],
)
def test_bad_front_matter(tmp_path: Path, example, front: str, needle: str) -> None:
    (example[0] / "SKILL.md").write_text(f"---\n{front}\n---\nbody\n")
    _init_fails(tmp_path, example[0], example[1], needle)


def test_task_file_not_jsonl_names_the_line(tmp_path: Path, example) -> None:
    lines = example[1].read_text().splitlines()
    lines[2] = "{not json"
    example[1].write_text("\n".join(lines) + "\n")
    _init_fails(tmp_path, example[0], example[1], ":3")


def test_duplicate_ids(tmp_path: Path, example) -> None:
    lines = example[1].read_text().splitlines()
    example[1].write_text("\n".join([*lines, lines[0]]) + "\n")
    _init_fails(tmp_path, example[0], example[1], "duplicate")


def test_same_input_in_two_splits(tmp_path: Path, example) -> None:
    lines = example[1].read_text().splitlines()
    dup = json.loads(lines[0]) | {"id": "copy", "split": "test"}
    example[1].write_text("\n".join([*lines, json.dumps(dup)]) + "\n")
    _init_fails(tmp_path, example[0], example[1], "split")


def test_fewer_than_five_val_tasks(tmp_path: Path, example) -> None:
    rows = [json.loads(x) for x in example[1].read_text().splitlines()]
    rows = [r for r in rows if r["split"] != "val"] + [r for r in rows if r["split"] == "val"][:4]
    example[1].write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _init_fails(tmp_path, example[0], example[1], "val")


def test_unknown_template(tmp_path: Path, example) -> None:
    _init_fails(tmp_path, example[0], example[1], "template", extra=("--template", "nope"))


def test_init_into_non_empty_dir(tmp_path: Path, example) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("mine")
    assert_user_error(cli("init", ws, "--skill", example[0], "--tasks", example[1]), "not empty")
    assert [p.name for p in ws.iterdir()] == ["keep.txt"]


@pytest.fixture
def ws(tmp_path: Path, example) -> Path:
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", example[0], "--tasks", example[1]).returncode == 0
    return ws


@pytest.mark.parametrize("command", ["run", "log", "status", "audit"])
def test_not_a_workspace(tmp_path: Path, command: str) -> None:
    other = tmp_path / "other"
    other.mkdir()
    assert_user_error(cli(command, other), "not a harnessopt workspace")


def test_uncommitted_changes_before_run(ws: Path) -> None:
    (ws / "skill" / "SKILL.md").write_text((ws / "skill" / "SKILL.md").read_text() + "\nmine\n")
    head = git(ws, "rev-parse", "HEAD")
    r = cli("run", ws, "--sandbox", "local", env={"ANTHROPIC_API_KEY": "x"})
    assert_user_error(r, "commit or stash")
    assert (ws / "skill" / "SKILL.md").read_text().endswith("mine\n")
    assert git(ws, "rev-parse", "HEAD") == head


def test_no_api_key(ws: Path) -> None:
    before = snapshot(ws)
    r = cli("run", ws, "--sandbox", "local")
    assert_user_error(r, "ANTHROPIC_API_KEY")
    assert "projection" not in r.stdout and "chains" not in r.stdout  # the refusal is the run's one line
    assert_unchanged(ws, before)


def test_a_refused_run_in_a_fresh_clone_leaves_no_state_folder(ws: Path, tmp_path: Path) -> None:
    """A clone of a workspace has no .harnessopt/ (git-ignored): a run refused for a setting made
    one, empty, as if it had started."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(ws), str(clone))
    assert_user_error(cli("run", clone, "-c", "model.bogus=1"), "unknown setting 'model.bogus'")
    assert_user_error(cli("run", clone, "--rounds", "0"), "--rounds")
    assert not (clone / ".harnessopt").exists()
    assert git(clone, "status", "--porcelain", "--ignored") == ""


def test_rounds_zero(ws: Path) -> None:
    assert_user_error(cli("run", ws, "--rounds", "0"), "--rounds")


def test_bad_config_value(ws: Path) -> None:
    (ws / "harnessopt.yaml").write_text((ws / "harnessopt.yaml").read_text() + "\nbogus_key: 1\n")
    assert_user_error(cli("status", ws), "unknown setting 'bogus_key'", "docs/workspace.md")


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("rollout.batch_size=abc", "rollout.batch_size: expected a whole number, got 'abc'"),
        ("rollout.batch_size=0", "rollout.batch_size: must be greater than or equal to 1, got 0"),
        ("rollout.warm_interpreter=maybe", "rollout.warm_interpreter: expected true or false, got 'maybe'"),
        ("search.explore=1.5", "search.explore: expected a whole number, got 1.5"),
        ("search.winners=5", "search.winners 5 is more than search.candidates 1: no round can validate"),
    ],
)
def test_a_bad_setting_is_said_in_plain_words(ws: Path, setting: str, said: str) -> None:
    """pydantic's own words ("Input should be a valid integer, unable to parse string as an
    integer") said what the library wanted; the line says what the setting wants and what it got."""
    assert_user_error(cli("run", ws, "--dry-run", "-c", setting), said)


def test_unknown_round_for_diff_and_rollback(ws: Path) -> None:
    assert_user_error(cli("diff", ws, "7"), "round 7")
    assert_user_error(cli("rollback", ws, "7"), "round 7")


@pytest.mark.parametrize("written", ["\uff10", "0_0", "0.0", " "])
def test_a_round_number_is_ascii_digits(ws: Path, written: str) -> None:
    """``int`` reads a full-width "０" and "0_0" as 0: ``rollback WS ０`` rolled back (QA)."""
    head = git(ws, "rev-parse", "HEAD")
    for command in (
        ("diff", ws, written),
        ("rollback", ws, written),
        ("diff", ws, "1", "--candidate", written),
    ):
        assert_user_error(cli(*command), "expected a whole number")
    assert git(ws, "rev-parse", "HEAD") == head


def test_docker_requested_but_unreachable(ws: Path) -> None:
    env = {"ANTHROPIC_API_KEY": "x", "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    r = cli("run", ws, "--sandbox", "docker", env=env)
    assert_user_error(r, "--sandbox local")


def test_skill_mode_has_no_proposal_to_decide_on(ws: Path) -> None:
    # with the local sandbox the run it names needs --unsafe-host-optimizer (the plain one is refused)
    text = (ws / "harnessopt.yaml").read_text().replace("sandbox: auto", "sandbox: local")
    (ws / "harnessopt.yaml").write_text(text)
    git(ws, "commit", "-qam", "local sandbox")
    before = snapshot(ws)
    for command in (("approve",), ("reject", "--reason", "no")):
        assert_user_error(
            cli(*command, ws),
            "skill mode, which has no round-0 proposal",
            f"`harnessopt run {ws} --unsafe-host-optimizer` goes straight to the next round",
        )
    assert snapshot(ws) == before


def test_harness_mode_needs_confirmation(ws: Path) -> None:
    """Since issue 11 the confirmation is a person's decision on the round-0 proposal (the run
    itself is tests/round/test_round0.py): nothing to approve yet, and a rejection needs a reason."""
    text = (ws / "harnessopt.yaml").read_text().replace("mode: skill", "mode: harness")
    (ws / "harnessopt.yaml").write_text(text)
    git(ws, "commit", "-qam", "harness mode")
    assert_user_error(cli("approve", ws), "harnessopt run")
    assert_user_error(cli("reject", ws), "--reason")


def test_help_exits_zero() -> None:
    r = cli("--help")
    assert r.returncode == 0 and "demo" in r.stdout


def test_an_unknown_flag_is_reported_by_its_command(ws: Path) -> None:
    """argparse's top-level parser collects the leftovers; the line names the command they were
    given to (and run's hint for settings without a flag), not 'harnessopt harnessopt'."""
    before = snapshot(ws)
    r = cli("run", ws, "--rounds", "1", "--frob", "3")
    assert_user_error(r, "unrecognized arguments: --frob 3", "-c KEY=VALUE", "'harnessopt run --help'")
    assert_user_error(cli("log", ws, "--frob"), "'harnessopt log --help'")
    assert "harnessopt harnessopt" not in cli("log", ws, "--frob").stderr
    assert_user_error(cli(), "'harnessopt --help'")
    assert snapshot(ws) == before


def test_a_negative_split_is_told_what_is_wrong_with_it(tmp_path: Path, example) -> None:
    """argparse took "-1:2:3" for a flag ("expected one argument"); the value reaches --split's check."""
    for extra in (("--split", "-1:2:3"), ("--split=-1:2:3",)):
        _init_fails(
            tmp_path, *example, "--split '-1:2:3'", "each part must be a finite number >= 0", extra=extra
        )
    _init_fails(tmp_path, *example, "--split", "expected one argument", extra=("--split",))


def test_a_dry_run_names_the_run_it_would_start(ws: Path) -> None:
    """What it says to paste is the run asked for, without --dry-run or the prefix argparse took for it."""
    for dry in ("--dry-run", "--dry"):
        out = cli("run", ws, dry, "--rounds", "2", "-c", "gate.epochs=2")
        assert out.returncode == 0, out.stderr
        last = out.stdout.splitlines()[-1]  # this workspace's model needs a key the test does not set
        assert last.endswith(
            f"start it with: set ANTHROPIC_API_KEY in the environment, then harnessopt run {ws} --rounds 2 -c gate.epochs=2"
        )


def test_colons_in_a_message_stay_text(tmp_path: Path, example) -> None:
    """rich turns ':b:' into an emoji unless told not to: a --split, a path or a summary with colons
    is shown as typed, on stderr and on stdout."""
    from harnessopt import cli as cli_module

    _init_fails(tmp_path, *example, "'a:b:c'", extra=("--split", "a:b:c"))
    for console in (cli_module.console, cli_module.err_console):
        with console.capture() as captured:
            console.print("round :b: and :smile:", markup=False)
        assert captured.get().strip() == "round :b: and :smile:"


@pytest.mark.parametrize(
    "error, needles",
    [
        (
            PermissionError(errno.EACCES, "Permission denied", "ws/harnessopt.yaml"),
            ("permission denied (ws/harnessopt.yaml)", "give this user access"),
        ),
        (
            OSError(errno.ENAMETOOLONG, "File name too long", "w" * 300),
            ("file name too long", "shorter path"),
        ),
        (OSError(errno.ENOSPC, "No space left on device", "ws/x"), ("no space left on the disk (ws/x)",)),
        (
            shutil.Error([("skill/a.md", "ws/skill/a.md", "[Errno 13] Permission denied: 'skill/a.md'")]),
            ("permission denied (skill/a.md)",),
        ),
    ],
    ids=["unreadable", "too long", "full disk", "copytree"],
)
def test_an_os_error_from_the_users_files_is_one_line(
    error: OSError,
    needles: tuple[str, ...],
    in_process: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a file of the user's can refuse us (as root in CI, chmod refuses nothing, so the command
    raises it here) is exit 2 and one line that says what to do; any other OSError is ours: raised."""
    cli_module = in_process

    def refuse(_args: object) -> int:
        raise error

    monkeypatch.setitem(cli_module.COMMANDS, "status", refuse)
    assert cli_module.main(["status", "ws"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    for needle in needles:
        assert needle in lines[0]

    def ours(_args: object) -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setitem(cli_module.COMMANDS, "status", ours)
    with pytest.raises(OSError, match="Bad file descriptor"):
        cli_module.main(["status", "ws"])


def test_a_reader_that_goes_away_is_not_an_error(in_process: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`harnessopt log ws | head`: the pipe closes under us; exit 0, as before BrokenPipeError was
    caught by the OSError clause above it."""
    cli_module = in_process

    def closed(_args: object) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setitem(cli_module.COMMANDS, "log", closed)
    assert cli_module.main(["log", "ws"]) == 0


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``cli`` to call ``main`` in this process: its hardening off (it would leave pytest's process
    non-dumpable for the tests after) and the signal handlers it installs put back."""
    from harnessopt import cli as cli_module
    from harnessopt.util import hardening

    monkeypatch.setattr(hardening, "make_non_dumpable", lambda: None)
    with handlers_restored():
        yield cli_module


def _as_nobody(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m harnessopt ARGS`` in a new user namespace, where this process is nobody: chmod
    bites there (tests run as root, where it refuses nothing)."""
    return subprocess.run(
        ["unshare", "-U", sys.executable, "-m", "harnessopt", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_files_this_user_may_not_touch(tmp_path: Path, example) -> None:
    skill, tasks = example
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    assert_user_error(
        _as_nobody("init", ro / "w", "--skill", skill, "--tasks", tasks), f"permission denied in {ro}"
    )
    assert list(ro.iterdir()) == []
    (skill / "SKILL.md").chmod(0)
    r = _as_nobody("init", tmp_path / "w", "--skill", skill, "--tasks", tasks)
    assert_user_error(r, "permission denied", "SKILL.md", "give this user access")
    assert not (tmp_path / "w").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".w.init-")]


def test_an_empty_path_and_a_path_with_a_line_break_are_one_line(tmp_path: Path) -> None:
    """``status ""`` named the path "." and a path holding a line break split the error in two (QA)."""
    for command in (("status", ""), ("log", ""), ("init", "", "--skill", "s", "--tasks", "t")):
        assert_user_error(cli(*command), "expected a path, got an empty string")
    broken = tmp_path / "a\nb"
    assert_user_error(cli("status", broken), f"{tmp_path}/a\\nb does not exist")
