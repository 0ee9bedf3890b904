"""Task files: parse the user's JSONL, assign and check train/val/test splits, store them.

A task line is ``{"id": str, "input": str | object, "answer": any, "split"?: "train"|"val"|"test",
"metadata"?: object}``, validated by the pydantic model ``TaskLine``. Every problem is a
``UserError`` that names the file and line, because the user fixes task files with an editor,
line by line.

``Task`` is frozen and has no line field, so where a task came from (``file:line``) is kept in a
side table keyed by object identity (entries vanish with their task), and carried over when
``assign_splits`` makes a new ``Task``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import unicodedata
import weakref
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from harnessopt.errors import UserError, not_utf8
from harnessopt.protocols import Task

SPLITS = ("train", "val", "test")
KNOWN_KEYS = ("id", "input", "answer", "split", "metadata")
MIN_VAL_TASKS = 5  # the smoke test runs 5 val tasks before spending the rest
DEFAULT_SPLIT = "2:1:7"  # train:val:test of a task file large enough to give val MIN_VAL_TASKS
UNASSIGNED = ""  # Task.split of a line without "split" until assign_splits runs
MAX_ID_CHARS = 200

_ORIGIN: dict[int, str] = {}  # id(task) -> "file:line"


def origin(task: Task) -> str:
    """Where ``task`` was read from (``path:line``), or ``task 'id'`` when not known."""
    return _ORIGIN.get(id(task), f"task {task.id!r}")


def _remember(task: Task, where: str) -> Task:
    _ORIGIN[id(task)] = where
    weakref.finalize(task, _ORIGIN.pop, id(task), None)
    return task


# --------------------------------------------------------------------------- loading


MAX_LINE_CHARS = 2_000_000  # a task must fit in one model request through the gateway (4 MiB)


def load_tasks(path: Path, *, empty_ok: bool = False) -> list[Task]:
    """Parse a JSONL task file. Blank lines are skipped; ``"split": null`` counts as no split.
    A file with no task is an error unless ``empty_ok`` (a stored split may be empty)."""
    if Path(path).is_dir():
        raise UserError(f"task file {path} is a directory; pass the JSONL file itself")
    try:
        if str(path) == "-":  # --tasks -: standard input, as the shell's <(...) and /dev/stdin give
            text = sys.stdin.buffer.read().decode("utf-8-sig")
        else:
            text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark some editors write: dropped
    except FileNotFoundError:
        raise UserError(f"task file {path} does not exist; pass an existing JSONL file") from None
    except UnicodeDecodeError as e:
        raise UserError(not_utf8(path, e)) from None
    except OSError as e:
        raise UserError(f"cannot read task file {path}: {e.strerror}") from e
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        if len(line) > MAX_LINE_CHARS:  # the gateway would refuse the harness's request anyway
            raise UserError(
                f"{where}: this task is {len(line) / 1e6:.1f} MB; a task line may hold at most "
                f"{MAX_LINE_CHARS // 1_000_000} MB (keep large inputs in files the harness reads)"
            )
        task = _remember(_parse_line(line, where), where)
        if task.id in first_line:
            raise UserError(
                f"{where}: duplicate task id {task.id!r} (first on line {first_line[task.id]}); ids must be unique"
            )
        first_line[task.id] = lineno
        tasks.append(task)
    if not tasks and not empty_ok:
        raise UserError(f"{path} holds no tasks; add one JSON object per line")
    _one_trigger_shape(tasks, path, first_line)
    return tasks


def _one_trigger_shape(tasks: Sequence[Task], path: Path, line_of: dict[str, int]) -> None:
    """In a file of trigger tasks (answer exactly ``{"trigger": true|false}``), an answer holding
    a true or false ``trigger`` beside other keys is a typo, not a task objective's answer: it made
    the task a task-objective one, silently (QA). A file of no trigger task may hold any answer."""
    if not any(isinstance(t.answer, dict) and set(t.answer) == {"trigger"} for t in tasks):
        return
    for t in tasks:
        a = t.answer
        if a == {}:  # the label left out: it made the task a task-objective one, and init spoke of val (QA)
            raise UserError(
                f"{path}:{line_of[t.id]}: task {t.id!r}: the answer {{}} has no label; a trigger task's answer "
                'is {"trigger": true} (the skill should load) or {"trigger": false}'
            )
        if isinstance(a, dict) and isinstance(a.get("trigger"), bool) and set(a) != {"trigger"}:
            others = ", ".join(sorted(repr(k) for k in set(a) - {"trigger"}))
            raise UserError(
                f"{path}:{line_of[t.id]}: task {t.id!r}: a trigger task's answer is exactly "
                f'{{"trigger": true}} or {{"trigger": false}}; remove {others}'
            )


def _fail(message: str) -> NoReturn:
    raise PydanticCustomError("task_line", message)


class TaskLine(BaseModel):
    """One line of a task file as the user writes it; ``to_task`` gives the ``Task`` the code uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """Unique, non-empty, at most 200 characters, no control or line-break characters."""
    input: str | dict[str, Any]
    """What the harness sees: a non-empty string or a JSON object."""
    answer: Any
    """The gold answer, for the scorer only (any JSON value, null included)."""
    split: Literal["train", "val", "test"] | None = None
    """Fixed split; left out (or null), ``assign_splits`` picks one."""
    metadata: dict[str, Any] | None = None
    """Free-form extra fields, shown to the harness."""

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: Any) -> Any:
        if value is None:
            _fail("task has no 'id'; give every task a unique string id")
        if not isinstance(value, str):
            _fail(f"'id' must be a string, got {_json_type(value)} {value!r}")
        if not value.strip():
            _fail("'id' is empty; give every task a unique non-empty id")
        if len(value) > MAX_ID_CHARS:
            _fail(f"'id' is {len(value)} characters long; keep ids under {MAX_ID_CHARS}")
        # Ids become file names and front-matter lines: no line breaks, tabs or other control characters.
        bad = next((c for c in value if c != " " and unicodedata.category(c)[0] in "CZ"), None)
        if bad is not None:
            _fail(f"'id' {value!r} contains the control/space character {bad!r}; remove it")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str | dict):
            _fail(f"'input' must be a string or an object, got {_json_type(value)}")
        if isinstance(value, str) and not value.strip():
            _fail(f"'input' of task {info.data.get('id')!r} is empty")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer(cls, value: Any, info: ValidationInfo) -> Any:
        # {"trigger": "yes"} read as a task objective's answer made the file a mix of objectives
        # (objective both), one of them with the tasks' val too small to judge
        if isinstance(value, dict) and set(value) == {"trigger"} and not isinstance(value["trigger"], bool):
            _fail(
                f'task {info.data.get("id")!r}: a trigger task\'s answer is {{"trigger": true}} or '
                f'{{"trigger": false}}, got {{"trigger": {json.dumps(value["trigger"])}}}'
            )
        return value

    @field_validator("split", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if value is not None and value not in SPLITS:
            _fail(f"'split' must be one of train, val, test (or left out), got {value!r}")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            _fail(f"'metadata' must be an object, got {_json_type(value)}")
        return value

    def to_task(self) -> Task:
        """The frozen ``Task``; a line without a split gets ``UNASSIGNED``."""
        return Task(
            id=self.id,
            input=self.input,
            answer=self.answer,
            split=self.split or UNASSIGNED,
            metadata=self.metadata or {},
        )


class _NotJson(ValueError):
    """What Python's json reads and JSON is not: NaN or Infinity, or a key given twice."""


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value; write a number, a string or null")


def _no_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _NotJson(f"{key!r} is given twice (only the last would count); keep one")
        seen[key] = value
    return seen


def _parse_line(line: str, where: str) -> Task:
    try:
        raw = json.loads(line, parse_constant=_no_constant, object_pairs_hook=_no_twice)
    except _NotJson as e:
        raise UserError(f"{where}: not valid JSON: {e}") from None
    except json.JSONDecodeError as e:
        raise UserError(
            f"{where}: not valid JSON ({e.msg} at column {e.colno}); one JSON object per line"
        ) from e
    except RecursionError as e:
        raise UserError(f"{where}: not valid JSON (nested too deeply); one JSON object per line") from e
    if not isinstance(raw, dict):
        kind = (
            "a JSON array: the file is JSON Lines, one task object per line"
            if isinstance(raw, list)
            else type(raw).__name__
        )
        raise UserError(f"{where}: a task must be a JSON object, got {kind}")
    try:
        return TaskLine.model_validate(raw).to_task()
    except ValidationError as e:
        raise UserError(f"{where}: {_first_problem(e, raw)}") from e


def _first_problem(e: ValidationError, raw: dict[str, Any]) -> str:
    """One sentence for the first problem: an unknown key first, then fields in line order."""
    errors = e.errors()
    unknown = sorted(str(err["loc"][0]) for err in errors if err["type"] == "extra_forbidden")
    if unknown:
        return (
            f"unknown key {unknown[0]!r}; allowed keys are {', '.join(KNOWN_KEYS)} "
            "(put extra fields under 'metadata')"
        )
    # The id first (other messages name it), then a missing 'input' or 'answer', then the rest.
    err = min(errors, key=lambda x: 0 if x["loc"][:1] == ("id",) else 1 if x["type"] == "missing" else 2)
    field_name = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "missing" and field_name == "id":
        return "task has no 'id'; give every task a unique string id"
    if err["type"] == "missing":
        return f"task {raw.get('id')!r} has no {field_name!r}; every task needs 'input' and 'answer'"
    if err["type"] == "task_line":
        return str(err["msg"])
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}; fix the line (see docs/workspace.md)"


def _json_type(value: Any) -> str:
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


# --------------------------------------------------------------------------- splits


def parse_ratio(text: str) -> tuple[float, float, float]:
    """Parse ``--split`` ``"train:val:test"``, e.g. ``"2:1:7"`` or ``"0.2:0.1:0.7"``."""
    parts = str(text).split(":")
    if len(parts) != 3:
        raise UserError(f"--split {text!r} must have three parts train:val:test, for example 2:1:7")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise UserError(
            f"--split {text!r} must be three numbers separated by ':', for example 2:1:7"
        ) from None
    if any(v != v or v < 0 or v == float("inf") for v in values):
        raise UserError(f"--split {text!r}: each part must be a finite number >= 0")
    if sum(values) <= 0:
        raise UserError(f"--split {text!r}: at least one part must be positive")
    if sum(values) == float("inf"):  # each finite, their sum not: shares would be nan
        raise UserError(f"--split {text!r}: the parts are too large; give them as small numbers, e.g. 2:1:7")
    return values[0], values[1], values[2]


def split_counts(n: int, ratio: Sequence[float]) -> tuple[int, int, int]:
    """How many of ``n`` tasks each split gets: largest-remainder rounding of ``n * share``.

    Each split first gets ``floor(n * share)``; the tasks left over go one each to the splits with
    the largest fractional remainders, ties broken in the order val, test, train (so a small file
    keeps val non-empty when the ratio asks for any val at all).
    """
    total = sum(ratio)
    exact = [n * r / total for r in ratio]
    counts = [int(x) for x in exact]
    tie_rank = {1: 0, 2: 1, 0: 2}
    order = sorted(range(3), key=lambda i: (-(exact[i] - counts[i]), tie_rank[i]))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts[0], counts[1], counts[2]


def assign_splits(tasks: Sequence[Task], ratio: str | Sequence[float], seed: int) -> list[Task]:
    """Give every task without a split one; tasks that have a split keep it. Order is preserved.

    Deterministic in (ids, inputs, ratio, seed) only, independent of line order: unassigned tasks
    are ordered by ``sha256(f"{seed}:{id}")`` and cut into train/val/test by ``split_counts``;
    then tasks with the same input (``input_key``) all go where the first of them is (one given
    its split in the file, else the first in that order): a split of harnessopt's own never puts
    one input in two splits, which ``check_splits`` refuses as a leak.
    """
    shares = parse_ratio(ratio) if isinstance(ratio, str) else tuple(ratio)
    todo = [t for t in tasks if t.split == UNASSIGNED]
    order = sorted(todo, key=lambda t: hashlib.sha256(f"{seed}:{t.id}".encode()).hexdigest())
    n_train, n_val, _ = split_counts(len(order), shares)
    chosen: dict[str, str] = {}
    where = {input_key(t.input): t.split for t in tasks if t.split != UNASSIGNED}
    for rank, task in enumerate(order):
        cut = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
        chosen[task.id] = where.setdefault(input_key(task.input), cut)
    out = []
    for task in tasks:
        if task.split != UNASSIGNED:
            out.append(task)
            continue
        out.append(_remember(dataclasses.replace(task, split=chosen[task.id]), origin(task)))
    return out


def input_key(value: Any) -> str:
    """Canonical form of a task input for leak checks: sorted-key JSON, strings case- and
    whitespace-normalized (so "What is 2+2?" and "what is  2+2? " are the same input)."""
    return json.dumps(_normalize(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, dict):
        return {_normalize(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def default_gives_val(tasks: Sequence[Task], min_val: int = MIN_VAL_TASKS) -> bool:
    """Whether ``DEFAULT_SPLIT`` gives val the ``min_val`` tasks the smoke test runs."""
    n = sum(t.split == UNASSIGNED for t in tasks)
    return sum(t.split == "val" for t in tasks) + split_counts(n, parse_ratio(DEFAULT_SPLIT))[1] >= min_val


def small_file_split(tasks: Sequence[Task], seed: int, min_val: int = MIN_VAL_TASKS) -> str | None:
    """A train:val:test split (as counts) of the tasks without a split that gives val at least
    ``min_val`` tasks, for files too small for ``DEFAULT_SPLIT``; None when no split can.

    Val takes a third of the tasks (at least what ``min_val`` still needs, so the smoke test has its
    tasks), train half of the rest (rounded up: the optimizer reads train), test what is left:
    12 tasks give 4:5:3, 30 give 10:10:10. Tasks with one input stay together (``assign_splits``,
    at this ``seed``), which can leave val short of its count: val then asks for more until the
    split made has what it needs (the hint named a split that failed as it had).
    """
    return first_split(tasks, seed, lambda val: len(val) >= min_val, min_val)


def first_split(
    tasks: Sequence[Task], seed: int, enough: Callable[[list[Task]], bool], min_val: int
) -> str | None:
    """The first train:val:test split, val growing from a third of the unassigned tasks, whose val
    (as ``assign_splits`` makes it at ``seed``) is ``enough`` and whose train is not empty."""
    n = sum(t.split == UNASSIGNED for t in tasks)
    have_val = sum(t.split == "val" for t in tasks)
    for val in range(max(min_val - have_val, -(-n // 3)), n):  # n: no task left for train
        train = -(-(n - val) // 2)
        ratio = f"{train}:{val}:{n - val - train}"
        made = assign_splits(tasks, parse_ratio(ratio), seed)
        if enough([t for t in made if t.split == "val"]) and any(t.split == "train" for t in made):
            return ratio
    return None


def check_splits(
    tasks: Sequence[Task],
    min_val: int = MIN_VAL_TASKS,
    suggest: str | None = None,
    ratio_applies: bool = True,
) -> None:
    """Splits must be assigned, disjoint by id and by input content, and val must be big enough
    (else the error names ``suggest``, a --split that works; or, where every task came with its
    split and ``ratio_applies`` is false, says that --split changes nothing)."""
    by_id: dict[str, Task] = {}
    by_input: dict[str, Task] = {}
    for task in tasks:
        if task.split not in SPLITS:
            raise UserError(f"{origin(task)}: task {task.id!r} has no split; run assign_splits first")
        same_id = by_id.get(task.id)
        if same_id is not None:
            raise UserError(
                f"{origin(task)} ({task.split}): task id {task.id!r} also at {origin(same_id)} "
                f"({same_id.split}); ids must be unique"
            )
        by_id[task.id] = task
        key = input_key(task.input)
        first = by_input.get(key)
        if first is not None and first.split != task.split:
            raise UserError(
                f"{origin(task)} ({task.split}): same input as {origin(first)} ({first.split}); "
                "a task in two splits leaks answers: remove one or put both in the same split"
            )
        by_input.setdefault(key, task)
    n_val = sum(1 for t in tasks if t.split == "val")
    works = f", e.g. --split {suggest}" if suggest else ""
    if not any(t.split == "train" for t in tasks):
        how = (
            f"change --split so that train gets tasks{works}, or"
            if ratio_applies
            else "every task has its split:"
        )
        raise UserError(
            f'no train tasks: the optimizer learns from the runs on train; {how} mark some "split": "train"'
        )
    if n_val < min_val and ratio_applies and len(by_input) < len(tasks) and len(by_input) <= min_val:
        raise UserError(
            f"only {n_val} val task(s); need at least {min_val} val tasks for the smoke test, and the "
            f"{len(tasks)} tasks have {len(by_input)} distinct input(s), each in one split: add tasks "
            "with other inputs"
        )
    if n_val < min_val:
        how = (
            (
                f"add tasks or change --split{works}"
                if len(tasks) > min_val  # else no split gives val its tasks and train one
                else f"add tasks: no --split of {len(tasks)} gives val {min_val} and train 1"
            )
            if ratio_applies
            else (
                'every task has its split, so --split changes nothing: add val tasks or mark more "split": "val"'
            )
        )
        raise UserError(
            f"only {n_val} val task(s); need at least {min_val} val tasks for the smoke test; {how}"
        )


# --------------------------------------------------------------------------- storage


def task_record(task: Task) -> dict[str, Any]:
    """The full JSON record of a task, answer included (host side only)."""
    record: dict[str, Any] = {"id": task.id, "input": task.input, "answer": task.answer, "split": task.split}
    if task.metadata:
        record["metadata"] = task.metadata
    return record


def write_splits(tasks: Iterable[Task], tasks_dir: Path) -> dict[str, Path]:
    """Write ``train.jsonl``, ``val.jsonl`` and ``test.jsonl`` (every split, even when empty)."""
    tasks_dir = Path(tasks_dir)
    tasks_dir.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {s: [] for s in SPLITS}
    for task in tasks:
        if task.split not in SPLITS:
            raise UserError(f"{origin(task)}: task {task.id!r} has no split; run assign_splits first")
        lines[task.split].append(json.dumps(task_record(task), ensure_ascii=False))
    paths = {}
    for split in SPLITS:
        paths[split] = tasks_dir / f"{split}.jsonl"
        paths[split].write_text("".join(line + "\n" for line in lines[split]), encoding="utf-8")
    return paths


def read_split(tasks_dir: Path, split: str) -> list[Task]:
    """Read one stored split back; an empty split is an empty list, a missing file an error."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    path = Path(tasks_dir) / f"{split}.jsonl"
    if not path.exists():
        raise UserError(f"{path} is missing; the workspace tasks are incomplete (restore them with git)")
    if path.is_dir():  # the workspace's own file: no "pass the JSONL file itself" (nothing was passed, QA)
        raise UserError(f"{path} is a directory, not the split's task file; restore it with git")
    tasks = load_tasks(path, empty_ok=True)
    for task in tasks:
        if task.split == UNASSIGNED:
            raise UserError(
                f'{origin(task)}: task {task.id!r} has no split; add "split": "{split}" to its line'
            )
        if task.split != split:
            raise UserError(
                f"{origin(task)}: task {task.id!r} is marked {task.split!r}, not {split!r}; move it to "
                f"tasks/{task.split}.jsonl or mark it {split!r}"
            )
    return tasks
