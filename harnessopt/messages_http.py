"""HTTP plumbing shared by every Messages API server harnessopt runs (gateway, test fakes).

A server here knows the wire format and nothing about models: it parses ``POST /v1/messages``
and ``POST /v1/messages/count_tokens``, hands an ``ApiCall`` to a backend callable, and writes
the reply. Backends are always non-streaming; when the client asked for ``"stream": true`` the
full message is replayed as the SSE event sequence the real API sends, which is what the
anthropic SDK's ``messages.stream()`` and ``create(stream=True)`` parse. Errors are Anthropic
error JSON with ``x-should-retry: false`` when retrying cannot help (so the SDK does not spend
its retries on a spent budget or a bad token).

One backend can be served on a loopback TCP port and on a Unix socket at the same time; the
socket is what a container without network reaches through a bind mount.
"""

from __future__ import annotations

import json
import math
import os
import socketserver
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harnessopt.protocols import ModelError

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
MAX_BODY_BYTES = 32 * 1024 * 1024  # the real API's request size limit

_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class ApiCall:
    """One parsed request: ``path`` is MESSAGES_PATH or COUNT_TOKENS_PATH, ``body`` has no ``stream``."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-cased names
    streamed: bool = False
    raw: bytes = b""
    extra: dict[str, Any] = field(default_factory=dict)
    query: str = ""  # the request path's query string without "?", e.g. "beta=true"

    def api_key(self) -> str | None:
        """The caller's key, from ``x-api-key`` or ``Authorization: Bearer``."""
        if key := self.headers.get("x-api-key"):
            return key
        auth = self.headers.get("authorization", "")
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None


# A backend returns the non-streaming response body (or {"input_tokens": n} for count_tokens)
# and raises ModelError for an API error.
Backend = Callable[[ApiCall], dict[str, Any]]


# --------------------------------------------------------------------------- token estimate


def text_of(content: Any) -> str:
    """Plain text of a message ``content`` or ``system`` value (str or list of blocks).

    Text blocks give their text, tool_result blocks the text of their content, tool_use blocks
    their JSON input; images and other blocks give nothing.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else [content]:
        if isinstance(block, str):
            parts.append(block)
        elif not isinstance(block, dict):
            continue
        elif block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(text_of(block.get("content")))
        elif block.get("type") in ("tool_use", "server_tool_use"):
            parts.append(json.dumps(block.get("input", {}), ensure_ascii=False))
        elif block.get("type") == "thinking":
            parts.append(str(block.get("thinking", "")))
    return "\n".join(p for p in parts if p)


def estimate_tokens(text: str) -> int:
    """Rough token count used where no tokenizer is available: ceil(chars / 4)."""
    return math.ceil(len(text) / 4)


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """Estimated input tokens of a request body: system, messages and tool definitions."""
    chars = len(text_of(body.get("system")))
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            chars += len(text_of(message.get("content")))
    if body.get("tools"):
        chars += len(json.dumps(body["tools"], ensure_ascii=False))
    return math.ceil(chars / 4)


# --------------------------------------------------------------------------- SSE


def sse_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event, data) sequence the streaming API sends for a complete ``message``."""
    usage = dict(message.get("usage") or {})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": min(1, int(usage.get("output_tokens", 0) or 0))}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message.get("content") or []):
        yield from _block_events(index, block)
    delta_usage = {k: v for k, v in usage.items() if k != "service_tier"}
    delta_usage.setdefault("output_tokens", 0)
    delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": delta_usage}
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start = {k: v for k, v in block.items() if k != "citations"} | {"text": ""}
        deltas = [{"type": "text_delta", "text": block.get("text", "")}]
        deltas += [{"type": "citations_delta", "citation": c} for c in block.get("citations") or []]
    elif kind in ("tool_use", "server_tool_use"):
        start = {**block, "input": {}}
        if block.get("input"):
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")}]
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    else:  # redacted thinking, server tool results: sent whole in the start event
        start = dict(block)
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
    for d in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """An Anthropic API error body."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --------------------------------------------------------------------------- handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the SDK pools connections
    server_version = "harnessopt-messages/1"
    backend: Backend  # set on a per-server subclass

    def log_message(self, format: str, *args: Any) -> None:
        # Unix-socket peers have no address, and request logs would flood test output.
        pass

    def do_GET(self) -> None:
        self._send_error(ModelError(404, "not_found_error", f"no such endpoint: GET {self.path}"))

    def do_POST(self) -> None:
        try:
            call = self._read_call()
            response = self.backend(call)
        except ModelError as e:
            self._send_error(e)
            return
        except Exception as e:  # a backend bug must still be an API error, not a dropped socket
            self._send_error(ModelError(500, "api_error", f"internal error: {type(e).__name__}: {e}"))
            return
        if call.streamed:
            self._send_sse(response)
        else:
            self._send_json(200, response)

    def _read_call(self) -> ApiCall:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would corrupt a kept-alive connection
            raise ModelError(413, "request_too_large", f"request body of {length} bytes is too large")
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
            raise ModelError(404, "not_found_error", f"no such endpoint: POST {self.path}")
        try:
            body = json.loads(raw or b"null")
        except ValueError as e:
            raise ModelError(400, "invalid_request_error", f"request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise ModelError(400, "invalid_request_error", "request body must be a JSON object")
        streamed = bool(body.pop("stream", False)) and path == MESSAGES_PATH
        headers = {k.lower(): v for k, v in self.headers.items()}
        query = self.path.partition("?")[2]
        return ApiCall(path=path, body=body, headers=headers, streamed=streamed, raw=raw, query=query)

    def _send_json(self, status: int, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, e: ModelError) -> None:
        error_type = e.error_type or _STATUS_TYPES.get(e.status, "api_error")
        extra = {"x-should-retry": "true" if e.retryable else "false"}
        self._send_json(e.status, error_body(error_type, e.message), extra)

    def _send_sse(self, message: dict[str, Any]) -> None:
        # No content-length: the body ends when the connection closes, as with a real stream.
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        for event, data in sse_events(message):
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()


class _UnixHTTPServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


class _TCPServer(ThreadingHTTPServer):
    daemon_threads = True


class MessagesServer:
    """Serves one backend on loopback TCP (``port``; 0 = pick one) and optionally a Unix socket.

    ``start()`` binds and serves in background threads; ``stop()`` shuts both down and removes
    the socket file. Usable as a context manager.
    """

    def __init__(
        self, backend: Backend, *, host: str = "127.0.0.1", port: int = 0, socket_path: Path | None = None
    ):
        handler = type("MessagesHandler", (_Handler,), {"backend": staticmethod(backend)})
        self._handler = handler
        self._host, self._port = host, port
        self.socket_path = socket_path
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        if not self._servers:
            raise RuntimeError("server not started")
        return int(self._servers[0].server_address[1])  # type: ignore[index]

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the TCP listener (what ANTHROPIC_BASE_URL should be)."""
        return f"http://{self._host}:{self.port}"

    def start(self) -> MessagesServer:
        self._servers.append(_TCPServer((self._host, self._port), self._handler))
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
            self._servers.append(_UnixHTTPServer(str(self.socket_path), self._handler))
            # Sandboxed harnesses may run as another uid; connecting needs write permission.
            os.chmod(self.socket_path, 0o666)
        for server in self._servers:
            # A short poll interval makes stop() quick (serve_forever checks for shutdown per poll).
            thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), name="messages-http", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers.clear()
        self._threads.clear()
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
