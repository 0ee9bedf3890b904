"""Render one scored run as a flat Markdown file for the optimizer to ``ls``, ``grep`` and ``head``.

Layout (see docs/trajectories.md): YAML front matter with a fixed list of fields, one per line,
then ``# Task``, ``# Transcript`` (every model call the gateway recorded, in order: the messages
that are new since the previous call, then the response blocks), ``# Harness events`` when the
harness logged any, ``# Answer``, ``# Harness stdout (tail)`` (when it printed anything), ``# Harness stderr (tail)``, ``# Scorer feedback``, ``# Notes``.
Free text sits inside code fences so a model that writes ``# Answer`` cannot fake a section.
Output depends only on the inputs (no clocks, no dict-order surprises), so files diff cleanly.

``parse`` reads a rendered file back by the same headings (what the adoption report needs: the
front matter, what the model received and produced, the answer, the flags the harness read), so
the format is written and read in this one module.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harnessopt.protocols import Exchange, TaskResult
from harnessopt.util.text import elide, parse_front_matter, tail, visible
from harnessopt.workspace import flags as harness_flags

FIELDS = (
    "task_id", "split", "round", "score", "passed", "soft", "feedback", "harness_commit",
    "target_model", "steps", "input_tokens", "output_tokens", "tokens_estimated", "truncated", "wall_s",
    "exit_code", "error_class",
)  # fmt: skip
FEEDBACK_CHARS = 200  # front-matter feedback is one line; the full text is in "# Scorer feedback"
TEXT_CHARS = 4000  # one message block, tool input or tool result
TASK_CHARS = 8000
ANSWER_CHARS = 8000
STDERR_CHARS = 3000
FULL_FEEDBACK_CHARS = 8000
EVENT_CHARS = 500
MAX_EVENTS = 200
_SAFE_CHARS = re.compile(r"[A-Za-z0-9_.-]")
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./@+-]*$")
MAX_NAME_CHARS = 180
# Characters YAML would reject or treat as line breaks inside a one-line scalar.
_UNSAFE = ("Cc", "Cs", "Cn", "Zl", "Zp")


# --------------------------------------------------------------------------- text helpers


def _fence(text: str, lang: str = "text") -> str:
    """Wrap in a code fence longer than any backtick run inside, so nothing can close it early."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}"


def _text_or_empty(text: str) -> str:
    return _fence(text) if text.strip() else "(empty)"


def _one_line(text: str, limit: int) -> str:
    """Whitespace collapsed, control and separator characters dropped, cut to ``limit``."""
    flat = " ".join(str(text).split())
    flat = "".join(c for c in flat if unicodedata.category(c) not in _UNSAFE)
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _event_line(event: Any) -> str:
    text = json.dumps(event, ensure_ascii=False, sort_keys=True, default=str)
    return elide(text, EVENT_CHARS).replace("\n", " ")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, default=str)


# --------------------------------------------------------------------------- front matter


def _scalar(value: Any) -> str:
    """One YAML scalar on one line that ``yaml.safe_load`` reads back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return {True: ".nan", False: ".inf" if value > 0 else "-.inf"}[value != value]
        return repr(value)  # shortest repr that reads back to the same float
    # Keep the text exact (ids may hold double spaces) but never let a line break through.
    text = "".join(" " if unicodedata.category(c) in _UNSAFE else c for c in str(value))
    if _PLAIN.match(text) and yaml.safe_load(text) == text:
        return text
    return json.dumps(text, ensure_ascii=False)


def front_matter(result: TaskResult, *, harness_commit: str, target_model: str) -> dict[str, Any]:
    """The front-matter values, in FIELDS order."""
    values = {
        "task_id": result.task_id,
        "split": result.split,
        "round": result.round,
        "score": float(result.score),
        "passed": bool(result.passed),
        "soft": None if result.soft is None else float(result.soft),
        "feedback": _one_line(result.feedback, FEEDBACK_CHARS),
        "harness_commit": harness_commit,
        "target_model": target_model,
        "steps": result.steps,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "tokens_estimated": any(ex.estimated for ex in result.exchanges),
        "truncated": sum(
            1 for ex in result.exchanges if (ex.response or {}).get("stop_reason") == "max_tokens"
        ),
        "wall_s": round(float(result.wall_s), 3),
        "exit_code": result.exit_code,
        "error_class": result.error_class,
    }
    return {key: values[key] for key in FIELDS}


# --------------------------------------------------------------------------- transcript


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b if isinstance(b, dict) else {"type": "unknown", "value": b} for b in content]
    return [] if content is None else [{"type": "unknown", "value": content}]


def _block_key(block: dict[str, Any]) -> Any:
    """What identifies a block when comparing histories: SDKs add fields like citations=None."""
    kind = block.get("type")
    if kind == "text":
        return ("text", block.get("text"))
    if kind == "tool_use":
        return (
            "tool_use",
            block.get("id"),
            block.get("name"),
            json.dumps(block.get("input"), sort_keys=True),
        )
    if kind == "tool_result":
        return (
            "tool_result",
            block.get("tool_use_id"),
            json.dumps(_blocks(block.get("content")), sort_keys=True),
        )
    return (kind, json.dumps(block, sort_keys=True, default=str))


def _message_key(message: Any) -> Any:
    if not isinstance(message, dict):
        return ("?", json.dumps(message, sort_keys=True, default=str))
    return (message.get("role"), tuple(_block_key(b) for b in _blocks(message.get("content"))))


def _render_block(block: dict[str, Any], role: str) -> list[str]:
    kind = block.get("type", "unknown")
    if kind == "text":
        return [f"#### {role} text", _fence(elide(str(block.get("text", "")), TEXT_CHARS))]
    if kind == "thinking":
        return [f"#### {role} thinking", _fence(elide(str(block.get("thinking", "")), TEXT_CHARS))]
    if kind == "tool_use":
        head = f"#### {role} tool_use {block.get('name')} (id {block.get('id')})"
        return [head, _fence(elide(_json(block.get("input")), TEXT_CHARS), "json")]
    if kind == "tool_result":
        flag = " is_error" if block.get("is_error") else ""
        lines = [f"#### {role} tool_result (tool_use_id {block.get('tool_use_id')}){flag}"]
        for inner in _blocks(block.get("content")):
            if inner.get("type") == "text":
                lines.append(_fence(elide(str(inner.get("text", "")), TEXT_CHARS)))
            else:
                lines.append(_short_block(inner))
        return lines
    return [f"#### {role} {kind}", _short_block(block)]


def _short_block(block: dict[str, Any]) -> str:
    if block.get("type") == "image":
        source = block.get("source") or {}
        data = source.get("data") or ""
        return f"[image {source.get('media_type', '?')}, {len(data)} chars of {source.get('type', '?')} data]"
    return _fence(elide(_json(block), TEXT_CHARS), "json")


def _system_text(system: Any) -> str:
    if isinstance(system, list):
        return "\n\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in system)
    return "" if system is None else str(system)


def _render_call(number: int, ex: Exchange, shown: dict[str, Any], prev_history: list[Any]) -> list[str]:
    req = ex.request or {}
    resp = ex.response or {}
    out = [f"## Call {number}", f"- model: {req.get('model', '?')}"]
    if resp:
        out.append(f"- stop_reason: {resp.get('stop_reason')}")
    out += [
        f"- input_tokens: {ex.input_tokens}{' (estimated)' if ex.estimated else ''}",
        f"- output_tokens: {ex.output_tokens}{' (estimated)' if ex.estimated else ''}",
        f"- wall_s: {ex.wall_s:.3f}",
    ]
    if ex.streamed:
        out.append("- streamed: true")
    tools = [str(t.get("name")) for t in req.get("tools") or [] if isinstance(t, dict)]
    if tools != shown.get("tools", []):
        out.append(f"- tools: {', '.join(tools) or '(none)'}")
        shown["tools"] = tools
    if ex.error:
        out.append(f"- error: {_one_line(ex.error, 500)}")
    system = _system_text(req.get("system"))
    if system and system == shown.get("system"):
        out += ["", "(system prompt unchanged)"]
    elif system:
        out += ["", "### system", _fence(elide(system, TEXT_CHARS))]
        shown["system"] = system
    messages = list(req.get("messages") or [])
    keys = [_message_key(m) for m in messages]
    common = 0
    while common < min(len(keys), len(prev_history)) and keys[common] == prev_history[common]:
        common += 1
    if prev_history and common < len(prev_history) - 1:
        out += ["", f"(history rewritten by the harness: showing from message {common + 1})"]
    for index in range(common, len(messages)):
        message = messages[index] if isinstance(messages[index], dict) else {"content": messages[index]}
        role = str(message.get("role", "?"))
        out += ["", f"### message {index + 1} ({role})"]
        for block in _blocks(message.get("content")):
            out += _render_block(block, role)
    if ex.response is not None:
        out += ["", "### response"]
        for block in _blocks(resp.get("content")):
            out += _render_block(block, "assistant")
    # Next call's history normally repeats these messages plus this response: skip those.
    prev_history[:] = keys + [_message_key({"role": "assistant", "content": resp.get("content")})]
    return out


def render_transcript(exchanges: Sequence[Exchange]) -> list[str]:
    """Every call in start order; messages repeated from earlier calls are not shown again."""
    if not exchanges:
        return ["(no model calls recorded)"]
    shown: dict[str, Any] = {}
    history: list[Any] = []
    lines: list[str] = []
    for number, ex in enumerate(sorted(exchanges, key=lambda e: e.started), start=1):
        if lines:
            lines.append("")
        lines += _render_call(number, ex, shown, history)
    return lines


# --------------------------------------------------------------------------- file


def render(result: TaskResult, *, harness_commit: str, target_model: str) -> str:
    """The whole trajectory file for one task run."""
    fm = front_matter(result, harness_commit=harness_commit, target_model=target_model)
    lines = ["---", *(f"{k}: {_scalar(v)}" for k, v in fm.items()), "---", "", "# Task", ""]
    task_input = result.task_input
    if isinstance(task_input, str):
        lines.append(_fence(elide(task_input, TASK_CHARS)))
    else:
        lines.append(_fence(elide(_json(task_input), TASK_CHARS), "json"))
    lines += ["", "# Transcript", "", *render_transcript(result.exchanges)]
    if result.harness_events:
        lines += ["", "# Harness events", ""]
        events = list(result.harness_events)
        if len(events) > MAX_EVENTS:
            half = MAX_EVENTS // 2
            skipped = len(events) - MAX_EVENTS
            events = [*events[:half], {"elided_events": skipped}, *events[-half:]]
        lines += [f"- {_event_line(e)}" for e in events]
    lines += ["", "# Answer", "", _text_or_empty(elide(result.answer or "", ANSWER_CHARS))]
    if result.stdout_tail.strip():  # what the harness printed (captured by the sandbox), when anything
        lines += ["", "# Harness stdout (tail)", "", tail(result.stdout_tail, STDERR_CHARS)]
    lines += [
        "",
        "# Harness stderr (tail)",
        "",
        _text_or_empty(tail(result.stderr_tail or "", STDERR_CHARS)),
    ]
    lines += ["", "# Scorer feedback", "", _text_or_empty(elide(result.feedback or "", FULL_FEEDBACK_CHARS))]
    lines += ["", "# Notes", ""]
    lines += [f"- {_one_line(n, 1000)}" for n in result.notes] or ["(none)"]
    return "\n".join(lines).rstrip("\n") + "\n"


# --------------------------------------------------------------------------- reading a file back


@dataclass(frozen=True)
class Trajectory:
    """A rendered trajectory read back: its front matter (``FIELDS``), what the model received
    (system prompt, user messages, tool results) and what it produced (its replies and tool calls,
    and the answer), the answer alone, and the flags its harness events say it read."""

    round: int
    received: str
    produced: str
    flags: dict[str, Any]
    fields: dict[str, Any] = field(default_factory=dict)
    answer: str = ""


def parse(text: str, round_no: int | None = None) -> Trajectory:
    """Walk a file ``render`` wrote by its headings (text inside code fences is never a heading).
    ``round_no``: the round to file it under; default the front matter's ``round``."""
    fields = _front_matter_of(text)
    received: list[str] = []
    produced: list[str] = []
    answer: list[str] = []
    read: dict[str, Any] = {}
    target: list[str] | None = None
    in_answer = events = False
    fence = ""  # the open code fence: headings inside it are the model's or the skill's text
    for line in text.splitlines():
        if fence:
            if line.strip() == fence:
                fence = ""
            else:
                if target is not None:
                    target.append(line)
                if in_answer:
                    answer.append(line)
            continue
        level = len(line) - len(line.lstrip("#"))
        if line.startswith("```"):
            fence = "`" * (len(line) - len(line.lstrip("`")))
        elif level and line[level : level + 1] == " ":
            head = line[level:].strip().lower()
            target, events = _section(level, head, target, events, received, produced)
            in_answer = level == 1 and head == "answer"
        elif events and line.startswith("- {"):
            read.update(_flags_of(line[2:]))
        elif target is not None:
            target.append(line)
    round_of = round_no if round_no is not None else int(fields.get("round") or 0)
    return Trajectory(round_of, "\n".join(received), "\n".join(produced), read, fields, "\n".join(answer))


def _front_matter_of(text: str) -> dict[str, Any]:
    try:
        return parse_front_matter(text)
    except ValueError:  # not one of ours (or cut short): no fields
        return {}


def _section(
    level: int, head: str, target: list[str] | None, events: bool, received: list[str], produced: list[str]
) -> tuple[list[str] | None, bool]:
    """Where the lines under a heading go: (received, produced or nowhere, in harness events?)."""
    if level == 1:
        return (produced if head == "answer" else None), head == "harness events"
    if level == 2:
        return None, events
    if (
        head.startswith("system")
        or head.startswith("user")
        or (head.startswith("message") and "(user)" in head)
    ):
        return received, events
    if head.startswith(("assistant", "response")) or "(assistant)" in head:
        return produced, events
    return target, events


def _flags_of(raw: str) -> dict[str, Any]:
    try:
        event = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return harness_flags.read_in([event]) if isinstance(event, dict) else {}


def safe_filename(task_id: str) -> str:
    """Task id -> file stem. Injective: ``A-Za-z0-9_.-`` stay, anything else (and ``%``) becomes
    ``%XX`` per UTF-8 byte, a leading ``.`` too (no hidden files, no ``..``). Stems longer than
    MAX_NAME_CHARS are cut and get ``~h`` + 16 hex of sha256(id), a char escaping never emits."""
    out = []
    for i, char in enumerate(task_id):
        if _SAFE_CHARS.match(char) and not (i == 0 and char == "."):
            out.append(char)
        else:
            out.append("".join(f"%{b:02X}" for b in char.encode("utf-8")))
    stem = "".join(out)
    if len(stem) > MAX_NAME_CHARS:
        digest = hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:16]
        stem = f"{stem[: MAX_NAME_CHARS - 18]}~h{digest}"
    return stem


def trajectory_filenames(results: Sequence[TaskResult]) -> list[str]:
    """``<stem>.md``; a task with several runs (epochs) gets ``<stem>~e<epoch>.md`` for each."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.task_id] = counts.get(r.task_id, 0) + 1
    names = []
    for r in results:
        stem = safe_filename(r.task_id)
        names.append(f"{stem}~e{r.epoch}.md" if counts[r.task_id] > 1 else f"{stem}.md")
    if len(set(names)) != len(names):
        raise ValueError("two results share a task id and epoch; cannot name their trajectory files")
    return names


def write_trajectories(
    directory: Path, results: Iterable[TaskResult], *, harness_commit: str, target_model: str
) -> list[Path]:
    """Replace ``directory/*.md`` with one file per result; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for old in sorted(directory.glob("*.md")):
        old.unlink()
    results = list(results)
    paths = []
    for result, name in zip(results, trajectory_filenames(results), strict=True):
        path = directory / name
        text = render(result, harness_commit=harness_commit, target_model=target_model)
        # Model and harness output is untrusted: an escape sequence is shown, never run by `head`.
        path.write_text(visible(text), encoding="utf-8")
        paths.append(path)
    return paths
