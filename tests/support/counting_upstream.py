"""A scripted, counting stand-in for the real Messages API, for fault tests.

    with CountingUpstream([rate_limited(), ok()]) as up:
        model = AnthropicModel("sk-test", up.base_url)
        ...
        up.attempts  # every request that reached it, in order

Unlike tests/support/fake_anthropic.py (which shares the gateway's HTTP code and can only answer well
formed JSON), this server misbehaves at the socket level the way real upstreams do: a
connection reset before any reply, a body cut off half-way, a reply slower than the client's
read timeout, a 200 whose body is not JSON. Attempt ``i`` is answered by step ``i`` of the
script; past its end the last step repeats, so ``[overloaded()]`` is a persistent 529.
Error replies carry ``retry-after-ms: 1`` unless a step sets its own retry headers, so the
SDK's backoff does not slow the tests down.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY: dict[str, Any] = {
    "id": "msg_up_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
    "some_future_field": {"kept": True},
}

FAST_RETRY = {"retry-after-ms": "1"}


@dataclass(frozen=True)
class Step:
    """How to answer one attempt."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    action: str = "reply"  # "reply" | "reset" (RST before replying) | "cut" (half the body) | "stall"
    stall_s: float = 0.0


def ok(reply: dict[str, Any] | None = None) -> Step:
    return Step(200, json.dumps(reply or REPLY).encode(), {"content-type": "application/json"})


def api_error(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> Step:
    body = json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()
    extra = FAST_RETRY if headers is None else headers
    return Step(status, body, {"content-type": "application/json", "request-id": "req_fake", **extra})


def rate_limited(retry_after: str | None = None) -> Step:
    headers = FAST_RETRY if retry_after is None else {"retry-after": retry_after}
    return api_error(
        429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", headers
    )


def overloaded() -> Step:
    return api_error(529, "overloaded_error", "Overloaded")


def reset() -> Step:
    """The connection is reset after the request was read, before any byte of a reply."""
    return Step(action="reset")


def cut_body() -> Step:
    """Status and headers of a 200, then half of the body, then the connection closes."""
    return Step(200, json.dumps(REPLY).encode(), {"content-type": "application/json"}, action="cut")


def stall(seconds: float) -> Step:
    """No reply for ``seconds`` (longer than the client's read timeout), then a good one."""
    return Step(200, json.dumps(REPLY).encode(), {"content-type": "application/json"}, "stall", seconds)


def malformed() -> Step:
    """A complete 200 whose body is not JSON (a proxy's page, a truncated write upstream)."""
    return Step(200, b'{"id": "msg_up_1", "content": [{"type": "te', {"content-type": "application/json"})


class CountingUpstream:
    """Serves ``script`` on 127.0.0.1 and records every attempt (path, query, headers, body)."""

    def __init__(self, script: list[Step]):
        if not script:
            raise ValueError("the script needs at least one step")
        self.script = script
        self.attempts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _next_step(self, attempt: dict[str, Any]) -> Step:
        with self._lock:
            self.attempts.append(attempt)
            return self.script[min(len(self.attempts), len(self.script)) - 1]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                path, _, query = self.path.partition("?")
                attempt = {
                    "path": path,
                    "query": query,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": json.loads(raw or b"null"),
                }
                upstream._answer(self, upstream._next_step(attempt))

        return Handler

    def _answer(self, handler: BaseHTTPRequestHandler, step: Step) -> None:
        if step.action == "reset":
            # SO_LINGER with a zero timeout turns close() into a TCP RST.
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            handler.close_connection = True
            return
        if step.action == "stall":
            time.sleep(step.stall_s)
        try:
            handler.send_response(step.status)
            for name, value in step.headers.items():
                handler.send_header(name, value)
            handler.send_header("content-length", str(len(step.body)))
            handler.end_headers()
            if step.action == "cut":
                handler.wfile.write(step.body[: len(step.body) // 2])
                handler.wfile.flush()
                handler.close_connection = True
                return
            handler.wfile.write(step.body)
        except OSError:  # the client gave up on a stalled reply and closed the connection
            handler.close_connection = True

    def __enter__(self) -> CountingUpstream:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
