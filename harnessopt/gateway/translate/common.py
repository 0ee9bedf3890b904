"""What both directions of the Messages <-> Chat Completions translation share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from harnessopt.protocols import ModelError

RAW_ARGUMENTS = "_raw_arguments"  # tool_use input key of arguments that were not a JSON object


def bad(field: str, what: str) -> ModelError:
    """The 400 that names the field: ``field: what``."""
    return ModelError(400, "invalid_request_error", f"{field}: {what}")


def canonical_tool_choice(choice: Any, parallel: Any, function_name: Any) -> dict[str, Any] | None:
    """An OpenAI ``tool_choice`` and ``parallel_tool_calls`` as the Messages API's ``tool_choice``.

    ``function_name`` is the name of a ``{"type": "function", ...}`` choice, read by the caller
    from its API's shape (Chat Completions nests it under ``function``, the Responses API not).
    """
    if choice is None and parallel in (None, True):
        return None
    if choice in (None, "auto"):
        out: dict[str, Any] = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        out = {"type": "tool", "name": function_name}
    else:
        raise bad("tool_choice", f"{choice!r} is not supported (auto, none, required, a function)")
    if parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


def openai_tool_choice(choice: dict[str, Any], named: Callable[[Any], Any]) -> dict[str, Any]:
    """The Messages API's ``tool_choice`` as OpenAI request fields; ``named(name)`` is one function's form."""
    kind = choice.get("type")
    names = {"auto": "auto", "any": "required", "none": "none"}
    if kind == "tool":
        out: dict[str, Any] = {"tool_choice": named(choice.get("name"))}
    elif kind in names:
        out = {"tool_choice": names[kind]}
    else:
        raise bad("tool_choice.type", f"{kind!r} is not supported (auto, any, tool, none)")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def plain_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(content if isinstance(content, list) else [None]):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise bad(f"{where}[{j}]", "only text parts are supported here")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


def arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {RAW_ARGUMENTS: raw if isinstance(raw, str) else json.dumps(raw)}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: raw}


def arguments_text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])  # what the model wrote, handed back as it was
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def canonical_response(
    msg_id: str, model: str, content: list[dict[str, Any]], stop: str, usage: tuple[int, int, int]
) -> dict[str, Any]:
    """A Messages API response made from an upstream's answer; ``usage``: the prompt tokens (the
    cached ones among them), the cached ones, and the output tokens, as the upstream counted."""
    if any(b["type"] == "tool_use" for b in content):
        stop = "tool_use"  # some servers say "stop" after tool calls
    prompt, cached, output = usage
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(prompt - cached, 0),
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        },
    }
