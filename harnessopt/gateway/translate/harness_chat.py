"""A harness speaking Chat Completions: its request made canonical, the canonical answer made a chat completion.

The canonical form is the Messages API body (see ``harnessopt.gateway.translate``). System and
developer messages are joined into ``system``; tool messages become ``tool_result`` blocks of
one user turn; features without a Messages API equivalent are a 400 naming the field.
"""

from __future__ import annotations

import re
import time
from typing import Any

from harnessopt.gateway.translate.common import (
    arguments,
    arguments_text,
    bad,
    canonical_tool_choice,
    plain_text,
)

_CHAT_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_CHAT_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop"}
_CHAT_FIELDS |= {"tools", "tool_choice", "parallel_tool_calls", "user", "n", "stream_options"}
_CHAT_NEUTRAL: dict[str, Any] = {
    "response_format": {"type": "text"},
    "logprobs": False,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "store": False,
    "seed": None,
    "logit_bias": {},
}


def chat_request_to_messages(body: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions request (``stream`` removed) as the equivalent Messages API request."""
    for key, value in body.items():
        if key in _CHAT_FIELDS:
            continue
        if key in _CHAT_NEUTRAL and value == _CHAT_NEUTRAL[key]:
            continue
        raise bad(key, "has no Messages API equivalent; the harnessopt gateway does not support it")
    if body.get("n", 1) != 1:
        raise bad("n", "only one choice per request is supported")
    out: dict[str, Any] = {"model": body.get("model")}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        raise bad("max_completion_tokens", "is required by the harnessopt gateway (or max_tokens)")
    out["max_tokens"] = max_tokens
    system, messages = _chat_messages(body.get("messages"))
    if system:
        out["system"] = system
    out["messages"] = messages
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("tools"):
        out["tools"] = [_chat_tool(i, t) for i, t in enumerate(body["tools"])]
    choice = _chat_tool_choice(body.get("tool_choice"), body.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    if body.get("user"):
        out["metadata"] = {"user_id": str(body["user"])}
    return out


def _chat_messages(messages: Any) -> tuple[str, list[dict[str, Any]]]:
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "is required (a non-empty list)")
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "must be an object")
        role = m.get("role")
        extra = set(m) - {"role", "content", "tool_calls", "tool_call_id", "refusal"}
        if extra:
            raise bad(f"{where}.{sorted(extra)[0]}", "is not supported by the harnessopt gateway")
        if role in ("system", "developer"):
            system.append(plain_text(m.get("content"), f"{where}.content"))
            continue
        blocks: str | list[dict[str, Any]]
        if role == "user":
            content = m.get("content")
            blocks = content if isinstance(content, str) else _chat_content(content, f"{where}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(m, where)
        elif role == "tool":
            text = plain_text(m.get("content"), f"{where}.content")
            blocks = [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text}]
            role = "user"
        else:
            raise bad(
                f"{where}.role", f"{role!r} is not supported (system, developer, user, assistant, tool)"
            )
        if out and out[-1]["role"] == role:  # tool results and a following user turn are one message
            out[-1]["content"] = _as_blocks(out[-1]["content"]) + _as_blocks(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s), out


def _as_blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _chat_content(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad(where, "must be a string or a list of content parts")
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            blocks.append(_image_block(part.get("image_url"), f"{where}[{j}].image_url"))
        else:
            raise bad(f"{where}[{j}].type", f"{kind!r} has no Messages API equivalent (text, image_url)")
    return blocks


def _image_block(image: Any, where: str) -> dict[str, Any]:
    if not isinstance(image, dict) or not isinstance(image.get("url"), str):
        raise bad(f"{where}.url", "is required")
    if image.get("detail", "auto") not in ("auto", "high"):
        raise bad(f"{where}.detail", f"{image.get('detail')!r} is not supported (auto, high)")
    url = image["url"]
    match = re.fullmatch(r"data:(image/[\w.+-]+);base64,(.*)", url, re.S)
    if match:
        return {"type": "image", "source": {"type": "base64", "media_type": match[1], "data": match[2]}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise bad(f"{where}.url", "must be a base64 data: URL of an image or an http(s) URL")


def _assistant_blocks(m: dict[str, Any], where: str) -> str | list[dict[str, Any]]:
    content = m.get("content")
    text = plain_text(content, f"{where}.content") if content is not None else ""
    if not m.get("tool_calls"):
        return text  # an empty turn too: the upstream says what it thinks of it
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for k, call in enumerate(m.get("tool_calls") or []):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or call.get("type", "function") != "function":
            raise bad(f"{where}.tool_calls[{k}].type", "only function tool calls are supported")
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or ""),
                "name": fn.get("name"),
                "input": arguments(fn.get("arguments"), f"{where}.tool_calls[{k}].function.arguments"),
            }
        )
    return blocks


def _chat_tool(i: int, tool: Any) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
        raise bad(f"tools[{i}].type", "only function tools are supported")
    out: dict[str, Any] = {"name": fn.get("name")}
    if fn.get("description"):
        out["description"] = fn["description"]
    out["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def _chat_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    return canonical_tool_choice(choice, parallel, name)


def messages_response_to_chat(message: dict[str, Any], created: int | None = None) -> dict[str, Any]:
    """A Messages API response as the chat completion a Chat Completions client expects."""
    text = "".join(str(b.get("text", "")) for b in message.get("content") or [] if b.get("type") == "text")
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": arguments_text(b.get("input"))},
        }
        for b in message.get("content") or []
        if b.get("type") == "tool_use"
    ]
    reply: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        reply["tool_calls"] = calls
    finish = _CHAT_STOP.get(str(message.get("stop_reason")), "stop")
    msg_id = str(message.get("id") or "")
    return {
        "id": "chatcmpl-" + (msg_id[4:] if msg_id.startswith("msg_") else msg_id),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": message.get("model"),
        "choices": [{"index": 0, "message": reply, "finish_reason": finish, "logprobs": None}],
        "usage": chat_usage(message.get("usage") or {}),
    }


def chat_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Messages API ``usage`` as Chat Completions ``usage`` (prompt tokens include cached ones)."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + read + int(usage.get("cache_creation_input_tokens") or 0)
    completion = int(usage.get("output_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": read},
    }
