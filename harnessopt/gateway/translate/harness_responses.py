"""A harness speaking the Responses API: its request made canonical, the canonical answer made a response.

The canonical form is the Messages API body (see ``harnessopt.gateway.translate``).
``instructions`` and system/developer messages become ``system``; ``function_call`` items become
``tool_use`` blocks of the assistant turn, ``function_call_output`` items ``tool_result`` blocks of
the next user turn; function tools become custom tools. The gateway keeps no state, so what
needs a stored response or a hosted tool (``previous_response_id``, ``conversation``,
``background``, ``item_reference``, ``web_search``, ``file_search``, ...) is a 400 naming the
field, as is any other field without a Messages API equivalent. ``reasoning.effort`` becomes
extended thinking; thinking blocks come back as ``reasoning`` items whose ``encrypted_content``
carries the block, so a client that returns them (as Codex does) replays them exactly.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from harnessopt.gateway.translate.common import (
    arguments,
    arguments_text,
    bad,
    canonical_tool_choice,
    plain_text,
)

_FIELDS = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools"}
_FIELDS |= {"tool_choice", "parallel_tool_calls", "reasoning", "user", "metadata", "store"}
_HINTS = {"prompt_cache_key", "client_metadata", "safety_identifier", "service_tier"}  # accepted, ignored
_NEUTRAL: dict[str, Any] = {
    "background": False,
    "truncation": "disabled",
    "text": {"format": {"type": "text"}},
    "top_logprobs": 0,
    "previous_response_id": None,
    "conversation": None,
    "include": [],
    "stream_options": None,
}
_STATEFUL = {
    "previous_response_id": "needs a stored response; the harnessopt gateway stores none: send the whole input",
    "conversation": "needs a stored conversation; the harnessopt gateway stores none: send the whole input",
    "background": "runs the response in the background; the harnessopt gateway answers in the request",
}
_INCLUDE_OK = {"reasoning.encrypted_content"}
_THINKING_BUDGET = {"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}
_NO_THINKING = {None, "none", "minimal"}
_REASONING_PREFIX = "ho-thinking:"  # encrypted_content the gateway wrote: a thinking block, base64 JSON


def responses_request_to_messages(body: dict[str, Any], default_max_tokens: int) -> dict[str, Any]:
    """A Responses API request (``stream`` removed) as the equivalent Messages API request.

    Without ``max_output_tokens`` the call may use ``default_max_tokens`` (the role's cap).
    """
    _check_fields(body)
    out: dict[str, Any] = {"model": body.get("model")}
    max_tokens = body.get("max_output_tokens")
    out["max_tokens"] = default_max_tokens if max_tokens is None else max_tokens
    system, messages = _input_messages(body.get("input"))
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise bad("instructions", "must be a string")
    system = [instructions, *system] if instructions else system
    if system:
        out["system"] = "\n\n".join(system)
    out["messages"] = messages
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    effort = (body.get("reasoning") or {}).get("effort")
    if effort not in _NO_THINKING:
        if effort not in _THINKING_BUDGET:
            raise bad("reasoning.effort", f"{effort!r} is not supported (none, minimal, low, medium, high)")
        budget = min(_THINKING_BUDGET[effort], out["max_tokens"] - 1)
        if budget < 1024:
            raise bad("reasoning.effort", f"{effort!r} needs max_output_tokens over 1024 for its thinking")
        out["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if body.get("tools"):
        out["tools"] = [_tool(i, t) for i, t in enumerate(body["tools"])]
    choice = _tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    if body.get("user") or body.get("safety_identifier"):
        out["metadata"] = {"user_id": str(body.get("user") or body.get("safety_identifier"))}
    return out


def _check_fields(body: dict[str, Any]) -> None:
    for key, value in body.items():
        if key in _FIELDS or key in _HINTS:
            continue
        if key in _NEUTRAL and value == _NEUTRAL[key]:
            continue
        if key in _STATEFUL:
            raise bad(key, _STATEFUL[key])
        if key == "include" and isinstance(value, list) and set(value) <= _INCLUDE_OK:
            continue
        if (
            key == "text"
            and isinstance(value, dict)
            and value.get("format", {"type": "text"}) == {"type": "text"}
        ):
            continue  # verbosity and the plain text format: nothing to translate
        raise bad(key, "has no Messages API equivalent; the harnessopt gateway does not support it")
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise bad("reasoning", "must be an object")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("metadata", "must be an object")


def _input_messages(items: Any) -> tuple[list[str], list[dict[str, Any]]]:
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise bad("input", "is required (a string or a non-empty list of items)")
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(where, "must be an object")
        kind = item.get("type", "message")
        role, blocks = _item_blocks(item, kind, where)
        if role == "system":
            system.append(plain_text(blocks, f"{where}.content"))
            continue
        if not blocks:
            continue
        if out and out[-1]["role"] == role:  # calls join their turn; results and a user turn are one message
            out[-1]["content"] = _as_blocks(out[-1]["content"]) + _as_blocks(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _item_blocks(item: dict[str, Any], kind: Any, where: str) -> tuple[str, Any]:
    if kind == "message":
        role = item.get("role")
        if role in ("system", "developer"):
            return "system", _content(item.get("content"), f"{where}.content", text_only=True)
        if role not in ("user", "assistant"):
            raise bad(f"{where}.role", f"{role!r} is not supported (system, developer, user, assistant)")
        return str(role), _content(item.get("content"), f"{where}.content")
    if kind == "function_call":
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad(f"{where}.call_id", "is required")
        if item.get("namespace"):
            raise bad(f"{where}.namespace", "namespaced tools are not supported")
        block = {"type": "tool_use", "id": call_id, "name": item.get("name")}
        return "assistant", [block | {"input": arguments(item.get("arguments"), f"{where}.arguments")}]
    if kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad(f"{where}.call_id", "is required")
        output = item.get("output")
        text = output if isinstance(output, str) else plain_text(_text_parts(output), f"{where}.output")
        return "user", [{"type": "tool_result", "tool_use_id": call_id, "content": text}]
    if kind == "reasoning":
        thinking = _thinking_of(item.get("encrypted_content"))
        return "assistant", [thinking] if thinking else []  # another model's reasoning: not replayable
    if kind == "item_reference":
        raise bad(f"{where}.type", "'item_reference' needs stored items; the harnessopt gateway stores none")
    raise bad(
        f"{where}.type",
        f"{kind!r} has no Messages API equivalent (message, function_call, function_call_output, reasoning)",
    )


def _content(content: Any, where: str, text_only: bool = False) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, "must be a string or a list of content parts")
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            blocks.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image" and not text_only:
            blocks.append(_image(part, f"{where}[{j}]"))
        else:
            raise bad(
                f"{where}[{j}].type",
                f"{kind!r} has no Messages API equivalent here (input_text"
                f"{'' if text_only else ', output_text, input_image'})",
            )
    return blocks


def _text_parts(output: Any) -> Any:
    """A function_call_output's list of parts as text blocks (``input_text`` -> ``text``)."""
    if not isinstance(output, list):
        return output
    return [
        {"type": "text", "text": p.get("text", "")}
        if isinstance(p, dict) and p.get("type") in ("input_text", "output_text")
        else p
        for p in output
    ]


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = part.get("image_url")
    if part.get("file_id") or not isinstance(url, str):
        raise bad(f"{where}.image_url", "is required (file_id needs stored files; the gateway has none)")
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": head, "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise bad(f"{where}.image_url", "must be a base64 data: URL of an image or an http(s) URL")


def _as_blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _thinking_of(encrypted: Any) -> dict[str, Any] | None:
    if not isinstance(encrypted, str) or not encrypted.startswith(_REASONING_PREFIX):
        return None
    try:
        block = json.loads(base64.b64decode(encrypted[len(_REASONING_PREFIX) :]))
    except ValueError:
        return None
    return (
        block if isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking") else None
    )


def _tool(i: int, tool: Any) -> dict[str, Any]:
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise bad(
            f"tools[{i}].type",
            f"{kind!r} is not supported: only function tools (hosted tools such as "
            "web_search and file_search run on OpenAI's side and have no equivalent here)",
        )
    out: dict[str, Any] = {"name": tool.get("name")}
    if tool.get("description"):
        out["description"] = tool["description"]
    out["input_schema"] = tool.get("parameters") or {"type": "object", "properties": {}}
    return out


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    return canonical_tool_choice(choice, parallel, choice.get("name") if isinstance(choice, dict) else None)


# --------------------------------------------------------------------------- response

_INCOMPLETE = {"max_tokens": "max_output_tokens", "model_context_window_exceeded": "max_output_tokens"}
_INCOMPLETE |= {"refusal": "content_filter"}


def messages_response_to_responses(
    message: dict[str, Any], request: dict[str, Any], created: float | None = None
) -> dict[str, Any]:
    """A canonical Messages API response as the Responses API's ``response`` object.

    ``request`` is the harness's own (Responses) request, whose settings the object echoes.
    """
    msg_id = str(message.get("id") or "")
    base = msg_id[4:] if msg_id.startswith("msg_") else msg_id
    output: list[dict[str, Any]] = []
    text: list[dict[str, Any]] = []
    for i, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            text.append(
                {"type": "output_text", "text": block.get("text", ""), "annotations": [], "logprobs": []}
            )
            continue
        if text:  # text before a call is its own message item
            output.append(_message_item(f"msg_{base}_{i}", text))
            text = []
        if kind == "tool_use":
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{base}_{i}",
                    "call_id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": arguments_text(block.get("input")),
                    "status": "completed",
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            summary = [{"type": "summary_text", "text": block["thinking"]}] if block.get("thinking") else []
            sealed = base64.b64encode(json.dumps(block).encode()).decode()
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{base}_{i}",
                    "summary": summary,
                    "encrypted_content": _REASONING_PREFIX + sealed,
                }
            )
    if text:
        output.append(_message_item(f"msg_{base}", text))
    reason = _INCOMPLETE.get(str(message.get("stop_reason")))
    return {
        "id": f"resp_{base}",
        "object": "response",
        "created_at": int(time.time()) if created is None else created,
        "status": "incomplete" if reason else "completed",
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": message.get("model") or request.get("model"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None,
        "reasoning": {"effort": (request.get("reasoning") or {}).get("effort"), "summary": None},
        "store": False,
        "temperature": request.get("temperature"),
        "text": {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": responses_usage(message.get("usage") or {}),
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def _message_item(item_id: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": "completed", "role": "assistant", "content": parts}


def responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Messages API ``usage`` as Responses ``usage`` (input tokens include cached ones)."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    inp = int(usage.get("input_tokens") or 0) + read + int(usage.get("cache_creation_input_tokens") or 0)
    out = int(usage.get("output_tokens") or 0)
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": read},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": inp + out,
    }
