"""Bad input, as users make it (issue 10's matrix): one line that says what to do, exit 2, nothing
changed on disk. Complements tests/test_cli_errors.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.cli import cli, git, write_example
from tests.support.cli_errors import assert_unchanged, assert_user_error, snapshot

RUN = ("--sandbox", "local", "--unsafe-host-optimizer")
ENV = {"ANTHROPIC_API_KEY": "x"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", skill, "--tasks", tasks).returncode == 0
    return ws


@pytest.mark.parametrize(
    "yaml_text, needle",
    [
        ("mode: [unclosed\n", "not valid YAML"),
        ("mode: skill\nno_such_key: 1\n", "no_such_key"),
        ("rollout:\n  concurrency: many\n", "rollout.concurrency"),
        ("rollout:\n  sandbox: vm\n", "known: auto, docker, local"),
        # a misspelt template ran as none: the image variant, the model's tools, the priors
        ("template: tool_agent\n", "known templates: chat, chat-sdk, claude-code, codex"),
        # each was a traceback (a port, an IPv6 host, an image name) after the dry run passed it (QA)
        ("model:\n  base_url: http://127.0.0.1:99999\n", "is not a valid URL (Port out of range"),
        ("model:\n  base_url: 'https://127.0.0.1:abc/'\n", "is not a valid URL"),
        ("optimizer:\n  base_url: 'http://[::1'\n", "optimizer.base_url: 'http://[::1' is not a valid URL"),
        ("rollout:\n  image: bad!tag\n", "rollout.image: 'bad!tag' is not a Docker image reference"),
    ],
)
def test_a_bad_config_is_one_line(ws: Path, yaml_text: str, needle: str) -> None:
    (ws / "harnessopt.yaml").write_text(yaml_text)
    git(ws, "commit", "-qam", "my config")
    before = snapshot(ws)
    assert_user_error(cli("run", ws, *RUN, env=ENV), needle)
    assert_unchanged(ws, before)


def test_a_skill_without_front_matter(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    (skill / "SKILL.md").write_text("# Just a heading\n\nNo front matter.\n")
    assert_user_error(cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "front matter")
    assert not (tmp_path / "ws").exists()


def test_a_harness_without_run_py(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "my ws"  # the fix the line names is pasted into a shell: the space stays quoted
    assert cli("init", ws, "--skill", skill, "--tasks", tasks).returncode == 0
    git(ws, "rm", "-q", "harness/run.py")
    git(ws, "commit", "-qm", "no entry point")
    before = snapshot(ws)
    # the dry run said "start it with"; ablate, replay and audit paid for every run, which crashed
    for command in (("run", *RUN), ("run", *RUN, "--dry-run"), ("ablate", "stream"), ("audit",)):
        r = cli(*command[:1], ws, *command[1:], env=ENV)
        assert_user_error(r, "harness/run.py is missing")
    assert_unchanged(ws, before)
    restore = r.stderr.split("restore it (")[1].split(", and commit")[0]  # the fix the line names works
    assert restore.startswith("git -C '")
    subprocess.run(restore, shell=True, check=True, cwd=tmp_path)
    git(ws, "commit", "-qm", "entry point back")
    assert cli("run", ws, *RUN, "--dry-run", env=ENV).returncode == 0


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
    assert_unchanged(ws, before)


def test_a_deleted_round_0_tag_names_the_command_that_restores_it(ws: Path) -> None:
    """Every command said "not a harnessopt workspace (no ho/round-0 tag)" with no way out (QA):
    the commit init made is found by its subject, and the line names the git tag that restores it."""
    initial = git(ws, "rev-parse", "ho/round-0")
    git(ws, "commit", "-q", "--allow-empty", "-m", "a commit of my own")
    git(ws, "tag", "-d", "ho/round-0")
    before = snapshot(ws)
    for command in (("status",), ("log",), ("run", *RUN)):
        assert_user_error(
            cli(*command, ws, env=ENV), "has lost its ho/round-0 tag", f"tag ho/round-0 {initial[:12]}"
        )
    assert_unchanged(ws, before)
    restore = cli("status", ws).stderr.split("restore it with ", 1)[1].strip()
    subprocess.run(shlex.split(restore), check=True, capture_output=True)
    assert git(ws, "rev-parse", "ho/round-0") == initial and cli("status", ws).returncode == 0


def test_a_moved_or_deleted_round_tag_is_named_with_the_git_tag_that_mends_it(tmp_path: Path) -> None:
    """A round tag moved by hand made ``diff K`` a traceback and ``rollback K`` restore another
    commit as round K; a deleted one made round K vanish, and the next run recorded a second
    round K (QA). Every command names the tag and the git command that mends it; an interrupted
    run's unfinished apply (whose tag the next run writes) is not one of these."""
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)  # the demo's scripted model: its round 1 is accepted
    assert cli("run", ws, *RUN, "--rounds", "1", env=ENV).returncode == 0
    accepted = git(ws, "rev-parse", "ho/round-1")
    git(ws, "tag", "-f", "ho/round-1", "ho/round-0")
    before = snapshot(ws)
    for command in (("diff", "1"), ("rollback", "1"), ("status",), ("run", *RUN)):
        assert_user_error(
            cli(command[0], ws, *command[1:], env=ENV),
            "the tag ho/round-1 points at",
            f"tag -f ho/round-1 {accepted[:12]}",
        )
    assert_unchanged(ws, before)
    git(ws, "tag", "-d", "ho/round-1")
    before = snapshot(ws)
    for command in (("log",), ("run", *RUN)):
        assert_user_error(
            cli(command[0], ws, *command[1:], env=ENV),
            "round 1's tag ho/round-1 is missing",
            f"tag ho/round-1 {accepted[:12]}",
        )
    assert_unchanged(ws, before)
    restore = cli("status", ws).stderr.split("restore it with ", 1)[1].strip()
    subprocess.run(shlex.split(restore), check=True, capture_output=True)
    assert cli("diff", ws, "1").returncode == 0 and git(ws, "rev-parse", "ho/round-1") == accepted
    journal = ws / ".harnessopt" / "journal.jsonl"  # a run killed after main moved, before the tag
    with journal.open("a") as f:
        f.write(json.dumps({"round": 1, "phase": "applying", "commit": accepted, "parent": "x"}) + "\n")
    git(ws, "tag", "-d", "ho/round-1")
    assert cli("status", ws).returncode == 0


def test_a_repository_with_a_config_but_no_harnessopt_history_is_not_a_workspace(ws: Path) -> None:
    git(ws, "tag", "-d", "ho/round-0", "ho/best")
    git(ws, "commit", "-q", "--amend", "-m", "my own message")  # no ref holds the commit init made
    assert_user_error(cli("status", ws), "is not a harnessopt workspace (no ho/round-0 tag)")


def test_a_report_on_a_read_only_workspace_says_to_give_out(ws: Path, tmp_path: Path) -> None:
    """On a read-only mount: "read-only file system (...); the file system is read-only; use a
    writable location", which said it twice and not that --out works there (QA)."""
    if subprocess.run(["mount", "--bind", "-o", "ro", str(ws), str(ws)]).returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        out = cli("report", ws)
        assert_user_error(out, "cannot write the report in", "give --out DIR (or FILE.html)")
        assert out.stderr.count("read-only") == 1
        assert cli("report", ws, "--out", tmp_path / "rep").returncode == 0  # what it says works
    finally:
        subprocess.run(["umount", str(ws)])


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


def test_a_config_that_is_not_utf8(ws: Path) -> None:
    (ws / "harnessopt.yaml").write_bytes(b"objective: task\nmode: \xff\n")
    git(ws, "commit", "-qam", "latin-1")
    before = snapshot(ws)
    for command in (("status",), ("run", "--dry-run"), ("run", *RUN)):
        assert_user_error(
            cli(*command, ws, env=ENV),
            "harnessopt.yaml is not UTF-8 text (invalid start byte at line 2, byte 22)",
            "re-save",
        )  # the line an editor finds it on (a byte offset alone did not say)
    assert_unchanged(ws, before)


def test_a_stored_split_replaced_by_a_directory_says_to_restore_it(ws: Path) -> None:
    """It said "pass the JSONL file itself", though the user passed nothing (QA)."""
    (ws / "tasks" / "val.jsonl").unlink()
    (ws / "tasks" / "val.jsonl").mkdir()
    before = snapshot(ws)
    for command in (("run", "--dry-run"), ("audit",)):
        out = cli(*command, ws, env=ENV)
        assert_user_error(out, "val.jsonl is a directory, not the split's task file", "restore it with git")
        assert "pass the JSONL file" not in out.stderr
    assert_unchanged(ws, before)


def test_a_stored_split_that_is_not_utf8(ws: Path) -> None:
    with (ws / "tasks" / "val.jsonl").open("ab") as f:
        f.write(b"\xff\n")
    git(ws, "commit", "-qam", "a stray byte")
    before = snapshot(ws)
    assert_user_error(cli("run", ws, "--dry-run", env=ENV), "val.jsonl is not UTF-8 text")
    assert_unchanged(ws, before)


def test_state_files_that_are_not_utf8_are_measured_afresh(ws: Path) -> None:
    """The noise floor's and the val cache's files are ours: unreadable ones are a cache miss."""
    state = ws / ".harnessopt"
    state.mkdir(exist_ok=True)
    for name in ("noise_floor.json", "val_cache.json"):
        (state / name).write_bytes(b'{"x": "\xff"}')
    for command in (("status",), ("run", "--dry-run")):
        r = cli(*command, ws, env=ENV)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "break_it, needle",
    [
        (lambda ws: git(ws, "rm", "-q", "skill/SKILL.md"), "SKILL.md is missing on main"),
        (
            lambda ws: (ws / "skill" / "SKILL.md").write_text(
                "---\nname: [unclosed\ndescription: x\n---\nbody\n"
            ),
            "front matter",
        ),
        (lambda ws: (ws / "tasks" / "val.jsonl").write_text(""), "holds 0 val task(s)"),
        (
            lambda ws: (ws / "harness" / "flags.yaml").write_text("flags: [unclosed\n"),
            "flags.yaml is not valid YAML",
        ),
        (
            lambda ws: (ws / "harness" / "flags.yaml").write_bytes(b"flags:\n  - name: caf\xe9\n"),
            "flags.yaml is not UTF-8",
        ),
    ],
    ids=["no SKILL.md", "broken front matter", "no val task", "broken flags.yaml", "flags.yaml not UTF-8"],
)
def test_a_main_that_init_would_refuse_is_refused_before_the_run_spends(
    ws: Path, break_it: object, needle: str
) -> None:
    """A commit on main that breaks what init checked (the skill's SKILL.md, val's smoke tasks) or
    what ablate reads (the harness's flags.yaml) is refused up front, dry run or not: no round is spent and none recorded failed or rejected."""
    break_it(ws)  # type: ignore[operator]
    git(ws, "commit", "-qam", "mine")
    before, refs = snapshot(ws), git(ws, "for-each-ref")
    for command in (("run", "--dry-run"), ("run", *RUN)):
        assert_user_error(cli(*command, ws, env=ENV), needle)
    assert_unchanged(ws, before)
    assert git(ws, "for-each-ref") == refs


def test_counts_past_any_plan_are_refused(ws: Path) -> None:
    """A count that is a typo would exhaust memory before anything ran."""
    assert_user_error(cli("run", ws, "--dry-run", "--rounds", "99999999999"), "--rounds", "at most 10,000")
    assert_user_error(cli("audit", ws, "--epochs", "99999999999"), "--epochs", "at most 100")
    before = snapshot(ws)
    assert_user_error(cli("run", ws, "--dry-run", "-c", "gate.epochs=100000"), "gate.epochs")
    assert_unchanged(ws, before)


@pytest.mark.parametrize(
    "setting, needle",
    [
        ("optimizer.wall_s=inf", "finite number"),
        ("rollout.timeout_s=inf", "finite number"),
        ("optimizer.wall_s=1e300", "less than or equal to 604800"),
        ("budget.max_hours=1e300", "less than or equal to 8784"),
    ],
)
def test_a_time_limit_past_any_clock_is_refused(ws: Path, setting: str, needle: str) -> None:
    """inf or 1e300 seconds passed the check and failed the round mid-run, after its train runs
    were paid for (OverflowError: cannot convert float infinity to integer)."""
    before = snapshot(ws)
    assert_user_error(
        cli("run", ws, *RUN, "--rounds", "1", "-c", setting, env=ENV), setting.split("=")[0], needle
    )
    assert_unchanged(ws, before)


def test_a_file_where_a_folder_belongs(tmp_path: Path, ws: Path) -> None:
    skill, tasks = write_example(tmp_path / "in")
    assert_user_error(cli("log", tasks), "is a file, not a workspace")
    assert_user_error(cli("init", tmp_path / "w", "--skill", tasks, "--tasks", tasks), "is a file")
    before = snapshot(tmp_path / "in")
    assert_user_error(
        cli("init", tasks / "w", "--skill", skill, "--tasks", tasks), "is a file, not a directory"
    )
    assert_user_error(
        cli("init", skill / "w", "--skill", skill, "--tasks", tasks), "inside the skill directory"
    )
    assert_user_error(cli("init", tasks, "--skill", skill, "--tasks", tasks), f"{tasks} is a file;")
    assert snapshot(tmp_path / "in") == before


def test_a_workspace_inside_a_workspace(tmp_path: Path, ws: Path) -> None:
    """A workspace made inside another would be an untracked folder there, which its next run refuses."""
    skill, tasks = write_example(tmp_path / "in")
    before, refs = snapshot(ws), git(ws, "for-each-ref")
    for inner in (ws / "sub", ws / "skill" / "deeper" / "w"):
        assert_user_error(
            cli("init", inner, "--skill", skill, "--tasks", tasks), f"inside the workspace {ws}"
        )
        assert not inner.exists()
    assert_unchanged(ws, before)
    assert git(ws, "for-each-ref") == refs and git(ws, "status", "--porcelain") == ""


def test_a_workspace_that_lost_its_config(tmp_path: Path, ws: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    git(plain, "init", "-q")
    assert_user_error(cli("status", plain), "a git repository without harnessopt.yaml", "harnessopt init")
    (ws / "harnessopt.yaml").unlink()
    assert_user_error(cli("status", ws), "has lost its harnessopt.yaml", "checkout HEAD -- harnessopt.yaml")
    git(ws, "checkout", "HEAD", "--", "harnessopt.yaml")  # what it says works
    assert cli("status", ws).returncode == 0


def test_a_path_too_long(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    long = tmp_path / ("w" * 300)
    assert_user_error(
        cli("init", long, "--skill", skill, "--tasks", tasks), "file name too long", "shorter path"
    )
    assert_user_error(cli("log", long), "file name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([skill.name, tasks.name])


@pytest.mark.parametrize("where", ["detached", "a branch of mine"])
def test_a_head_off_main(ws: Path, where: str) -> None:
    """Main moves by a compare-and-swap of refs/heads/main and a checkout of it: from a detached
    HEAD or another branch that checkout would reset the user's branch to main's commit. The
    commands that move main refuse; those that read work wherever HEAD is."""
    git(ws, "checkout", "-q", *(["--detach", "HEAD"] if where == "detached" else ["-b", "mine"]))
    before, refs = snapshot(ws), git(ws, "for-each-ref")
    for command in (("rollback", "0"), ("run", *RUN), ("approve",)):
        assert_user_error(cli(command[0], ws, *command[1:], env=ENV), "not on main", "checkout main")
    assert_unchanged(ws, before)
    assert git(ws, "for-each-ref") == refs
    for command in (("status",), ("log",), ("run", "--dry-run")):
        r = cli(command[0], ws, *command[1:], env=ENV)
        assert r.returncode == 0, r.stderr
    # the dry run names the run it priced, which would be refused from here: it says what comes first
    said = "detached" if where == "detached" else "on mine"
    assert f"start it with: git -C {ws} checkout main (HEAD is {said}), then harnessopt run" in r.stdout


def test_a_dry_run_with_uncommitted_changes_says_to_commit_them_first(ws: Path) -> None:
    """The dry run said "start it with: harnessopt run WS", which then refused: "has uncommitted
    changes; commit or stash them" (QA). It says what comes first, as status does."""
    skill = ws / "skill" / "SKILL.md"
    skill.write_text(skill.read_text() + "\nmine\n")
    r = cli("run", ws, *RUN, "--dry-run", env=ENV)
    assert r.returncode == 0, r.stderr
    assert "start it with: commit or stash the changes, then harnessopt run" in r.stdout, r.stdout
    assert_user_error(cli("run", ws, *RUN, env=ENV), "has uncommitted changes")
    git(ws, "commit", "-qam", "my edit")
    r = cli("run", ws, *RUN, "--dry-run", env=ENV)
    assert f"start it with: harnessopt run {ws}" in r.stdout, r.stdout


def test_an_empty_model_name(ws: Path) -> None:
    before = snapshot(ws)
    assert_user_error(cli("replay", ws, "--target", "", env=ENV), "model.target")
    assert_user_error(cli("run", ws, "--dry-run", "--target", "", env=ENV), "model.target")
    assert_unchanged(ws, before)


@pytest.mark.parametrize("text", ["", "# all commented out\n", "null\n", "[]\n", "false\n"])
def test_an_empty_config_is_refused_not_read_as_all_defaults(ws: Path, text: str) -> None:
    """An emptied harnessopt.yaml read as every default: status named the hosted default model and
    the dry run priced it at $10.47 a round, for a workspace whose runs used a scripted one (QA)."""
    (ws / "harnessopt.yaml").write_text(text)
    before = snapshot(ws)
    for command in (("status",), ("run", "--dry-run")):
        assert_user_error(
            cli(*command, ws, env=ENV), "harnessopt.yaml holds no settings", "restore it with git"
        )
    assert_unchanged(ws, before)


def test_a_yaml_syntax_error_is_said_with_its_line(ws: Path) -> None:
    """ "is not valid YAML (while parsing a flow sequence)" named no line (QA)."""
    text = (ws / "harnessopt.yaml").read_text()
    broken = text.replace("\ngate:\n", "\ngate: [\n", 1)
    (ws / "harnessopt.yaml").write_text(broken)
    with pytest.raises(yaml.YAMLError) as e:  # where PyYAML found the problem, as the line says it
        yaml.safe_load(broken)
    mark = e.value.problem_mark  # type: ignore[attr-defined]
    out = cli("status", ws)
    assert_user_error(out, "harnessopt.yaml is not valid YAML (expected ',' or ']'", "restore it with git")
    assert f"at line {mark.line + 1}, column {mark.column + 1});" in out.stderr, out.stderr


def test_a_config_key_given_twice(ws: Path) -> None:
    """YAML keeps the last of two values silently; which the user meant is theirs to say."""
    text = (ws / "harnessopt.yaml").read_text()
    assert "\n  concurrency: " in text
    (ws / "harnessopt.yaml").write_text(text + "\nrollout:\n  concurrency: 1\n")
    git(ws, "commit", "-qam", "twice")
    before = snapshot(ws)
    assert_user_error(cli("status", ws), "harnessopt.yaml: rollout is given twice", "keep one")
    assert_unchanged(ws, before)
    (ws / "harnessopt.yaml").write_text(
        text.replace("\n  concurrency: ", "\n  concurrency: 1\n  concurrency: ", 1)
    )
    assert_user_error(cli("run", ws, "--dry-run"), "rollout.concurrency is given twice")


@pytest.mark.parametrize("setting", ["rollout:\n  batch_size: yes\n", "gate:\n  confidence: true\n"])
def test_true_or_false_where_a_number_belongs(ws: Path, setting: str) -> None:
    """Pydantic would take true as 1 (a batch of one task) and false as 0; YAML reads yes and on as true."""
    assert_user_error(
        cli("run", ws, "--dry-run", "-c", "rollout.concurrency=on"), "rollout.concurrency: expected a number"
    )
    (ws / "harnessopt.yaml").write_text(setting)
    git(ws, "commit", "-qam", "a bool")
    before = snapshot(ws)
    assert_user_error(cli("status", ws), "expected a number, got true")
    assert_unchanged(ws, before)


@pytest.mark.parametrize("how", ["the same id", "the same input"])
def test_a_train_task_copied_into_val_after_init(ws: Path, how: str) -> None:
    """init refuses a task in two splits (it leaks answers); a run did not look again, and a round
    whose val held a train task was accepted. Refused, --dry-run too, before anything runs."""
    first = json.loads((ws / "tasks" / "train.jsonl").read_text().splitlines()[0])
    copy = {**first, "split": "val"} if how == "the same id" else {**first, "id": "fresh-id", "split": "val"}
    with (ws / "tasks" / "val.jsonl").open("a") as f:
        f.write(json.dumps(copy) + "\n")
    git(ws, "commit", "-qam", "one more val task")
    before = snapshot(ws)
    needle = "ids must be unique" if how == "the same id" else "a task in two splits leaks answers"
    assert_user_error(cli("run", ws, *RUN, "--dry-run", env=ENV), "train.jsonl:1", needle)
    assert_user_error(cli("run", ws, *RUN, "--rounds", "1", env=ENV), needle)
    assert_unchanged(ws, before)


def test_a_val_line_without_its_split(ws: Path) -> None:
    with (ws / "tasks" / "val.jsonl").open("a") as f:
        f.write(json.dumps({"id": "new1", "input": "Say the word: new", "answer": "new"}) + "\n")
    git(ws, "commit", "-qam", "one more val task")
    assert_user_error(
        cli("run", ws, *RUN, "--dry-run", env=ENV), "task 'new1' has no split", '"split": "val"'
    )


def test_a_skill_with_a_link_to_a_file_outside_it(tmp_path: Path) -> None:
    """init copied what a symbolic link in the skill pointed to: /etc/hostname (or a key) was
    committed into skill/ and shown to the optimizer, without a word. A link inside the skill is
    copied as its file."""
    skill, tasks = write_example(tmp_path)
    (skill / "references").mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("a key\n")
    (skill / "references" / "key.md").symlink_to(secret)
    assert_user_error(
        cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "key.md", "outside the skill"
    )
    assert not (tmp_path / "ws").exists()
    (skill / "references" / "key.md").unlink()
    (skill / "references" / "notes.md").write_text("notes\n")
    (skill / "references" / "same.md").symlink_to(skill / "references" / "notes.md")
    assert cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks).returncode == 0
    assert (tmp_path / "ws" / "skill" / "references" / "same.md").read_text() == "notes\n"


@pytest.mark.parametrize("kind", ["broken link", "link loop", "named pipe"])
def test_a_skill_with_an_entry_init_cannot_copy(tmp_path: Path, kind: str) -> None:
    """A link that leads nowhere or a named pipe in the skill folder: init ended in a traceback
    from its copy (exit 1); one line naming the entry, exit 2, and no workspace."""
    skill, tasks = write_example(tmp_path)
    (skill / "references").mkdir()
    entry = skill / "references" / "odd.md"
    if kind == "broken link":
        entry.symlink_to(skill / "references" / "gone.md")
    elif kind == "link loop":
        entry.symlink_to(entry)
    else:
        os.mkfifo(entry)
    needle = "a named pipe, not a file" if kind == "named pipe" else "leads to no file"
    assert_user_error(cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), "odd.md", needle)
    assert not (tmp_path / "ws").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ws.init")] == []


@pytest.mark.parametrize("setting, needle", [
    (("--sandbox", "local"), "--unsafe-host-optimizer"),  # without it
    (("-c", "model.provider=scripted", "-c", "model.script=missing.yaml"), "missing.yaml does not exist"),
])  # fmt: skip
def test_a_dry_run_refuses_what_the_run_it_prints_would(
    ws: Path, setting: tuple[str, ...], needle: str
) -> None:
    """`run --dry-run` printed "start it with: harnessopt run ..." for a run that then refused to
    start; it refuses as the run does."""
    before = snapshot(ws)
    dry = cli("run", ws, "--rounds", "1", *setting, "--dry-run", env=ENV)
    assert_user_error(dry, needle)
    assert_user_error(cli("run", ws, "--rounds", "1", *setting, env=ENV), needle)
    assert_unchanged(ws, before)


@pytest.mark.parametrize(("limit", "value"), [("--max-tokens", "9000"), ("--max-cost", "0.05")])
def test_a_budget_that_cannot_hold_one_optimizer_call_is_refused_before_anything_runs(
    ws: Path, limit: str, value: str
) -> None:
    """The gateway reserves a call's max_tokens (the built-in optimizer asks 8,192) plus its input:
    a budget below that paid for round 1's rollouts, then failed the round at its first optimizer
    call (exit 3). The run and its dry run refuse it up front."""
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--rounds", "1", limit, value, *dry, env=ENV)
        assert_user_error(
            out, f"budget.{limit[2:].replace('-', '_')}={value} cannot hold one call of the optimizer"
        )
    assert_unchanged(ws, before)


def test_a_budget_that_cannot_hold_one_call_of_a_cli_agent_is_refused_before_anything_runs(
    tmp_path: Path, ws: Path
) -> None:
    """Codex names no max_tokens (the gateway reserves the role's 32,000) and Claude Code asks
    32,000: at --max-cost 0.1 a codex optimizer's round paid its rollouts, then failed with Codex's
    own "Quota exceeded. Check your plan and billing details" (QA); a claude-code target's round
    failed at its first task. Both are refused up front, as the built-in optimizer's is."""
    haiku = ("-c", "optimizer.model=claude-haiku-4-5", "-c", "model.target=claude-haiku-4-5")
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--optimizer", "codex", "--max-cost", "0.1", *haiku, *dry, env=ENV)
        assert_user_error(out, "budget.max_cost=0.1 cannot hold one call of the optimizer (codex)")
    assert_unchanged(ws, before)
    skill, tasks = write_example(tmp_path / "cc")
    cc = tmp_path / "cc-ws"
    assert cli("init", cc, "--skill", skill, "--tasks", tasks, "--template", "claude-code").returncode == 0
    before = snapshot(cc)
    out = cli("run", cc, *RUN, "--max-cost", "0.1", *haiku, "--dry-run", env=ENV)
    assert_user_error(out, "budget.max_cost=0.1 cannot hold one call of the target (claude-code)")
    assert_unchanged(cc, before)


def test_the_template_is_not_changed_from_the_command_line(ws: Path) -> None:
    """-c template=codex on a chat workspace ran the chat harness priced and cache-keyed as codex
    (QA): the template is init's, its files are harness/."""
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--rounds", "1", "-c", "template=codex", *dry, env=ENV)
        assert_user_error(out, "template is set by init")
    assert_unchanged(ws, before)


def test_a_dry_run_refuses_an_empty_optimizer_command_as_the_run_does(ws: Path) -> None:
    """--optimizer command with no optimizer.command: the dry run printed "start it with" for a run
    that then refused it."""
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--rounds", "1", "--optimizer", "command", *dry, env=ENV)
        assert_user_error(out, "optimizer.command is empty")
        assert "start it with" not in out.stdout
    assert_unchanged(ws, before)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            ("--optimizer", "command", "-c", "optimizer.command=[no-such-agent-3f9, exec]"),
            "'no-such-agent-3f9'",
        ),
        (("--optimizer", "codex", "-c", "optimizer.command=[codex, exec]"), "codex builds its own"),
    ],
    ids=["missing-executable", "preset-with-argv"],
)
def test_a_dry_run_refuses_a_command_optimizer_the_run_would_refuse(
    ws: Path, setting: tuple[str, ...], message: str
) -> None:
    """A local run probes the agent's executable on the host and refuses a preset given an argv;
    the dry run said "start it with" for both."""
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--rounds", "1", *setting, *dry, env=ENV)
        assert_user_error(out, message)
        assert "start it with" not in out.stdout
    assert_unchanged(ws, before)


@pytest.mark.parametrize(
    ("setting", "key"),
    [((), "ANTHROPIC_API_KEY"), (("-c", "model.provider=openai"), "OPENAI_API_KEY")],
    ids=["anthropic", "openai"],
)
def test_a_dry_run_without_a_key_says_to_set_it_before_the_run(
    ws: Path, setting: tuple[str, ...], key: str
) -> None:
    """A projection needs no key, so the dry run prices the run; the run it named then refused for
    want of the key. Its "start it with" line now says to set the key first, and the run refuses."""
    dry = cli("run", ws, *RUN, "--rounds", "1", *setting, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"start it with: set {key} in the environment, then harnessopt run" in dry.stdout.splitlines()[-1]
    assert_user_error(cli("run", ws, *RUN, "--rounds", "1", *setting), f"set {key} in the environment")


def test_a_dry_run_refuses_a_scorer_that_does_not_compile(ws: Path) -> None:
    """A syntax error in scorer.py: the dry run printed its projection and "start it with", and the
    run it named refused. Both refuse, naming the line; the scorer is compiled, not run."""
    with (ws / "scorer.py").open("a") as f:
        f.write("\ndef broken(:\n")
    git(ws, "commit", "-qam", "a scorer that does not compile")
    before = snapshot(ws)
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, *RUN, "--rounds", "1", *dry, env=ENV)
        assert_user_error(
            out, "scorer.py does not compile: SyntaxError", "fix scorer.py"
        )  # not "failed to import" (QA)
        assert "start it with" not in out.stdout
    assert_unchanged(ws, before)


def test_a_scorer_with_the_wrong_signature_is_refused_before_any_rollout(ws: Path) -> None:
    """score(task, answer) imported fine, so every answer of round 1 scored 0 with a TypeError and
    the run exited 3 after its rollouts were paid for (QA). The run refuses it before any."""
    (ws / "scorer.py").write_text("def score(task, answer):\n    return 1.0\n")
    git(ws, "commit", "-qam", "a scorer without out_dir")
    before = snapshot(ws)
    out = cli("run", ws, *RUN, "--rounds", "1", env=ENV)
    assert_user_error(out, "score(task, answer) cannot be called as score(task, answer, out_dir)")
    assert not list((ws / "trajectories").glob("round-*"))
    assert_unchanged(ws, before)


@pytest.mark.parametrize("flag", ["--tag", "--base"])
def test_sandbox_build_refuses_a_name_docker_would_refuse(flag: str) -> None:
    """--tag 'bad tag!' was docker's traceback (invalid tag) after the build context was sent."""
    assert_user_error(
        cli("sandbox", "build", flag, "bad tag!"), f"{flag} 'bad tag!' is not a Docker image reference"
    )


def test_an_endpoint_from_the_environment_that_is_no_url_is_one_line(ws: Path) -> None:
    """ANTHROPIC_BASE_URL is no setting the config checks: a port 'abc' was httpx's traceback."""
    before = snapshot(ws)  # the default model (anthropic, no base_url) reads the environment's
    env = {**ENV, "ANTHROPIC_BASE_URL": "http://127.0.0.1:abc"}
    assert_user_error(
        cli("run", ws, *RUN, "--rounds", "1", env=env), "ANTHROPIC_BASE_URL='http://127.0.0.1:abc'"
    )
    assert_unchanged(ws, before)


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        ("openai", "or use another optimizer.provider"),
        ("anthropic", "or use the scripted model (optimizer.provider: scripted)"),
    ],
)
def test_an_optimizer_provider_without_its_key_names_the_optimizers_setting(
    tmp_path: Path, provider: str, said: str
) -> None:
    """The target is scripted; the optimizer's upstream lacks its key: the line named
    model.provider, the target's setting, which was already scripted (QA)."""
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    before = snapshot(ws)
    env = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    r = cli("run", ws, "--rounds", "1", "-c", f"optimizer.provider={provider}", env=env)
    assert_user_error(r, said)
    assert "model.provider" not in r.stderr.replace("optimizer.provider", "")
    assert_unchanged(ws, before)
