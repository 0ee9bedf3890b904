"""A local stand-in for the real Messages API, for tests.

    with FakeAnthropicServer(ScriptedModel.from_dict({...})) as fake:
        client = Anthropic(base_url=fake.base_url, api_key="anything")
        ...
        fake.requests  # every raw request, in order

``model_or_fn`` is a ``Model`` (called with role "target") or a callable taking the request
dict (``{"path", "query", "headers", "body", "stream"}``) and returning a response body; either
may raise ``ModelError`` to answer with an API error. Any key is accepted. JSON and SSE are both
served, by the same code the gateway uses.

As strict as the real API where it matters to us: a body field or tool that only exists in a
beta (``context_management``, ``mcp_servers``, ``output_format``, a memory tool, ...) is refused
with a 400 ``invalid_request_error`` naming the field unless the request's ``anthropic-beta``
header lists that beta, which is what the real API does with a client whose beta header was
dropped on the way (Claude Code sends ``context_management`` with
``anthropic-beta: ...,context-management-2025-06-27,...``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.gateway.http import COUNT_TOKENS_PATH, ApiCall, MessagesServer, estimate_input_tokens
from harnessopt.protocols import Model, ModelError

RequestFn = Callable[[dict[str, Any]], dict[str, Any]]

# Body fields and tool types/fields that the real API accepts only with a beta (name prefixes).
BETA_FIELDS: dict[str, tuple[str, ...]] = {
    "context_management": ("context-management-",),
    "mcp_servers": ("mcp-client-",),
    "container": ("code-execution-", "skills-"),
    "output_format": ("structured-outputs-",),
}
# A system-role message among `messages` (Claude Code sends them on newer models, with this beta).
SYSTEM_MESSAGE_BETA = ("mid-conversation-system-",)
BETA_TOOL_TYPES: dict[str, tuple[str, ...]] = {
    "memory_": ("context-management-",),
    "code_execution_": ("code-execution-",),
    "computer_": ("computer-use-",),
    "web_fetch_": ("web-fetch-",),
}
BETA_TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "defer_loading": ("advanced-tool-use-",),
    "input_examples": ("advanced-tool-use-",),
    "strict": ("structured-outputs-",),
}


def check_betas(body: dict[str, Any], headers: dict[str, str]) -> None:
    """ModelError 400 naming the first beta-only field of ``body`` whose beta ``headers`` lack."""
    betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]

    def missing(prefixes: tuple[str, ...]) -> bool:
        return not any(b.startswith(p) for b in betas for p in prefixes)

    messages = body.get("messages")
    for i, m in enumerate(messages if isinstance(messages, list) else []):
        if isinstance(m, dict) and m.get("role") == "system" and missing(SYSTEM_MESSAGE_BETA):
            raise _extra_input(f"messages.{i}.role: 'system'", SYSTEM_MESSAGE_BETA)
    for name, prefixes in BETA_FIELDS.items():
        if name in body and missing(prefixes):
            raise _extra_input(name, prefixes)
    for i, tool in enumerate(body.get("tools") or []):
        if not isinstance(tool, dict):
            continue
        for kind, prefixes in BETA_TOOL_TYPES.items():
            if str(tool.get("type", "")).startswith(kind) and missing(prefixes):
                raise _extra_input(f"tools.{i}.type", prefixes)
        for name, prefixes in BETA_TOOL_FIELDS.items():
            if name in tool and missing(prefixes):
                raise _extra_input(f"tools.{i}.{name}", prefixes)


def _extra_input(where: str, prefixes: tuple[str, ...]) -> ModelError:
    return ModelError(
        400,
        "invalid_request_error",
        f"{where}: Extra inputs are not permitted (a beta field: send anthropic-beta: {prefixes[0]}...)",
    )


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
        request = {
            "path": call.path,
            "query": call.query,
            "headers": call.headers,
            "body": call.body,
            "stream": call.streamed,
        }
        with self._lock:
            self.requests.append(request)
        check_betas(call.body, call.headers)
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
