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

import itertools
import re
import threading
from typing import Any

from harnessopt.protocols import ModelError

MIN_SHARED = 2
STOP = set(
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
_ids = itertools.count(1)


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


def offered_skills(body: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """(loading tool name, {skill: description}) the request offers; (None, {}) when none."""
    tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
    tool = "load_skill" if "load_skill" in tools else "Skill" if "Skill" in tools else None
    if tool is None:
        return None, {}
    system = body.get("system")
    system = system if isinstance(system, str) else _text(system)
    sources = [system, str(tools[tool].get("description", ""))]
    sources += [_text(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user"]
    skills: dict[str, str] = {}
    for src in sources:
        for name, desc in re.findall(
            r"<name>\s*(.*?)\s*</name>\s*<description>\s*(.*?)\s*</description>", src, re.S
        ):
            skills.setdefault(name.strip(), desc.strip())
        for name, desc in re.findall(r"^- ([a-z0-9][a-z0-9-]*): (.+)$", src, re.M):
            skills.setdefault(name, desc.strip())
    return tool, skills


def choose(query: str, skills: dict[str, str]) -> str | None:
    """The skill whose description shares the most words with ``query`` (at least MIN_SHARED, no tie)."""
    q = words(query)
    ranked = sorted(((len(q & words(d)), n) for n, d in skills.items()), reverse=True)
    if not ranked or ranked[0][0] < MIN_SHARED or (len(ranked) > 1 and ranked[1][0] == ranked[0][0]):
        return None
    return ranked[0][1]


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
        use = {"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": tool, "input": {key: pick}}
        return reply(body, [use])


def reply(body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 300, "output_tokens": 10},
    }
