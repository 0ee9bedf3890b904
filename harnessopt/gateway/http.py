"""HTTP plumbing shared by every Messages API server harnessopt runs (gateway, test fakes).

A server here knows the wire format and nothing about models: it parses ``POST /v1/messages``,
``POST /v1/messages/count_tokens``, ``POST /v1/chat/completions`` and ``POST /v1/responses``
(whose replies and errors are written in that API's format, ``chat_wire``, ``responses_wire``), hands an ``ApiCall`` to a backend callable,
and writes the reply. Backends are always non-streaming; when the client asked for
``"stream": true`` the full message is replayed as the SSE event sequence the real API sends, which is what the
anthropic SDK's ``messages.stream()`` and ``create(stream=True)`` parse. Errors are Anthropic
error JSON with ``x-should-retry: false`` when retrying cannot help (so the SDK does not spend
its retries on a spent budget or a bad token).

One backend can be served on a loopback TCP port and on a Unix socket at the same time; the
socket is what a container without network reaches through a bind mount.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harnessopt.gateway.chat_wire import CHAT_PATH, chat_error_body, chat_sse_chunks
from harnessopt.gateway.guard import (
    Admission,
    Admit,
    DeadlineReader,
    GuardedTCPServer,
    GuardedUnixServer,
    ServerLimits,
    ServerStats,
    linger,
    secure_socket,
    secure_socket_dir,
)
from harnessopt.gateway.responses_wire import RESPONSES_PATH, responses_sse_events
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
    """One parsed request: ``path`` is MESSAGES_PATH, COUNT_TOKENS_PATH, CHAT_PATH or RESPONSES_PATH.

    ``body`` has no ``stream`` (``streamed`` says whether the client asked for it).
    """

    path: str
    body: dict[str, Any]
    headers: dict[str, str]  # lower-cased names
    streamed: bool = False
    raw: bytes = b""
    extra: dict[str, Any] = field(default_factory=dict)
    query: str = ""  # the request path's query string without "?", e.g. "beta=true"
    context: Any = None  # what the server's ``admit`` said about the caller (the gateway: its lease)

    def api_key(self) -> str | None:
        """The caller's key, from ``x-api-key`` or ``Authorization: Bearer``."""
        return api_key_of(self.headers)


def api_key_of(headers: dict[str, str]) -> str | None:
    """The key in lower-cased request headers, from ``x-api-key`` or ``Authorization: Bearer``."""
    if key := headers.get("x-api-key"):
        return key
    auth = headers.get("authorization", "")
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
    admit: Admit | None = None
    limits: ServerLimits
    stats: ServerStats
    deadline = 0.0  # time.monotonic() by which the bytes being read must have arrived
    _body_pending = False  # a body was announced and not read: the connection cannot be reused

    def setup(self) -> None:
        super().setup()
        self.deadline = time.monotonic() + self.limits.io_timeout_s
        plain = self.rfile
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self, self.stats))
        plain.close()

    def handle_one_request(self) -> None:
        # The whole request line and headers (after any keep-alive wait) within io_timeout_s.
        self.deadline = time.monotonic() + self.limits.io_timeout_s
        self._body_pending = False
        super().handle_one_request()

    def handle_expect_100(self) -> bool:
        return True  # "100 Continue" is sent after admission, in _read_call

    def log_message(self, format: str, *args: Any) -> None:
        # Unix-socket peers have no address, and request logs would flood test output.
        pass

    def do_GET(self) -> None:
        self._send_error(ModelError(404, "not_found_error", f"no such endpoint: GET {self.path}"))

    def do_POST(self) -> None:
        admission: Admission | None = None
        try:
            path, headers, length = self._request_head()
            admission = self.admit(path, headers) if self.admit else Admission(MAX_BODY_BYTES)
            call = self._read_call(path, headers, length, admission.max_body)
            call.context = admission.context
            response = self.backend(call)
        except _ClientGone:  # too slow, or hung up: nobody to answer
            self.close_connection = True
            return
        except ModelError as e:
            self._send_error(e)
            return
        except Exception as e:  # a backend bug must still be an API error, not a dropped socket
            self._send_error(ModelError(500, "api_error", f"internal error: {type(e).__name__}: {e}"))
            return
        finally:
            if admission is not None and admission.done is not None:
                admission.done()
        if call.streamed and call.path == CHAT_PATH:
            options = call.body.get("stream_options")
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            self._send_sse_chunks(chat_sse_chunks(response, usage))
        elif call.streamed and call.path == RESPONSES_PATH:
            self._send_sse_events((e["type"], e) for e in responses_sse_events(response))
        elif call.streamed:
            self._send_sse(response)
        else:
            self._send_json(200, response)

    def _request_head(self) -> tuple[str, dict[str, str], int]:
        """Path, headers and announced body length; nothing of the body is read here."""
        headers = {k.lower(): v for k, v in self.headers.items()}
        if "transfer-encoding" in headers:
            self._body_pending = True
            raise ModelError(400, "invalid_request_error", "send the request body with a Content-Length")
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._body_pending = True
            raise ModelError(400, "invalid_request_error", "the Content-Length header is not a length")
        self._body_pending = length > 0
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in (MESSAGES_PATH, COUNT_TOKENS_PATH, CHAT_PATH, RESPONSES_PATH):
            raise ModelError(404, "not_found_error", f"no such endpoint: POST {self.path}")
        return path, headers, length

    def _read_call(self, path: str, headers: dict[str, str], length: int, max_body: int) -> ApiCall:
        if length > max_body:
            raise ModelError(
                413, "request_too_large", f"request body of {length} bytes is over this caller's {max_body}"
            )
        if length and headers.get("expect", "").lower() == "100-continue":
            self.send_response_only(100)  # only now: a refused caller never sends its body
            self.end_headers()
        self.deadline = time.monotonic() + self.limits.io_timeout_s
        try:
            raw = self.rfile.read(length) if length else b""
        except OSError as e:  # TimeoutError past the deadline, or a reset
            raise _ClientGone from e
        if len(raw) < length:
            raise _ClientGone
        self._body_pending = False
        try:
            body = json.loads(raw or b"null")
        except ValueError as e:
            raise ModelError(400, "invalid_request_error", f"request body is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise ModelError(400, "invalid_request_error", "request body must be a JSON object")
        streamed = bool(body.pop("stream", False)) and path in (MESSAGES_PATH, CHAT_PATH, RESPONSES_PATH)
        query = self.path.partition("?")[2]
        return ApiCall(path=path, body=body, headers=headers, streamed=streamed, raw=raw, query=query)

    def _send_json(self, status: int, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.connection.settimeout(self.limits.io_timeout_s)  # a client that does not read is dropped
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        if self._body_pending:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, e: ModelError) -> None:
        error_type = e.error_type or _STATUS_TYPES.get(e.status, "api_error")
        extra = {"x-should-retry": "true" if e.retryable else "false"}
        if e.retryable and e.status in (429, 503, 529):
            extra["retry-after"] = "1"
        # Answer in the caller's API: both OpenAI APIs share one error format.
        openai_api = self.path.split("?", 1)[0].rstrip("/") in (CHAT_PATH, RESPONSES_PATH)
        body = chat_error_body(error_type, e.message) if openai_api else error_body(error_type, e.message)
        self._send_json(e.status, body, extra)
        if self._body_pending:  # refused before its body was read: answer, then close
            self.close_connection = True
            self._body_pending = False
            with contextlib.suppress(OSError):
                self.wfile.flush()
            linger(self.connection, self.rfile, self)

    def _send_sse(self, message: dict[str, Any]) -> None:
        self._send_sse_events(sse_events(message))

    def _start_stream(self) -> None:
        # No content-length: the body ends when the connection closes, as with a real stream.
        self.connection.settimeout(self.limits.io_timeout_s)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _send_sse_events(self, events: Iterator[tuple[str, dict[str, Any]]]) -> None:
        """``event:`` and ``data:`` lines per event (Messages and Responses API streams)."""
        self._start_stream()
        for event, data in events:
            self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _send_sse_chunks(self, chunks: Iterator[dict[str, Any]]) -> None:
        """Chat Completions SSE: ``data:`` lines only, ended by ``data: [DONE]``."""
        self._start_stream()
        for data in chunks:
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _ClientGone(Exception):
    """The client stopped sending before its request was complete."""


class _UnixHTTPServer(GuardedUnixServer, socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 128  # listen backlog: a burst of connects waits instead of being reset


class _TCPServer(GuardedTCPServer, ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class MessagesServer:
    """Serves one backend on loopback TCP (``port``; 0 = pick one) and optionally a Unix socket.

    ``start()`` binds and serves in background threads; ``stop()`` shuts both down and removes
    the socket file. Usable as a context manager. ``admit`` (optional) sees each request's path
    and headers before its body is read and decides whether, and how much of it, to read;
    without it any caller may send up to MAX_BODY_BYTES. ``limits`` bound connections, time
    and peers (see ``gateway.guard``); ``stats`` counts what clients made the server do.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        socket_path: Path | None = None,
        admit: Admit | None = None,
        limits: ServerLimits | None = None,
        dir_mode: int = 0o750,
        on_busy: Callable[[], None] | None = None,
    ):
        self.limits = limits or ServerLimits()
        self.dir_mode = dir_mode  # of the socket's directory, when it has a group (``secure_socket_dir``)
        self.on_busy = on_busy  # told when the TCP listener refuses a connection for lack of a slot
        self.stats = ServerStats()
        attrs = {"backend": staticmethod(backend), "limits": self.limits, "stats": self.stats}
        if admit is not None:
            attrs["admit"] = staticmethod(admit)
        handler = type("MessagesHandler", (_Handler,), attrs)
        self._handler = handler
        self._host, self._port = host, port
        self.socket_path = socket_path
        self._servers: list[socketserver.BaseServer] = []
        self._threads: list[threading.Thread] = []
        self._listeners: dict[Path, tuple[socketserver.BaseServer, threading.Thread]] = {}
        self._listeners_lock = threading.Lock()
        self._closing: list[threading.Thread] = []  # listeners of close_listener still stopping

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
        tcp = _TCPServer((self._host, self._port), self._handler)
        tcp.limits, tcp.stats, tcp.allowed_uids = self.limits, self.stats, self.limits.tcp_uids
        tcp.on_busy = self.on_busy
        self._servers.append(tcp)
        if self.socket_path is not None:
            secure_socket_dir(self.socket_path.parent, self.limits.socket_gid, self.dir_mode)
            self.socket_path.unlink(missing_ok=True)
            unix = _UnixHTTPServer(str(self.socket_path), self._handler)
            unix.limits, unix.stats, unix.allowed_uids = self.limits, self.stats, self.limits.unix_uids
            self._servers.append(unix)
            # Sandboxed harnesses run as another uid: connecting needs write permission.
            secure_socket(self.socket_path, self.limits.socket_gid)
        for server in self._servers:
            # A short poll interval makes stop() quick (serve_forever checks for shutdown per poll).
            thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), name="messages-http", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def open_listener(self, path: Path, on_busy: Callable[[], None] | None = None) -> None:
        """Serve on one more Unix socket at ``path`` (0660, as the first), with its own
        ``max_connections`` slots and accepting thread: what its clients do cannot take a slot
        of another listener. ``on_busy`` is told of each connection it refuses for lack of one."""
        unix = _UnixHTTPServer(str(path), self._handler)
        try:
            unix.limits, unix.stats, unix.allowed_uids = self.limits, self.stats, self.limits.unix_uids
            unix.on_busy = on_busy
            secure_socket(path, self.limits.socket_gid)
        except BaseException:
            unix.server_close()
            path.unlink(missing_ok=True)
            raise
        thread = threading.Thread(target=unix.serve_forever, args=(0.05,), name="messages-unix", daemon=True)
        with self._listeners_lock:
            self._listeners[path] = (unix, thread)
        thread.start()

    def close_listener(self, path: Path, wait: bool = False) -> None:
        """Remove a socket of ``open_listener`` now; its listener stops in the background (``wait``:
        before returning), as ``shutdown`` waits for the accepting thread's next poll (~50 ms).
        Connections being served finish."""
        with self._listeners_lock:
            found = self._listeners.pop(path, None)
            self._closing = [t for t in self._closing if t.is_alive()]
        if found is None:
            return
        path.unlink(missing_ok=True)  # no new client finds it
        server, thread = found

        def close() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        if wait:
            close()
            return
        closer = threading.Thread(target=close, name="messages-unix-close", daemon=True)
        closer.start()
        with self._listeners_lock:
            self._closing.append(closer)

    def stop(self) -> None:
        with self._listeners_lock:
            paths = list(self._listeners)
        for path in paths:
            self.close_listener(path, wait=True)
        with self._listeners_lock:
            closing, self._closing = self._closing, []
        for closer in closing:
            closer.join(timeout=5)
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
