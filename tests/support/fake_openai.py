"""A local stand-in for an OpenAI-compatible Chat Completions (and Responses API) endpoint, for tests.

    with FakeOpenAIServer(lambda request: {...chat completion...}) as fake:
        model = OpenAIModel("any-key", fake.base_url + "/v1")
        ...
        fake.requests  # every request: {"path", "headers", "body", "stream"}

The callable gets the request dict and returns a chat completion body (for ``/v1/responses``
a ``response`` object, see ``response``), or raises
``ModelError(status, type, message)`` to answer with an error in the Chat Completions format
(the gateway's own HTTP code writes it). Any key is accepted.

A ``/v1/responses`` request is first checked as strictly as the real API checks it
(``check_responses_request``): unknown parameters, item and content-part types per role, the
required fields of each item, and tool-call pairing (every ``function_call_output`` answers an
earlier ``function_call`` with its ``call_id``; every ``function_call`` has its output before
the conversation goes on). A request that fails is a 400 and never reaches the callable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harnessopt.gateway.chat_wire import CHAT_PATH
from harnessopt.gateway.http import ApiCall, MessagesServer
from harnessopt.gateway.responses_wire import RESPONSES_PATH
from harnessopt.protocols import ModelError

RequestFn = Callable[[dict[str, Any]], dict[str, Any]]


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish: str = "stop",
    usage: tuple[int, int] | None = (11, 7),
    model: str = "gpt-test",
) -> dict[str, Any]:
    """A chat completion as an OpenAI-compatible server returns it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-up1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class FakeOpenAIServer:
    def __init__(self, fn: RequestFn):
        self._fn = fn
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self._server = MessagesServer(self._handle)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI client's base_url is."""
        return self._server.base_url + "/v1"

    def _handle(self, call: ApiCall) -> dict[str, Any]:
        request = {"path": call.path, "headers": call.headers, "body": call.body, "stream": call.streamed}
        with self._lock:
            self.requests.append(request)
        if call.path == RESPONSES_PATH:
            check_responses_request(call.body)
        elif call.path != CHAT_PATH:
            raise ModelError(404, "not_found_error", f"no such endpoint: {call.path}")
        elif not isinstance(call.body, dict) or "model" not in call.body or not call.body.get("messages"):
            # as the real API: refused before any model runs (the pre-run check's empty body)
            raise ModelError(400, "invalid_request_error", "you must provide a model parameter and messages")
        return self._fn(request)

    def __enter__(self) -> FakeOpenAIServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


# --------------------------------------------------------------------------- Responses API

_RESPONSES_PARAMS = {
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "store",
    "include",
    "prompt_cache_key",
    "client_metadata",
    "metadata",
    "user",
    "text",
    "truncation",
    "previous_response_id",
    "background",
    "service_tier",
    "safety_identifier",
    "stream_options",
    "top_logprobs",
    "conversation",
    "max_tool_calls",
}
_PARTS = {
    "user": {"input_text", "input_image", "input_file"},
    "system": {"input_text"},
    "developer": {"input_text"},
    "assistant": {"output_text", "refusal"},
}


def _bad(param: str, message: str) -> ModelError:
    return ModelError(400, "invalid_request_error", f"{param}: {message}")


def check_responses_request(body: dict[str, Any]) -> None:
    """The 400s the real Responses API answers for a malformed request (see the module doc)."""
    for key in body:
        if key not in _RESPONSES_PARAMS:
            raise _bad(key, f"Unknown parameter: '{key}'.")
    if not isinstance(body.get("model"), str):
        raise _bad("model", "Missing required parameter: 'model'.")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _bad("input", "Invalid type for 'input': expected a string or an array.")
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            if open_calls:
                raise _bad("input", f"No tool output found for function call {next(iter(open_calls))}.")
            role = item.get("role")
            if role not in _PARTS:
                raise _bad(f"input[{i}].role", f"Invalid value: '{role}'.")
            content = item.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                if part.get("type") not in _PARTS[role]:
                    allowed = ", ".join(sorted(_PARTS[role]))
                    raise _bad(
                        f"input[{i}].content[{j}].type",
                        f"Invalid value: '{part.get('type')}'. Supported values are: {allowed}.",
                    )
                if "text" in part["type"] and not isinstance(part.get("text"), str):
                    raise _bad(f"input[{i}].content[{j}].text", "Missing required parameter.")
            if not isinstance(content, str | list):
                raise _bad(f"input[{i}].content", "Missing required parameter.")
        elif kind == "function_call":
            for field in ("call_id", "name", "arguments"):
                if not isinstance(item.get(field), str):
                    raise _bad(f"input[{i}].{field}", "Missing required parameter.")
            open_calls[item["call_id"]] = i
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in open_calls or call_id in answered:
                raise _bad("input", f"No tool call found for function call output with call_id {call_id}.")
            if not isinstance(item.get("output"), str | list):
                raise _bad(f"input[{i}].output", "Missing required parameter.")
            del open_calls[call_id]
            answered.add(call_id)
        elif kind == "reasoning":
            if not isinstance(item.get("summary"), list):
                raise _bad(f"input[{i}].summary", "Missing required parameter.")
        else:
            raise _bad(f"input[{i}].type", f"Invalid value: '{kind}'.")
    if open_calls:
        raise _bad("input", f"No tool output found for function call {next(iter(open_calls))}.")
    for i, tool in enumerate(body.get("tools") or []):
        if tool.get("type") == "function" and not isinstance(tool.get("name"), str):
            raise _bad(f"tools[{i}].name", "Missing required parameter.")


def response(
    text: str | None = None,
    calls: list[tuple[str, str, str]] | None = None,
    usage: tuple[int, int] | None = (11, 7),
    model: str = "gpt-test",
    incomplete: str | None = None,
) -> dict[str, Any]:
    """A Responses API ``response`` object; ``calls`` are (call_id, name, arguments) function calls."""
    output: list[dict[str, Any]] = []
    if text is not None:
        part = {"type": "output_text", "text": text, "annotations": []}
        output.append(
            {
                "type": "message",
                "id": "msg_up1",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    for k, (call_id, name, args) in enumerate(calls or []):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_up{k}",
                "call_id": call_id,
                "name": name,
                "arguments": args,
                "status": "completed",
            }
        )
    body: dict[str, Any] = {
        "id": "resp_up1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if usage is not None:
        body["usage"] = {
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": sum(usage),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return body
