"""Task files: parse the user's JSONL, assign and check train/val/test splits, store them.

A task line is ``{"id": str, "input": str | object, "answer": any, "split"?: "train"|"val"|"test",
"metadata"?: object}``. Every problem is a ``UserError`` that names the file and line, because
the user fixes task files with an editor, line by line.

``Task`` is frozen and has no line field, so where a task came from (``file:line``) is kept in a
side table keyed by object identity (entries vanish with their task), and carried over when
``assign_splits`` makes a new ``Task``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import unicodedata
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.protocols import Task

SPLITS = ("train", "val", "test")
KNOWN_KEYS = ("id", "input", "answer", "split", "metadata")
MIN_VAL_TASKS = 5  # the smoke test runs 5 val tasks before spending the rest
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


def load_tasks(path: Path) -> list[Task]:
    """Parse a JSONL task file. Blank lines are skipped; ``"split": null`` counts as no split."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"task file {path} does not exist; pass an existing JSONL file") from None
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text ({e.reason} at byte {e.start}); re-save it as UTF-8"
        ) from e
    except OSError as e:
        raise UserError(f"cannot read task file {path}: {e.strerror}") from e
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        task = _remember(_parse_line(line, where), where)
        if task.id in first_line:
            raise UserError(
                f"{where}: duplicate task id {task.id!r} (first on line {first_line[task.id]}); ids must be unique"
            )
        first_line[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise UserError(f"{path} holds no tasks; add one JSON object per line")
    return tasks


def _parse_line(line: str, where: str) -> Task:
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(
            f"{where}: not valid JSON ({e.msg} at column {e.colno}); one JSON object per line"
        ) from e
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a task must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(k for k in raw if k not in KNOWN_KEYS)
    if unknown:
        raise UserError(
            f"{where}: unknown key {unknown[0]!r}; allowed keys are {', '.join(KNOWN_KEYS)} "
            "(put extra fields under 'metadata')"
        )
    task_id = _check_id(raw.get("id"), where)
    for key in ("input", "answer"):
        if key not in raw:
            raise UserError(
                f"{where}: task {task_id!r} has no {key!r}; every task needs 'input' and 'answer'"
            )
    task_input = raw["input"]
    if not isinstance(task_input, str | dict):
        raise UserError(f"{where}: 'input' must be a string or an object, got {_json_type(task_input)}")
    if isinstance(task_input, str) and not task_input.strip():
        raise UserError(f"{where}: 'input' of task {task_id!r} is empty")
    split = raw.get("split")
    if split is not None and split not in SPLITS:
        raise UserError(f"{where}: 'split' must be one of train, val, test (or left out), got {split!r}")
    metadata = raw.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise UserError(f"{where}: 'metadata' must be an object, got {_json_type(metadata)}")
    return Task(
        id=task_id, input=task_input, answer=raw["answer"], split=split or UNASSIGNED, metadata=metadata
    )


def _check_id(value: Any, where: str) -> str:
    if value is None:
        raise UserError(f"{where}: task has no 'id'; give every task a unique string id")
    if not isinstance(value, str):
        raise UserError(f"{where}: 'id' must be a string, got {_json_type(value)} {value!r}")
    if not value.strip():
        raise UserError(f"{where}: 'id' is empty; give every task a unique non-empty id")
    if len(value) > MAX_ID_CHARS:
        raise UserError(f"{where}: 'id' is {len(value)} characters long; keep ids under {MAX_ID_CHARS}")
    # Ids become file names and front-matter lines: no line breaks, tabs or other control characters.
    bad = next((c for c in value if c != " " and unicodedata.category(c)[0] in "CZ"), None)
    if bad is not None:
        raise UserError(f"{where}: 'id' {value!r} contains the control/space character {bad!r}; remove it")
    return value


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

    Deterministic in (ids, ratio, seed) only, independent of line order: unassigned tasks are
    ordered by ``sha256(f"{seed}:{id}")`` and cut into train/val/test by ``split_counts``.
    """
    shares = parse_ratio(ratio) if isinstance(ratio, str) else tuple(ratio)
    todo = [t for t in tasks if t.split == UNASSIGNED]
    order = sorted(todo, key=lambda t: hashlib.sha256(f"{seed}:{t.id}".encode()).hexdigest())
    n_train, n_val, _ = split_counts(len(order), shares)
    chosen: dict[str, str] = {}
    for rank, task in enumerate(order):
        chosen[task.id] = "train" if rank < n_train else "val" if rank < n_train + n_val else "test"
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


def check_splits(tasks: Sequence[Task], min_val: int = MIN_VAL_TASKS) -> None:
    """Splits must be assigned, disjoint by id and by input content, and val must be big enough."""
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
    if n_val < min_val:
        raise UserError(
            f"only {n_val} val task(s); need at least {min_val} val tasks for the smoke test; "
            "add tasks or change --split"
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
    if not path.read_text(encoding="utf-8").strip():
        return []
    tasks = load_tasks(path)
    for task in tasks:
        if task.split != split:
            raise UserError(
                f"{origin(task)}: task {task.id!r} is marked {task.split or 'unsplit'!r}, not {split!r}"
            )
    return tasks
