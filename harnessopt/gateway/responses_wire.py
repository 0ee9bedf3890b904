"""The Responses API's wire format as the gateway writes it: its SSE event sequence.

The gateway serves ``POST /v1/responses`` next to the Messages and Chat Completions APIs. Its
backend always produces a complete ``response`` object; when the client asked for
``"stream": true`` the object is replayed as the event sequence the real API sends, each event
with its ``type`` and a ``sequence_number`` counting from 0:

``response.created``, ``response.in_progress``; per output item ``response.output_item.added``,
then for a message ``response.content_part.added``, ``response.output_text.delta``,
``response.output_text.done``, ``response.content_part.done``; for a function call
``response.function_call_arguments.delta`` and ``.done``; for reasoning
``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta`` and
``.done``, ``response.reasoning_summary_part.done``; then ``response.output_item.done``; and
last ``response.completed`` (or ``response.incomplete`` when the output was cut short). That is
what the openai SDK's ``responses.stream()`` and the Codex CLI parse. Errors are written as in
the Chat Completions API (``chat_wire.chat_error_body``), the same ``{"error": {...}}`` format.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

RESPONSES_PATH = "/v1/responses"


def responses_sse_events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events (each with ``type`` and ``sequence_number``) streaming ``response`` takes."""
    seq = 0

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal seq
        seq += 1
        return {"type": kind, "sequence_number": seq - 1, **fields}

    start = {**response, "status": "in_progress", "output": [], "incomplete_details": None, "usage": None}
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    for index, item in enumerate(response.get("output") or []):
        for kind, fields in _item_events(index, item):
            yield event(kind, **fields)
    final = "response.incomplete" if response.get("status") == "incomplete" else "response.completed"
    yield event(final, response=response)


def _item_events(index: int, item: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind, item_id = item.get("type"), item.get("id")
    at = {"item_id": item_id, "output_index": index}
    if kind == "message":
        yield (
            "response.output_item.added",
            {"output_index": index, "item": {**item, "content": [], "status": "in_progress"}},
        )
        for c, part in enumerate(item.get("content") or []):
            text = part.get("text", "")
            empty = {**part, "text": ""}
            yield "response.content_part.added", {**at, "content_index": c, "part": empty}
            yield "response.output_text.delta", {**at, "content_index": c, "delta": text, "logprobs": []}
            yield "response.output_text.done", {**at, "content_index": c, "text": text, "logprobs": []}
            yield "response.content_part.done", {**at, "content_index": c, "part": part}
    elif kind == "function_call":
        args = str(item.get("arguments") or "")
        added = {**item, "arguments": "", "status": "in_progress"}
        yield "response.output_item.added", {"output_index": index, "item": added}
        yield "response.function_call_arguments.delta", {**at, "delta": args}
        yield "response.function_call_arguments.done", {**at, "name": item.get("name"), "arguments": args}
    elif kind == "reasoning":
        yield "response.output_item.added", {"output_index": index, "item": {**item, "summary": []}}
        for s, part in enumerate(item.get("summary") or []):
            text = part.get("text", "")
            yield (
                "response.reasoning_summary_part.added",
                {**at, "summary_index": s, "part": {**part, "text": ""}},
            )
            yield "response.reasoning_summary_text.delta", {**at, "summary_index": s, "delta": text}
            yield "response.reasoning_summary_text.done", {**at, "summary_index": s, "text": text}
            yield "response.reasoning_summary_part.done", {**at, "summary_index": s, "part": part}
    else:
        yield "response.output_item.added", {"output_index": index, "item": item}
    yield "response.output_item.done", {"output_index": index, "item": item}
