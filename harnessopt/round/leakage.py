"""Leakage check: does a candidate's edit copy task data into the skill or the harness?

The lines a candidate *adds* (its files compared with the incumbent's, line by line) are compared
with every train and val task:

* **n-gram rule** - text is cut into lower-case words (letters and digits); an added text leaks a
  task when they share ``ngram_words`` words in a row that span at least ``ngram_chars``
  characters (joined by single spaces), taken from the task's input or its gold answer. An input
  or answer shorter than ``ngram_words`` words counts as one n-gram of its own, under the same
  character minimum: a 45-character answer copied whole is caught, "Paris" never is.
  N-grams found in the inputs of ``COMMON_TASKS`` or more tasks are the task set's template
  (an instruction every task repeats), not any task's content, and do not count.
* **id rule** - an added line names a task id: the id as a whole token (no letter, digit, ``_``
  or ``-`` touching it), case-insensitive. Ids shorter than ``id_min_chars`` and ids of digits
  only are not looked for: they occur by chance.

A short gold answer (a city name) appearing in an added line is therefore not by itself leakage;
the same line naming the task's id, or quoting its input at length, is.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.config import ChecksConfig
from harnessopt.protocols import Task

COMMON_TASKS = 3  # an n-gram in this many tasks' inputs is the task set's template
MAX_FINDINGS = 20  # findings kept in the manifest
_WORD = re.compile(r"[^\W_]+")
_SKIP = ("__pycache__",)


@dataclass(frozen=True)
class Finding:
    """One added line that copies a task: where, which task, and what it shares with it."""

    path: str
    line: int
    task_id: str
    split: str
    kind: str  # "input", "answer" or "id"
    shared: str

    def describe(self) -> str:
        what = {"input": "its input", "answer": "its gold answer", "id": "its id"}[self.kind]
        return f"{self.path}:{self.line} copies {what} ({self.split} task {self.task_id}): {self.shared!r}"


@dataclass
class LeakReport:
    """What the check found in one candidate."""

    findings: list[Finding] = field(default_factory=list)
    added_lines: int = 0

    def summary(self) -> str:
        """One line for the round's reason and the log."""
        if not self.findings:
            return f"no leakage in {self.added_lines} added line(s)"
        tasks = sorted({f.task_id for f in self.findings})
        first = self.findings[0].describe()
        more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"leakage: added lines copy {len(tasks)} task(s) ({', '.join(tasks[:5])}): {first[:300]}{more}"

    def record(self, action: str) -> dict[str, Any]:
        """The manifest's ``checks.leakage`` entry."""
        return {
            "action": action,
            "added_lines": self.added_lines,
            "tasks": sorted({f.task_id for f in self.findings}),
            "findings": [f.__dict__ for f in self.findings[:MAX_FINDINGS]],
        }


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def ngrams(tokens: Sequence[str], n: int, min_chars: int) -> set[tuple[str, ...]]:
    """Every run of ``n`` tokens spanning ``min_chars``; a shorter text is one gram of its own."""
    runs = (
        [tuple(tokens)] if len(tokens) < n else [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    )
    return {g for g in runs if g and len(" ".join(g)) >= min_chars}


class TaskIndex:
    """The n-grams and ids of a task set, built once per round."""

    def __init__(self, tasks: Iterable[Task], cfg: ChecksConfig):
        self.cfg = cfg
        self.grams: dict[tuple[str, ...], tuple[Task, str]] = {}
        counts: dict[tuple[str, ...], int] = {}
        self.ids: dict[str, Task] = {}
        for t in tasks:
            for kind, value in (("input", t.input), ("answer", t.answer)):
                for g in ngrams(words(_text(value)), cfg.ngram_words, cfg.ngram_chars):
                    self.grams.setdefault(g, (t, kind))
                    if kind == "input":
                        counts[g] = counts.get(g, 0) + 1
            if len(t.id) >= cfg.id_min_chars and not t.id.isdigit():
                self.ids[t.id.lower()] = t
        for g, n in counts.items():
            if n >= COMMON_TASKS:
                del self.grams[g]
        alternatives = "|".join(re.escape(i) for i in sorted(self.ids, key=len, reverse=True))
        self._id_re = re.compile(rf"(?<![\w-])({alternatives})(?![\w-])", re.I) if self.ids else None

    def scan(self, path: str, lines: Sequence[tuple[int, str]]) -> list[Finding]:
        """Findings in the added ``(line number, text)`` pairs of one file."""
        found: list[Finding] = []
        tokens: list[str] = []
        where: list[int] = []  # the line number of each token
        for no, text in lines:
            toks = words(text)
            tokens += toks
            where += [no] * len(toks)
            if self._id_re is not None:
                for m in self._id_re.finditer(text):
                    t = self.ids[m.group(1).lower()]
                    found.append(Finding(path, no, t.id, str(t.split), "id", m.group(1)))
        seen: set[tuple[str, str]] = set()
        for g in self._grams_in(tokens):
            task, kind = self.grams[g]
            if (task.id, kind) in seen:
                continue
            seen.add((task.id, kind))
            start = _find(tokens, g)
            found.append(Finding(path, where[start], task.id, str(task.split), kind, " ".join(g)))
        return found

    def _grams_in(self, tokens: list[str]) -> list[tuple[str, ...]]:
        n = self.cfg.ngram_words
        out = [g for g in ngrams(tokens, n, self.cfg.ngram_chars) if g in self.grams]
        shorter = {g for g in self.grams if len(g) < n}  # whole short inputs/answers
        for g in shorter:
            if _find(tokens, g) >= 0:
                out.append(g)
        return out


def _find(tokens: Sequence[str], gram: Sequence[str]) -> int:
    k = len(gram)
    return next((i for i in range(len(tokens) - k + 1) if tuple(tokens[i : i + k]) == tuple(gram)), -1)


def added_lines(old_root: Path, new_root: Path, parts: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
    """Per file under ``parts`` of ``new_root``: the lines it adds to the same file in ``old_root``."""
    out: dict[str, list[tuple[int, str]]] = {}
    for part in parts:
        base = new_root / part
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if not path.is_file() or path.is_symlink() or any(s in path.parts for s in _SKIP):
                continue
            rel = path.relative_to(new_root)
            new = _lines(path)
            old_path = old_root / rel
            old = _lines(old_path) if old_path.is_file() else []
            if new == old:
                continue
            got: list[tuple[int, str]] = []
            for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(
                None, old, new, autojunk=False
            ).get_opcodes():
                if tag in ("insert", "replace"):
                    got += [(j + 1, new[j]) for j in range(j1, j2)]
            if got:
                out[str(rel)] = got
    return out


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", errors="replace").splitlines()


def check_candidate(
    tasks: Iterable[Task], cfg: ChecksConfig, incumbent: Path, candidate: Path, parts: Sequence[str]
) -> LeakReport:
    """Leakage of ``tasks`` into the lines ``candidate`` adds under ``parts`` (module docstring)."""
    index = TaskIndex(tasks, cfg)
    report = LeakReport()
    for path, lines in added_lines(incumbent, candidate, parts).items():
        report.added_lines += len(lines)
        report.findings += index.scan(path, lines)
    return report


def screen(
    k: int,
    tasks: Iterable[Task],
    cfg: ChecksConfig,
    incumbent: Path,
    candidate: Path,
    parts: Sequence[str],
    say: Callable[[str], None],
) -> tuple[dict[str, Any] | None, str | None]:
    """The round's leakage step: (the manifest's ``checks.leakage`` record, the reason to reject).

    ``checks.leakage: reject`` rejects a candidate with findings; ``warn`` says them and goes on;
    ``off`` looks at nothing."""
    if cfg.leakage == "off":
        return None, None
    report = check_candidate(tasks, cfg, incumbent, candidate, parts)
    if not report.findings:
        return report.record(cfg.leakage), None
    if cfg.leakage == "warn":
        say(f"round {k}: warning: {report.summary()} (checks.leakage: warn, so it goes on)")
        return report.record("warn"), None
    return report.record("reject"), f"{report.summary()}; the candidate overfits the tasks"
