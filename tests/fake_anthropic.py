"""A local stand-in for the real Messages API, for tests.

    with FakeAnthropicServer(ScriptedModel.from_dict({...})) as fake:
        client = Anthropic(base_url=fake.base_url, api_key="anything")
        ...
        fake.requests  # every raw request, in order

``model_or_fn`` is a ``Model`` (called with role "target") or a callable taking the request
dict (``{"path", "headers", "body", "stream"}``) and returning a response body; either may raise
``ModelError`` to answer with an API error. Any key is accepted. JSON and SSE are both served,
by the same code the gateway uses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.messages_http import COUNT_TOKENS_PATH, ApiCall, MessagesServer, estimate_input_tokens
from harnessopt.protocols import Model

RequestFn = Callable[[dict[str, Any]], dict[str, Any]]


class FakeAnthropicServer:
    def __init__(self, model_or_fn: Model | RequestFn, *, socket_path: Path | None = None):
        self._target = model_or_fn
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self._server = MessagesServer(self._handle, socket_path=socket_path)

    @property
    def base_url(self) -> str:
        return self._server.base_url

    def _handle(self, call: ApiCall) -> dict[str, Any]:
        request = {"path": call.path, "headers": call.headers, "body": call.body, "stream": call.streamed}
        with self._lock:
            self.requests.append(request)
        if call.path == COUNT_TOKENS_PATH:
            return {"input_tokens": estimate_input_tokens(call.body)}
        create = getattr(self._target, "create", None)
        if create is not None:
            return create(call.body, "target")
        return self._target(request)  # type: ignore[operator]

    def __enter__(self) -> FakeAnthropicServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
