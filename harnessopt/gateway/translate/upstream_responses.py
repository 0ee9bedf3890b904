"""An upstream serving the Responses API: the canonical request made a Responses request, its answer made canonical.

Used by the ``openai`` model with ``model.wire_api: responses``. ``system`` becomes
``instructions``; each turn's text a message item, its ``tool_use`` blocks ``function_call``
items and ``tool_result`` blocks ``function_call_output`` items; thinking becomes
``reasoning.effort``. Nothing is stored upstream (``store: false``): every request carries the
whole conversation, as the gateway's canonical form does. Features without a Responses
equivalent (``stop_sequences``, ``top_k``, ...) are a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from harnessopt.gateway.translate.common import (
    arguments,
    arguments_text,
    bad,
    canonical_response,
    openai_tool_choice,
)
from harnessopt.gateway.translate.upstream_chat import _TYPED_TOOLS
from harnessopt.protocols import ModelError

_FIELDS = {"model", "messages", "system", "max_tokens", "temperature", "top_p", "tools", "tool_choice"}
_FIELDS |= {"metadata", "thinking"}
_STOP = {"max_output_tokens": "max_tokens", "content_filter": "refusal"}


def messages_request_to_responses(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages API request as a Responses API request (not stored, not streamed)."""
    for key in body:
        if key not in _FIELDS:
            raise bad(key, "has no Responses API equivalent; the openai upstream does not support it")
    out: dict[str, Any] = {"model": body.get("model"), "store": False}
    system = body.get("system")
    if system:
        out["instructions"] = system if isinstance(system, str) else _text(system, "system")
    items: list[dict[str, Any]] = []
    for i, m in enumerate(body.get("messages") or []):
        items.extend(_items(m, f"messages[{i}]"))
    out["input"] = items
    out["max_output_tokens"] = body.get("max_tokens")
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    thinking = body.get("thinking") or {}
    if thinking.get("type") == "enabled":
        budget = int(thinking.get("budget_tokens") or 0)
        out["reasoning"] = {"effort": "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"}
    if body.get("tools"):
        out["tools"] = [_tool(i, t) for i, t in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        out.update(openai_tool_choice(choice, lambda name: {"type": "function", "name": name}))
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        out["user"] = str(user)
    return out


def _text(blocks: Any, where: str) -> str:
    parts = []
    for j, block in enumerate(blocks if isinstance(blocks, list) else []):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise bad(f"{where}[{j}].type", "only text is supported here")
        parts.append(str(block.get("text", "")))
    return "".join(parts)


def _items(m: dict[str, Any], where: str) -> list[dict[str, Any]]:
    role, content = m.get("role"), m.get("content")
    part = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        return [{"type": "message", "role": role, "content": [{"type": part, "text": content}]}]
    items: list[dict[str, Any]] = []
    for j, block in enumerate(content or []):
        kind, at = block.get("type"), f"{where}.content[{j}]"
        if kind == "text":
            text = {"type": part, "text": str(block.get("text", ""))}
            if items and items[-1]["type"] == "message":
                items[-1]["content"].append(text)
            else:
                items.append({"type": "message", "role": role, "content": [text]})
        elif kind == "image" and role == "user":
            items.append({"type": "message", "role": role, "content": [_image(block.get("source"), at)]})
        elif kind == "tool_use":
            args = arguments_text(block.get("input"))
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": args,
                }
            )
        elif kind == "tool_result":
            said = block.get("content") or ""
            said = said if isinstance(said, str) else _text(said, f"{at}.content")
            if block.get("is_error"):
                said = f"Error: {said}"
            items.append(
                {"type": "function_call_output", "call_id": block.get("tool_use_id"), "output": said}
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the upstream keeps no reasoning between stateless calls
        else:
            raise bad(f"{at}.type", f"{kind!r} has no Responses API equivalent")
    return items


def _image(source: Any, where: str) -> dict[str, Any]:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif kind == "url":
        url = str(source.get("url"))
    else:
        raise bad(f"{where}.source.type", f"{kind!r} has no Responses API equivalent (base64, url)")
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _tool(i: int, tool: dict[str, Any]) -> dict[str, Any]:
    kind = tool.get("type")
    if kind in (None, "custom"):
        schema = tool.get("input_schema") or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "name": tool.get("name"),
            "description": tool.get("description", ""),
            "parameters": schema,
            "strict": False,
        }
    for prefix, (description, schema) in _TYPED_TOOLS.items():
        if isinstance(kind, str) and kind.startswith(prefix):
            return {
                "type": "function",
                "name": tool.get("name"),
                "description": description,
                "parameters": schema,
                "strict": False,
            }
    raise bad(f"tools[{i}].type", f"{kind!r} has no Responses API equivalent")


def responses_response_to_messages(response: dict[str, Any], model: str) -> dict[str, Any]:
    """An upstream Responses API ``response`` as a Messages API response (``model``: the request's)."""
    output = response.get("output")
    if not isinstance(output, list):
        raise ModelError(502, "api_error", "upstream returned a response without an output list")
    if response.get("status") == "failed":
        error = response.get("error") or {}
        raise ModelError(502, "api_error", f"upstream response failed: {error.get('message') or error}")
    content: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    content.append({"type": "text", "text": str(part.get("text", ""))})
                elif part.get("type") == "refusal":
                    content.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "function_call":
            block = {"type": "tool_use", "id": str(item.get("call_id") or ""), "name": item.get("name")}
            content.append(block | {"input": arguments(item.get("arguments"), "output.arguments")})
        # reasoning items: not replayable to a stateless upstream without its encrypted content
    details = response.get("incomplete_details") or {}
    stop = (
        _STOP.get(str(details.get("reason")), "end_turn")
        if response.get("status") == "incomplete"
        else "end_turn"
    )
    usage = response.get("usage") or {}
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    resp_id = str(response.get("id") or "")
    msg_id = "msg_" + (resp_id[5:] if resp_id.startswith("resp_") else resp_id)
    tokens = (int(usage.get("input_tokens") or 0), cached, int(usage.get("output_tokens") or 0))
    return canonical_response(msg_id, response.get("model") or model, content, stop, tokens)
