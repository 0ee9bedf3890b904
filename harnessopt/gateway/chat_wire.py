"""The Chat Completions API's wire format as the gateway writes it: SSE chunks and error bodies.

The gateway serves ``POST /v1/chat/completions`` next to the Messages API. Its backend always
produces a complete chat completion; when the client asked for ``"stream": true`` the completion
is replayed as the ``chat.completion.chunk`` sequence the real API sends (role, content, tool
call name then arguments, finish reason, the usage chunk when ``stream_options.include_usage``,
``data: [DONE]``), which is what the openai SDK's ``create(stream=True)`` and
``chat.completions.stream()`` parse. Errors are the API's ``{"error": {message, type, param,
code}}`` with ``param`` naming the refused field of a 400.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

CHAT_PATH = "/v1/chat/completions"

# Canonical (Messages API) error type -> (Chat Completions type, code).
_TYPES = {
    "invalid_request_error": ("invalid_request_error", None),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("invalid_request_error", "permission_denied"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "overloaded_error": ("server_error", "overloaded"),
    "timeout_error": ("server_error", "timeout"),
}
_FIELD = re.compile(r"^([A-Za-z_][\w.\[\]]*): ")


def chat_error_body(error_type: str, message: str) -> dict[str, Any]:
    """An error body in the Chat Completions API's format; a budget refusal is ``insufficient_quota``."""
    kind, code = _TYPES.get(error_type, ("server_error", None))
    if error_type == "rate_limit_error" and message.startswith("harnessopt budget"):
        kind, code = "insufficient_quota", "insufficient_quota"
    field = _FIELD.match(message) if error_type == "invalid_request_error" else None
    return {"error": {"message": message, "type": kind, "param": field[1] if field else None, "code": code}}


def chat_sse_chunks(completion: dict[str, Any], include_usage: bool = False) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects the streaming API sends for a complete ``completion``."""
    head = {k: completion.get(k) for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    extra = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**head, "choices": [choice], **extra}

    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        start = {"index": i, "id": call.get("id"), "type": "function"}
        yield chunk({"tool_calls": [start | {"function": {"name": fn.get("name"), "arguments": ""}}]})
        if fn.get("arguments"):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
    yield chunk({}, choice.get("finish_reason") or "stop")
    if include_usage:
        yield {**head, "choices": [], "usage": completion.get("usage")}
