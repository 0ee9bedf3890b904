"""Messages API <-> Chat Completions API, both ways, for requests and responses.

The gateway keeps one canonical form, Messages API bodies: what the transcript, the trajectory
renderer, the lease policy and the budget see whatever API the harness spoke and whatever
upstream answered. So a harness speaking Chat Completions has its request translated here to a
Messages body (``chat_request_to_messages``) and gets the canonical answer back as a chat
completion (``messages_response_to_chat``); an ``openai`` upstream gets the canonical request as
a chat request (``messages_request_to_chat``) and its answer is made canonical
(``chat_response_to_messages``).

What is translated: system prompt (system/developer messages <-> ``system``), text, images
(base64 data URLs <-> base64 sources; URLs <-> ``url`` sources), tool definitions (custom tools
<-> functions; the optimizer's ``bash_*``/``text_editor_*`` tools get their documented input
schemas), tool calls and results, ``tool_choice`` and parallel tool use, stop sequences, stop
reasons, usage. What one side has and the other does not is refused with a 400
``invalid_request_error`` whose message starts with the field (``n: ...``), never dropped
silently; the few hints that are accepted and ignored are listed in docs/models.md.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from harnessopt.protocols import ModelError

RAW_ARGUMENTS = "_raw_arguments"  # tool_use input key of arguments that were not a JSON object

BASH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The bash command to run."},
        "restart": {"type": "boolean", "description": "Restart the shell instead of running a command."},
    },
}
EDITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
        "path": {"type": "string", "description": "Absolute path of the file or directory."},
        "file_text": {"type": "string", "description": "create: the new file's content."},
        "old_str": {"type": "string", "description": "str_replace: the exact text to replace."},
        "new_str": {"type": "string", "description": "str_replace/insert: the new text."},
        "insert_line": {"type": "integer", "description": "insert: the line after which to insert."},
        "view_range": {"type": "array", "items": {"type": "integer"}, "description": "view: [start, end]."},
    },
    "required": ["command", "path"],
}
_TYPED_TOOLS = {
    "bash_": ("Run a bash command; each command runs in a fresh shell.", BASH_SCHEMA),
    "text_editor_": ("View, create and edit text files.", EDITOR_SCHEMA),
}

_CHAT_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_MESSAGES_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_MESSAGES_STOP |= {"function_call": "tool_use", "content_filter": "refusal"}

# Chat request fields taken over, and those refused unless they hold their neutral value.
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
_MESSAGES_FIELDS = {"model", "messages", "system", "max_tokens", "temperature", "top_p"}
_MESSAGES_FIELDS |= {"stop_sequences", "tools", "tool_choice", "metadata"}


def bad(field: str, what: str) -> ModelError:
    """The 400 that names the field: ``field: what``."""
    return ModelError(400, "invalid_request_error", f"{field}: {what}")


# --------------------------------------------------------------------------- chat -> messages


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
            system.append(_plain_text(m.get("content"), f"{where}.content"))
            continue
        blocks: str | list[dict[str, Any]]
        if role == "user":
            content = m.get("content")
            blocks = content if isinstance(content, str) else _chat_content(content, f"{where}.content")
        elif role == "assistant":
            blocks = _assistant_blocks(m, where)
        elif role == "tool":
            text = _plain_text(m.get("content"), f"{where}.content")
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


def _plain_text(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for j, part in enumerate(content if isinstance(content, list) else [None]):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise bad(f"{where}[{j}]", "only text parts are supported here")
        parts.append(str(part.get("text", "")))
    return "".join(parts)


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
    text = _plain_text(content, f"{where}.content") if content is not None else ""
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
                "input": _arguments(fn.get("arguments"), f"{where}.tool_calls[{k}].function.arguments"),
            }
        )
    return blocks


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {RAW_ARGUMENTS: raw if isinstance(raw, str) else json.dumps(raw)}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: raw}


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
    if choice is None and parallel in (None, True):
        return None
    if choice in (None, "auto"):
        out: dict[str, Any] = {"type": "auto"}
    elif choice == "none":
        out = {"type": "none"}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        out = {"type": "tool", "name": (choice.get("function") or {}).get("name")}
    else:
        raise bad("tool_choice", f"{choice!r} is not supported (auto, none, required, a function)")
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


# --------------------------------------------------------------------------- messages -> chat


def messages_response_to_chat(message: dict[str, Any], created: int | None = None) -> dict[str, Any]:
    """A Messages API response as the chat completion a Chat Completions client expects."""
    text = "".join(str(b.get("text", "")) for b in message.get("content") or [] if b.get("type") == "text")
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": _arguments_text(b.get("input"))},
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


def _arguments_text(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {RAW_ARGUMENTS}:
        return str(value[RAW_ARGUMENTS])  # what the model wrote, handed back as it was
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


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


def messages_request_to_chat(body: dict[str, Any], *, token_field: str = "max_tokens") -> dict[str, Any]:
    """A Messages API request as a Chat Completions request (``token_field`` names max_tokens)."""
    for key in body:
        if key not in _MESSAGES_FIELDS:
            raise bad(key, "has no Chat Completions equivalent; the openai upstream does not support it")
    out: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _blocks_text(body["system"], "system")})
    for i, m in enumerate(body.get("messages") or []):
        messages.extend(_to_chat_messages(m, f"messages[{i}]"))
    out["messages"] = messages
    out[token_field] = body.get("max_tokens")
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if body.get("stop_sequences"):
        out["stop"] = list(body["stop_sequences"])
    if body.get("tools"):
        out["tools"] = [_function_of(i, t) for i, t in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        names = {"auto": "auto", "any": "required", "none": "none"}
        if kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind in names:
            out["tool_choice"] = names[kind]
        else:
            raise bad("tool_choice.type", f"{kind!r} is not supported (auto, any, tool, none)")
        if choice.get("disable_parallel_tool_use"):
            out["parallel_tool_calls"] = False
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        out["user"] = str(user)
    return out


def _blocks_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for j, block in enumerate(content if isinstance(content, list) else []):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else None
            raise bad(f"{where}[{j}].type", f"{kind!r} is not supported here (text only)")
        parts.append(str(block.get("text", "")))
    return "".join(parts)


def _to_chat_messages(m: dict[str, Any], where: str) -> list[dict[str, Any]]:
    role, content = m.get("role"), m.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if role == "assistant":
        text, calls = [], []
        for j, block in enumerate(content or []):
            kind = block.get("type")
            if kind == "text":
                text.append(str(block.get("text", "")))
            elif kind == "tool_use":
                fn = {"name": block.get("name"), "arguments": _arguments_text(block.get("input"))}
                calls.append({"id": block.get("id"), "type": "function", "function": fn})
            else:
                raise bad(f"{where}.content[{j}].type", f"{kind!r} has no Chat Completions equivalent")
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
        if calls:
            reply["tool_calls"] = calls
        return [reply]
    results: list[dict[str, Any]] = []  # tool messages come right after the assistant's calls
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(content or []):
        kind, at = block.get("type"), f"{where}.content[{j}]"
        if kind == "tool_result":
            said = _blocks_text(block.get("content") or "", f"{at}.content")
            if block.get("is_error"):
                said = f"Error: {said}"
            results.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": said})
        elif kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block.get("source"), at)}})
        else:
            raise bad(f"{at}.type", f"{kind!r} has no Chat Completions equivalent")
    if parts and all(p["type"] == "text" for p in parts):
        return results + [{"role": role, "content": "".join(p["text"] for p in parts)}]
    return results + ([{"role": role, "content": parts}] if parts else [])


def _image_url(source: Any, where: str) -> str:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if kind == "url":
        return str(source.get("url"))
    raise bad(f"{where}.source.type", f"{kind!r} has no Chat Completions equivalent (base64, url)")


def _function_of(i: int, tool: dict[str, Any]) -> dict[str, Any]:
    kind = tool.get("type")
    if kind in (None, "custom"):
        fn = {"name": tool.get("name"), "description": tool.get("description", "")}
        fn["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
        return {"type": "function", "function": fn}
    for prefix, (description, schema) in _TYPED_TOOLS.items():
        if isinstance(kind, str) and kind.startswith(prefix):
            fn = {"name": tool.get("name"), "description": description, "parameters": schema}
            return {"type": "function", "function": fn}
    raise bad(f"tools[{i}].type", f"{kind!r} has no Chat Completions equivalent")


def chat_response_to_messages(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """An upstream chat completion as a Messages API response (``model``: the request's)."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError(502, "api_error", "upstream returned a chat completion without choices")
    choice = choices[0]
    reply = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": _plain_text(reply["content"], "choices[0].message.content")})
    for call in reply.get("tool_calls") or []:
        fn = call.get("function") or {}
        block = {"type": "tool_use", "id": str(call.get("id") or ""), "name": fn.get("name")}
        content.append(block | {"input": _arguments(fn.get("arguments"), "tool_calls")})
    stop = _MESSAGES_STOP.get(str(choice.get("finish_reason")), "end_turn")
    if any(b["type"] == "tool_use" for b in content):
        stop = "tool_use"  # some servers say "stop" after tool calls
    usage = completion.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    msg_id = str(completion.get("id") or "")
    return {
        "id": "msg_" + re.sub(r"^chatcmpl-", "", msg_id),
        "type": "message",
        "role": "assistant",
        "model": completion.get("model") or model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(int(usage.get("prompt_tokens") or 0) - cached, 0),
            "cache_read_input_tokens": cached,
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
    }
