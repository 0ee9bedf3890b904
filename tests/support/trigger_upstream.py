"""A fake upstream that loads a skill when its description fits the query, for trigger tests.

``DescriptionFit`` is a request function for ``FakeAnthropicServer``. It reads the skills offered
the way each runtime offers them: the tool-agent template's catalogue (``- name: description``
lines of the system prompt, with a ``load_skill`` tool), or Claude Code's ``Skill`` tool (skills
listed as ``<skill><name>..</name><description>..</description></skill>`` or ``- name: desc``
lines in the tool's description or a system reminder). It scores each skill by the words its
description shares with the user's query (lower-cased, a trailing ``s`` cut, stop words dropped)
and loads the best one when it shares at least ``MIN_SHARED`` words and no other skill ties.

As strict as the real tool-use protocol where it matters: the loading tool must be among the
request's ``tools`` (else it answers in text), every ``tool_result`` must answer a ``tool_use`` id
of the assistant turn just before it (else a 400, as the real API answers), and the skill named
must be one offered.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from harnessopt.protocols import ModelError
from tests.support.claude_code import reply, tool_use

MIN_SHARED = 2
STOP = {"use", "when", "user", "want", "wants", "asked", "any", "all", "not", "do", "what"} | set(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "to",
        "of",
        "in",
        "on",
        "for",
        "with",
        "this",
        "that",
        "these",
        "those",
        "it",
        "is",
        "be",
        "as",
        "my",
        "me",
        "i",
        "you",
        "your",
        "from",
        "into",
    ]
)


def words(text: str) -> set[str]:
    return {
        w[:-1] if w.endswith("s") and len(w) > 3 else w for w in re.findall(r"[a-z]+", text.lower())
    } - STOP


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(
        str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and b.get("type") == "text"
    )


def _listing(text: str) -> dict[str, str]:
    """``- name: description`` lines of a skill listing."""
    return {n: d.strip() for n, d in re.findall(r"^- ([a-z0-9][a-z0-9:_-]*): (.+)$", text, re.M)}


def offered_skills(body: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """(loading tool name, {skill: description}) the request offers; (None, {}) when none.

    Where each runtime lists them: the tool-agent template after "skills are available" in its
    system prompt; Claude Code in a ``<system-reminder>`` of the first user message that says
    "The following skills are available for use with the Skill tool"."""
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if "load_skill" in tools:
        system = body.get("system")
        text = system if isinstance(system, str) else _text(system)
        _, _, listing = text.partition("skills are available")
        return "load_skill", _listing(listing)
    if "Skill" in tools:
        first: dict[str, Any] = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
        for block in re.findall(
            r"<system-reminder>(.*?)</system-reminder>", _text(first.get("content")), re.S
        ):
            if "skills are available for use with the Skill tool" in block:
                return "Skill", _listing(block)
        return "Skill", {}
    return None, {}


def choose(query: str, skills: dict[str, str]) -> str | None:
    """The skill whose description shares the most words with ``query``, rare words (in few of
    the offered descriptions) weighing more; at least MIN_SHARED shared words, and no tie."""
    q = words(query)
    described = {n: words(d) for n, d in skills.items()}
    df = {w: sum(w in ws for ws in described.values()) for w in q}
    ranked = sorted(
        ((sum(1.0 / df[w] for w in q & ws), len(q & ws), n) for n, ws in described.items()), reverse=True
    )
    ranked = [r for r in ranked if r[1] >= MIN_SHARED]
    if not ranked or (len(ranked) > 1 and abs(ranked[1][0] - ranked[0][0]) < 1e-9):
        return None
    return ranked[0][2]


def check_protocol(body: dict[str, Any]) -> None:
    """A 400 where the real API would refuse: a tool_result without its tool_use just before."""
    messages = body.get("messages") or []
    for i, m in enumerate(messages):
        if m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        results = [
            b.get("tool_use_id")
            for b in m["content"]
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        if not results:
            continue
        prev = messages[i - 1] if i else {}
        uses = {
            b.get("id")
            for b in prev.get("content") or []
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
        if prev.get("role") != "assistant" or not set(results) <= uses:
            raise ModelError(
                400,
                "invalid_request_error",
                f"messages.{i}: tool_result blocks must answer tool_use ids of the previous turn",
            )


class DescriptionFit:
    """The request function; ``decisions`` records (query, skill loaded or None) per first turn."""

    def __init__(self, answer: str = "done") -> None:
        self.answer = answer
        self.decisions: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        check_protocol(body)
        messages = body.get("messages") or []
        tool, skills = offered_skills(body)
        if not body.get("tools"):  # a side call (Claude Code's title)
            return reply(body, [{"type": "text", "text": "Title"}])
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        if tool is None or turns > 0:  # after the load: the answer
            return reply(body, [{"type": "text", "text": self.answer}])
        query = _text(messages[0].get("content")) if messages else ""
        query = re.sub(r"<system-reminder>.*?</system-reminder>", "", query, flags=re.S).strip()
        pick = choose(query, skills)
        with self._lock:
            self.decisions.append((query, pick))
        if pick is None:
            return reply(body, [{"type": "text", "text": self.answer}])
        key = "name" if tool == "load_skill" else "skill"
        return reply(body, [tool_use(tool, {key: pick})])
