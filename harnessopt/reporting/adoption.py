"""Are accepted edits used? Skill rules and harness flags against the trajectories that followed.

Rules. A *rule* is a line an accepted round added to a file under ``skill/`` (blank lines, front
matter fences and lines under ``MIN_RULE_CHARS`` characters are not rules). For each later round
whose incumbent still descends from that acceptance, its train trajectories (kept in the round's
commit) are read and split into what the model *received* (system prompt, user messages, tool
results) and what it *produced* (its replies, its tool calls, the answer): ``trajectory.parse``. A trajectory
``saw`` the rule when the rule's line appears in what the model received (whitespace and case
ignored): the model had it in context (with progressive disclosure, only when it opened the
file). It ``showed`` the rule when the rule's key terms appear in what the model produced: every
code span of the rule (text in backticks) if it has any, else at least two of its key words
(words of five letters or more, stop words removed). A rule with neither (``Reply with the word
only.``) names no term an answer would contain: ``showed`` is None (not measurable from text),
never a 0% that every obeying answer would also get. A text match cannot see a rule obeyed by
*not* doing something; read it as a hint.

Front matter. A field of a ``SKILL.md``'s front matter (``description: ...``) reaches the model
as its value, not as the line: a skill catalogue lists ``- NAME: DESCRIPTION``, a folded or quoted
value unfolded and unquoted. A field an accepted round changed is one rule, ``KEY: VALUE``, that a
trajectory saw when the value (as YAML reads it) is in what the model received; the lines of the
front matter are not rules of their own. The model obeys a description by loading the skill, not
by writing its words, so ``showed`` is None (the triggering section measures the loading).

Flags. A harness reports the flags it read in any of its events, as a ``flags_read`` object
(``{"event": "request", ..., "flags_read": {"stream": "1"}}``; the chat template does, with
``null`` for a flag it looked for and did not find); a trajectory used flag NAME when it reported
a value for it. Configured flags that no trajectory reported are listed with zero use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import git

from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.rollout.trajectory import Trajectory, parse
from harnessopt.util.text import FrontMatterError, read_front_matter, split_front_matter

MIN_RULE_CHARS = 12
KEY_WORD_CHARS = 5
MAX_KEY_WORDS = 6
STOP_WORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "always",
        "answer",
        "before",
        "being",
        "below",
        "between",
        "could",
        "every",
        "first",
        "never",
        "other",
        "should",
        "their",
        "there",
        "these",
        "those",
        "through",
        "under",
        "until",
        "using",
        "where",
        "which",
        "while",
        "would",
        "your",
        "yours",
        "itself",
        "other",
        "whose",
        "without",
        "within",
    ]
)
_CODE = re.compile(r"`([^`]+)`")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_WORD = re.compile(r"[a-z][a-z0-9_-]+")


@dataclass
class RuleUse:
    """One accepted rule and how often the trajectories after it saw and showed it."""

    round: int
    path: str
    text: str
    trajectories: int = 0
    saw: int = 0
    showed: int | None = 0  # None: the rule names no term an answer would show (not measurable)
    seen_as: str = ""  # what the model receives of it when not the line itself (a front matter field's value)


@dataclass(frozen=True)
class Added:
    """A rule an accepted round added: its file, its text and what the model would receive of it."""

    path: str
    text: str
    seen_as: str = ""  # a front matter field's value; "" for a line of the file

    @property
    def field(self) -> bool:
        return bool(self.seen_as)


@dataclass
class FlagUse:
    name: str
    trajectories: int = 0
    used: int = 0
    values: dict[str, int] = field(default_factory=dict)


def key_terms(rule: str) -> tuple[list[str], list[str]]:
    """(code spans, key words) of a rule, lower-cased."""
    spans = [s.strip().lower() for s in _CODE.findall(rule) if s.strip()]
    words = [w for w in _WORD.findall(_CODE.sub(" ", rule).lower()) if len(w) >= KEY_WORD_CHARS]
    words = [w for w in dict.fromkeys(words) if w not in STOP_WORDS][:MAX_KEY_WORDS]
    return spans, words


def measurable(rule: str) -> bool:
    """Can an answer show the rule by its text: a code span, or two key words (module docstring)?"""
    spans, words = key_terms(rule)
    return bool(spans) or len(words) >= 2


def shows(rule: str, produced: str) -> bool:
    """Does the model's output show the rule (module docstring)? False when it cannot tell."""
    spans, words = key_terms(rule)
    text = produced.lower()
    if spans:
        return all(s in text for s in spans)
    return len(words) >= 2 and sum(w in text for w in words) >= 2


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def added_rules(repo: git.Repo, parent: str, commit: str) -> list[Added]:
    """Every rule an accepted round added under skill/: lines, and SKILL.md front matter fields."""
    out = repo.git.diff("--unified=0", "--no-color", parent, commit, "--", "skill")
    rules: list[Added] = []
    path, lineno, left, fields_end = "", 0, 0, 0
    for line in out.splitlines():
        if left == 0 and line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else ""
            fields_end = _front_matter_lines(_show(repo, commit, path)) if _is_skill_md(path) else 0
            if fields_end:
                rules += _changed_fields(path, _show(repo, parent, path), _show(repo, commit, path))
        elif m := _HUNK.match(line):
            lineno, left = int(m[1]), int(m[2] if m[2] is not None else 1)
        elif line.startswith("+") and left > 0:
            left, lineno = left - 1, lineno + 1
            text = line[1:].strip().lstrip("-*#> ").strip()
            if path and lineno - 1 > fields_end and len(text) >= MIN_RULE_CHARS and text != "---":
                rules.append(Added(path, text))
    return rules


def _is_skill_md(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == "SKILL.md"


def _show(repo: git.Repo, commit: str, path: str) -> str:
    """The file at ``commit``; "" when it is not there."""
    try:
        return str(repo.git.show(f"{commit}:{path}"))
    except git.GitCommandError:
        return ""


def _front_matter_lines(text: str) -> int:
    """How many lines the front matter takes, both fences included; 0 without one."""
    try:
        raw, _ = split_front_matter(text)
    except FrontMatterError:
        return 0
    return 0 if raw is None else len(raw.split("\n")) + 2


def _fields(text: str) -> dict[str, str]:
    try:
        meta, _ = read_front_matter(text)
    except FrontMatterError:
        return {}
    return {str(k): " ".join(v.split()) for k, v in meta.items() if isinstance(v, str)}


def _changed_fields(path: str, before: str, after: str) -> list[Added]:
    """The front matter fields ``after`` sets to a new value, as rules matched by their value."""
    old = _fields(before)
    return [
        Added(path, f"{k}: {v}", seen_as=v)
        for k, v in _fields(after).items()
        if old.get(k) != v and len(v) >= MIN_RULE_CHARS
    ]


def trajectories_at(repo: git.Repo, round_no: int, commit: str) -> Iterator[Trajectory]:
    try:
        tree = repo.commit(commit).tree / "trajectories"
    except KeyError:
        return
    for blob in tree.traverse():
        if isinstance(blob, git.Blob) and str(blob.path).endswith(".md"):
            text = blob.data_stream.read().decode("utf-8", errors="replace")
            yield parse(text, round_no)


def adoption(repo: git.Repo, configured_flags: dict[str, str]) -> dict[str, list[Any]]:
    """Rules of accepted rounds and flags, each with how often later trajectories used them."""
    past = ledger.past_rounds(repo)
    accepted = [r for r in past if r.status == "accepted" and r.manifest.parent]
    rules = [
        RuleUse(
            r.round,
            a.path,
            a.text,
            showed=0 if measurable(a.text) and not a.field else None,
            seen_as=a.seen_as,
        )
        for r in accepted
        for a in added_rules(repo, str(r.manifest.parent), r.commit)
    ]
    flags = {name.lower(): FlagUse(name.lower()) for name in configured_flags}
    for later in past:
        trajectories = list(trajectories_at(repo, later.round, later.commit))
        for t in trajectories:
            for name, value in t.flags.items():
                use = flags.setdefault(name, FlagUse(name))
                if value is not None:
                    use.used += 1
                    use.values[str(value)] = use.values.get(str(value), 0) + 1
        for f in flags.values():
            f.trajectories += len(trajectories)
        parent = later.manifest.parent
        for rule in rules:
            source = next(r for r in accepted if r.round == rule.round)
            if later.round <= rule.round or not parent or not vcs.is_ancestor(repo, source.commit, parent):
                continue
            for t in trajectories:
                rule.trajectories += 1
                rule.saw += _norm(rule.seen_as or rule.text) in _norm(t.received)
                if rule.showed is not None:
                    rule.showed += shows(rule.text, t.produced)
    return {"rules": rules, "flags": sorted(flags.values(), key=lambda f: f.name)}
