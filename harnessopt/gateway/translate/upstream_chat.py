"""An upstream speaking Chat Completions: the canonical request made a chat request, its answer made canonical.

Used by the ``openai`` model. The optimizer's Anthropic-defined client tools (``bash_*``,
``text_editor_*``) have no schema of their own; they get their documented input schemas here.
Features without a Chat Completions equivalent are a 400 naming the field.
"""

from __future__ import annotations

import re
from typing import Any

from harnessopt.gateway.translate.common import (
    arguments,
    arguments_text,
    bad,
    canonical_response,
    openai_tool_choice,
    plain_text,
)
from harnessopt.protocols import ModelError

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

_MESSAGES_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_MESSAGES_STOP |= {"function_call": "tool_use", "content_filter": "refusal"}

# Chat request fields taken over, and those refused unless they hold their neutral value.
_MESSAGES_FIELDS = {"model", "messages", "system", "max_tokens", "temperature", "top_p"}
_MESSAGES_FIELDS |= {"stop_sequences", "tools", "tool_choice", "metadata"}


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
        out.update(openai_tool_choice(choice, lambda name: {"type": "function", "function": {"name": name}}))
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
                fn = {"name": block.get("name"), "arguments": arguments_text(block.get("input"))}
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
        content.append({"type": "text", "text": plain_text(reply["content"], "choices[0].message.content")})
    for call in reply.get("tool_calls") or []:
        fn = call.get("function") or {}
        block = {"type": "tool_use", "id": str(call.get("id") or ""), "name": fn.get("name")}
        content.append(block | {"input": arguments(fn.get("arguments"), "tool_calls")})
    stop = _MESSAGES_STOP.get(str(choice.get("finish_reason")), "end_turn")
    usage = completion.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    msg_id = "msg_" + re.sub(r"^chatcmpl-", "", str(completion.get("id") or ""))
    tokens = (int(usage.get("prompt_tokens") or 0), cached, int(usage.get("completion_tokens") or 0))
    return canonical_response(msg_id, completion.get("model") or model, content, stop, tokens)
