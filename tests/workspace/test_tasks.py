"""Task files: parsing errors name the line, splits are deterministic, disjoint and stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.workspace.tasks import (
    assign_splits,
    check_splits,
    input_key,
    load_tasks,
    parse_ratio,
    read_split,
    split_counts,
    write_splits,
)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def make_rows(n: int, **extra: object) -> list[dict[str, object]]:
    return [{"id": f"t{i}", "input": f"question {i}", "answer": str(i), **extra} for i in range(n)]


def test_good_file_parses_all_fields(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "input": "What is 2+2?", "answer": "4", "split": "val", "metadata": {"topic": "math"}},
        {"id": "b", "input": {"question": "x", "choices": [1, 2]}, "answer": None},
    ]
    path = write_jsonl(tmp_path / "tasks.jsonl", [rows[0], "", "   ", rows[1]])
    tasks = load_tasks(path)
    assert [t.id for t in tasks] == ["a", "b"]
    assert tasks[0].split == "val" and tasks[0].metadata == {"topic": "math"}
    assert tasks[1].input == {"question": "x", "choices": [1, 2]} and tasks[1].split == ""
    assert "answer" not in tasks[0].public()


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "got a JSON array: the file is JSON Lines, one task object per line"),
        ('{"input": "q", "answer": "a"}', "has no 'id'"),
        ('{"id": "", "input": "q", "answer": "a"}', "'id' is empty"),
        ('{"id": 7, "input": "q", "answer": "a"}', "'id' must be a string"),
        ('{"id": "a\\nb", "input": "q", "answer": "a"}', "control/space character"),
        ('{"id": "x", "answer": "a"}', "has no 'input'"),
        ('{"id": "x", "input": "q"}', "has no 'answer'"),
        ('{"id": "x", "input": [1], "answer": "a"}', "'input' must be a string or an object"),
        ('{"id": "x", "input": "  ", "answer": "a"}', "'input' of task 'x' is empty"),
        ('{"id": "x", "input": "q", "answer": "a", "split": "dev"}', "'split' must be one of"),
        ('{"id": "x", "input": "q", "answer": "a", "metadata": [1]}', "'metadata' must be an object"),
        ('{"id": "x", "input": "q", "answer": "a", "label": 1}', "unknown key 'label'"),
        # Python's json reads these and writes NaN back into tasks/*.jsonl, which no JSON reader takes;
        # a key given twice kept only its last value, without a word
        ('{"id": "x", "input": "q", "answer": NaN}', "NaN is not a JSON value"),
        ('{"id": "x", "input": "q", "answer": {"n": -Infinity}}', "-Infinity is not a JSON value"),
        ('{"id": "a", "id": "b", "input": "q", "answer": "a"}', "'id' is given twice"),
        ('{"id": "x", "input": {"q": 1, "q": 2}, "answer": "a"}', "'q' is given twice"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "ok", "input": "fine", "answer": "1"}) + "\n\n" + line + "\n")
    with pytest.raises(UserError) as info:
        load_tasks(path)
    message = str(info.value)
    assert f"{path}:3:" in message
    assert needle in message
    assert "\n" not in message


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [*make_rows(3), {"id": "t1", "input": "other", "answer": "x"}])
    with pytest.raises(UserError, match=r"t\.jsonl:4: duplicate task id 't1' \(first on line 2\)"):
        load_tasks(path)


def test_empty_missing_and_non_utf8_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(UserError, match="holds no tasks"):
        load_tasks(empty)
    with pytest.raises(UserError, match="does not exist"):
        load_tasks(tmp_path / "nope.jsonl")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"id": "caf\xe9", "input": "q", "answer": "a"}\n')
    with pytest.raises(UserError, match="not UTF-8"):
        load_tasks(latin)
    with pytest.raises(UserError, match="is a directory; pass the JSONL file itself"):
        load_tasks(tmp_path)


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    """Some Windows editors start a UTF-8 file with a BOM; json.loads refused the first line for it."""
    path = tmp_path / "bom.jsonl"
    path.write_text(
        '{"id": "a", "input": "q", "answer": 1}\n{"id": "b", "input": "r", "answer": 2}\n', "utf-8-sig"
    )
    assert path.read_bytes().startswith(b"\xef\xbb\xbf")
    assert [t.id for t in load_tasks(path)] == ["a", "b"]


def test_parse_ratio() -> None:
    assert parse_ratio("2:1:7") == (2.0, 1.0, 7.0)
    assert parse_ratio(" 0.2:0.1:0.7") == (0.2, 0.1, 0.7)
    for bad, needle in [
        ("2:1", "three parts"),
        ("a:b:c", "three numbers"),
        ("1:-1:3", ">= 0"),
        ("0:0:0", "positive"),
    ]:
        with pytest.raises(UserError, match=needle):
            parse_ratio(bad)
    with pytest.raises(UserError, match="finite"):
        parse_ratio("nan:1:1")


def test_split_counts_largest_remainder() -> None:
    assert split_counts(10, (2, 1, 7)) == (2, 1, 7)
    assert split_counts(100, (0.2, 0.1, 0.7)) == (20, 10, 70)
    assert split_counts(7, (1, 1, 1)) == (2, 3, 2)  # the leftover goes to val first
    assert split_counts(5, (0, 1, 0)) == (0, 5, 0)
    for n in range(0, 40):
        assert sum(split_counts(n, (2, 1, 7))) == n


def test_assign_splits_is_seeded_and_order_independent(tmp_path: Path) -> None:
    rows = make_rows(50)
    tasks = load_tasks(write_jsonl(tmp_path / "a.jsonl", rows))
    reversed_tasks = load_tasks(write_jsonl(tmp_path / "b.jsonl", list(reversed(rows))))
    first = {t.id: t.split for t in assign_splits(tasks, "2:1:7", seed=1)}
    again = {t.id: t.split for t in assign_splits(tasks, "2:1:7", seed=1)}
    flipped = {t.id: t.split for t in assign_splits(reversed_tasks, "2:1:7", seed=1)}
    other_seed = {t.id: t.split for t in assign_splits(tasks, "2:1:7", seed=2)}
    assert first == again == flipped
    assert first != other_seed
    assert sorted(first.values()).count("train") == 10
    assert sorted(first.values()).count("val") == 5
    assert sorted(first.values()).count("test") == 35


def test_assign_keeps_explicit_splits_and_order(tmp_path: Path) -> None:
    rows = make_rows(12)
    rows[0]["split"] = "test"
    rows[5]["split"] = "val"
    tasks = assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)), "1:1:0", seed=0)
    assert [t.id for t in tasks] == [f"t{i}" for i in range(12)]
    assert tasks[0].split == "test" and tasks[5].split == "val"
    rest = [t.split for i, t in enumerate(tasks) if i not in (0, 5)]
    assert rest.count("train") == 5 and rest.count("val") == 5


def test_content_duplicate_across_splits_names_both_lines(tmp_path: Path) -> None:
    rows = make_rows(8, split="val")
    rows.append({"id": "leak", "input": "  QUESTION   3 ", "answer": "3", "split": "train"})
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(UserError) as info:
        check_splits(load_tasks(path))
    message = str(info.value)
    assert f"{path}:9 (train)" in message and f"{path}:4 (val)" in message


def test_content_duplicate_of_objects_and_same_split_allowed(tmp_path: Path) -> None:
    assert input_key({"b": "X  y", "a": [1]}) == input_key({"a": [1], "b": "x y"})
    rows = make_rows(6, split="val")
    rows.append({"id": "again", "input": "question 1", "answer": "1", "split": "val"})
    rows.append({"id": "learn", "input": "a train task", "answer": "x", "split": "train"})
    check_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)))


def test_too_few_val_tasks(tmp_path: Path) -> None:
    tasks = assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", make_rows(10))), "2:1:7", seed=0)
    with pytest.raises(
        UserError, match="need at least 5 val tasks for the smoke test; add tasks or change --split"
    ):
        check_splits(tasks)


def test_unassigned_task_fails_check(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="has no split"):
        check_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", make_rows(3))))


def test_write_and_read_splits_round_trip(tmp_path: Path) -> None:
    rows = make_rows(30)
    rows[0]["metadata"] = {"k": "v"}
    rows[1]["input"] = {"q": "ünïcode"}
    tasks = assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)), "2:1:0", seed=3)
    check_splits(tasks)
    out = tmp_path / "ws" / "tasks"
    paths = write_splits(tasks, out)
    assert sorted(p.name for p in paths.values()) == ["test.jsonl", "train.jsonl", "val.jsonl"]
    assert paths["test"].read_text() == ""
    back = read_split(out, "train") + read_split(out, "val") + read_split(out, "test")
    assert sorted(back, key=lambda t: t.id) == sorted(tasks, key=lambda t: t.id)
    assert json.loads(paths["val"].read_text().splitlines()[0])["answer"] is not None


def test_read_split_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is missing"):
        read_split(tmp_path, "val")
    with pytest.raises(UserError, match="unknown split"):
        read_split(tmp_path, "dev")
    (tmp_path / "val.jsonl").write_text(
        json.dumps({"id": "a", "input": "q", "answer": 1, "split": "train"}) + "\n"
    )
    with pytest.raises(UserError, match=r"val\.jsonl:1: task 'a' is marked 'train', not 'val'"):
        read_split(tmp_path, "val")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        # The order of checks is kept: the id, then a missing key, then the values.
        ('{"id": 7, "answer": "a"}', "'id' must be a string"),
        ('{"id": "x", "input": [1]}', "has no 'answer'"),
        ('{"id": "x", "input": "q", "answer": 1, "split": "dev", "metadata": 3}', "'split' must be one of"),
        ('{"id": "x", "input": "q", "answer": 1, "b": 1, "a": 2}', "unknown key 'a'"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_first_problem_is_the_one_reported(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError, match=needle) as info:
        load_tasks(path)
    assert f"{path}:1:" in str(info.value) and "\n" not in str(info.value)


def test_null_split_and_metadata_mean_left_out(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"id": "a", "input": "q", "answer": None, "split": None, "metadata": None}]
    )
    (task,) = load_tasks(path)
    assert (task.split, task.metadata, task.answer) == ("", {}, None)


def test_tasks_with_one_input_are_split_together(tmp_path: Path) -> None:
    """Three tasks with the same input and no split: init's own split put them in two splits and
    then refused that as a leak, which no --split or --seed could fix (QA)."""
    rows = make_rows(30)
    for row in rows[:3]:
        row["input"] = "same question"
    rows[3]["input"], rows[3]["split"] = "Same  QUESTION", "test"  # one given its split: the rest follow
    for seed in range(5):
        tasks = assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)), "10:10:10", seed=seed)
        assert {t.split for t in tasks[:4]} == {"test"}
        check_splits(tasks, min_val=0)  # no leak
    rows[3] = make_rows(4)[3]
    splits = {
        assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)), "10:10:10", seed=s)[0].split
        for s in range(20)
    }
    for seed in range(20):
        tasks = assign_splits(load_tasks(write_jsonl(tmp_path / "t.jsonl", rows)), "10:10:10", seed=seed)
        assert len({t.split for t in tasks[:3]}) == 1
    assert len(splits) > 1  # where they go still depends on the seed
