"""A local stand-in for an OpenAI-compatible Chat Completions endpoint, for tests.

    with FakeOpenAIServer(lambda request: {...chat completion...}) as fake:
        model = OpenAIModel("any-key", fake.base_url + "/v1")
        ...
        fake.requests  # every request: {"path", "headers", "body", "stream"}

The callable gets the request dict and returns a chat completion body, or raises
``ModelError(status, type, message)`` to answer with an error in the Chat Completions format
(the gateway's own HTTP code writes it). Any key is accepted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harnessopt.gateway.chat_wire import CHAT_PATH
from harnessopt.gateway.http import ApiCall, MessagesServer
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
        if call.path != CHAT_PATH:
            raise ModelError(404, "not_found_error", f"no such endpoint: {call.path}")
        return self._fn(request)

    def __enter__(self) -> FakeOpenAIServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
