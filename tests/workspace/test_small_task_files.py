"""A dozen or two examples is where users start: ``init`` gives the smoke test its val tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import SKILL_MD, cli


def _files(tmp_path: Path, n: int) -> tuple[Path, Path]:
    skill = tmp_path / "echo-word"
    skill.mkdir()
    (skill / "SKILL.md").write_text(SKILL_MD)
    tasks = tmp_path / "tasks.jsonl"
    rows = [{"id": f"t{i}", "input": f"Say the word: w{i}", "answer": f"w{i}"} for i in range(n)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return skill, tasks


@pytest.mark.parametrize(
    ("n", "counts"), [(12, "4 train / 5 val / 3 test"), (30, "10 train / 10 val / 10 test")]
)
def test_init_picks_a_split_that_gives_the_smoke_test_its_tasks(tmp_path: Path, n: int, counts: str) -> None:
    skill, tasks = _files(tmp_path, n)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks)
    assert out.returncode == 0, out.stderr
    assert "the default split 2:1:7 leaves val too few for the smoke test" in out.stdout
    assert counts in out.stdout
    # says plainly what that val size can detect
    assert "too small to detect a realistic gain" in out.stdout or "the gate detects a gain of" in out.stdout
    assert len((tmp_path / "ws" / "tasks" / "val.jsonl").read_text().splitlines()) >= 5


def test_an_explicit_split_that_fails_names_one_that_works(tmp_path: Path) -> None:
    skill, tasks = _files(tmp_path, 12)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--split", "2:1:7")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "e.g. --split 4:5:3" in out.stderr
    assert not (tmp_path / "ws").exists()
    again = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--split", "4:5:3")
    assert again.returncode == 0, again.stderr


def test_a_large_file_keeps_the_default_split(tmp_path: Path) -> None:
    skill, tasks = _files(tmp_path, 50)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks)
    assert out.returncode == 0, out.stderr
    assert "10 train / 5 val / 35 test" in out.stdout and "leaves val too few" not in out.stdout


def test_a_split_without_train_is_refused(tmp_path: Path) -> None:
    skill, tasks = _files(tmp_path, 30)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--split", "0:1:1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no train tasks" in out.stderr and "e.g. --split 10:10:10" in out.stderr
    assert not (tmp_path / "ws").exists()


def test_a_split_without_test_says_audit_has_nothing(tmp_path: Path) -> None:
    skill, tasks = _files(tmp_path, 30)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--split", "1:1:0")
    assert out.returncode == 0, out.stderr
    assert "no test tasks: `harnessopt audit`" in out.stdout


def test_a_default_split_whose_val_detects_nothing_names_one_that_does(tmp_path: Path) -> None:
    """60 tasks: 2:1:7 gives val 6, less than 30 tasks get; init names the split that gives val a third."""
    skill, tasks = _files(tmp_path, 60)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks)
    assert out.returncode == 0, out.stderr
    assert "12 train / 6 val / 42 test" in out.stdout and "too small to detect a realistic gain" in out.stdout
    assert "--split 20:20:20 would give val 20 tasks, which detect about +0." in out.stdout
    again = cli("init", tmp_path / "ws2", "--skill", skill, "--tasks", tasks, "--split", "20:20:20")
    assert again.returncode == 0 and "too small to detect a realistic gain" not in again.stdout
    assert "would give val" not in again.stdout  # the user chose the split: nothing to suggest


def test_a_file_that_splits_every_task_is_not_told_to_change_split(tmp_path: Path) -> None:
    """--split assigns only the tasks without a split: where every line has one, the error said
    "change --split", which changes nothing."""
    import json

    from harnessopt.errors import UserError
    from harnessopt.workspace.core import init_workspace
    from tests.support.cli import write_example

    skill, _ = write_example(tmp_path)
    tasks = tmp_path / "split.jsonl"
    rows = [
        {"id": f"t{i}", "input": f"q{i}", "answer": "a", "split": "val" if i < 3 else "train"}
        for i in range(12)
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for ratio in (None, "1:5:1"):
        with pytest.raises(
            UserError, match=r"only 3 val task\(s\).*--split changes nothing: add val tasks"
        ) as e:
            init_workspace(
                tmp_path / f"ws{ratio is None}", skill, tasks, ratio=ratio, announce=lambda _m: None
            )
        assert "change --split" not in str(e.value)


def test_a_refusal_after_the_split_is_chosen_is_the_one_line_said(tmp_path: Path) -> None:
    """The split chosen for a small file was said before a refusal found later (then: two tasks
    with the same input in two splits; now that they share one: too few distinct inputs for val):
    the note is said only for a workspace that was made."""
    skill, tasks = _files(tmp_path, 30)
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    for r in rows:
        r["input"] = "Say the word: same"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks)
    assert out.returncode == 2 and "1 distinct input(s)" in out.stderr and len(out.stderr.splitlines()) == 1
    assert out.stdout == "" and not (tmp_path / "ws").exists()


def test_five_tasks_are_told_to_add_tasks_not_to_change_the_split(tmp_path: Path) -> None:
    """No --split of 5 tasks gives val 5 and train 1; the line said "or change --split" (QA)."""
    skill, tasks = _files(tmp_path, 5)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks)
    assert out.returncode == 2 and "add tasks: no --split of 5 gives val 5 and train 1" in out.stderr
    assert "change --split" not in out.stderr and not (tmp_path / "ws").exists()


def test_tasks_from_a_pipe_are_read_once(tmp_path: Path) -> None:
    """``--tasks <(...)``: init read the file twice where the default split left val too few, and
    the second read of the pipe found nothing ("holds no tasks") after the workspace was made (QA)."""
    import subprocess
    import sys

    skill, tasks = _files(tmp_path, 60)
    ws = tmp_path / "ws"
    script = f'"{sys.executable}" -m harnessopt init "{ws}" --skill "{skill}" --tasks <(cat "{tasks}")'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "holds no tasks" not in out.stderr, out.stderr
    assert "--split" in out.stdout and "next: harnessopt run" in out.stdout
    # --tasks - reads standard input ("task file - does not exist", QA)
    piped = subprocess.run(
        [sys.executable, "-m", "harnessopt", "init", tmp_path / "ws2", "--skill", skill, "--tasks", "-"],
        input=tasks.read_text(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert (tmp_path / "ws2" / "tasks" / "val.jsonl").read_text() == (ws / "tasks" / "val.jsonl").read_text()


@pytest.mark.parametrize("seed", ["5", "2"])
def test_a_split_for_a_file_with_a_repeated_input_works_as_named(tmp_path: Path, seed: str) -> None:
    """Twelve tasks and a thirteenth with the first one's input: same-input tasks stay together,
    which left val a task short of the split's count. init refused and named as the fix the split it
    had just used (seed 5), or named a split and made other counts without a word (seed 2) (QA)."""
    skill, tasks = _files(tmp_path, 12)
    with tasks.open("a") as f:
        f.write(json.dumps({"id": "again", "input": "Say the word: w0", "answer": "w0"}) + "\n")
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--seed", seed)
    assert out.returncode == 0, out.stderr
    named = out.stdout.split("uses --split ")[1].split()[0]
    made = out.stdout.split("template chat, ")[1].split(" tasks;")[0]  # "5 train / 5 val / 3 test"
    if "stay together, so it made" in out.stdout:
        named = out.stdout.split("so it made ")[1].split()[0]
    assert made == " / ".join(
        f"{c} {s}" for c, s in zip(named.split(":"), ("train", "val", "test"), strict=True)
    )
    assert int(made.split(" / ")[1].split()[0]) >= 5  # the smoke test's val tasks


def test_split_flags_that_cannot_apply_are_said(tmp_path: Path) -> None:
    """--split with every task's split given in the file changed nothing, silently; one whose parts
    sum past a float was a traceback (QA)."""
    skill, tasks = _files(tmp_path, 30)
    rows = [
        json.loads(x) | {"split": ("train", "val", "test")[i % 3]}
        for i, x in enumerate(tasks.read_text().splitlines())
    ]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--split", "1:1:1")
    assert (
        out.returncode == 0
        and 'every task has its "split" in the file: --split 1:1:1 changed nothing' in out.stdout
    )
    from tests.support.cli_errors import assert_user_error

    huge = cli("init", tmp_path / "ws2", "--skill", skill, "--tasks", tasks, "--split", "1e308:1e308:1")
    assert_user_error(huge, "the parts are too large")
    assert not (tmp_path / "ws2").exists()
