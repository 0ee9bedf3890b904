"""Model calls from a cluster worker to the head's gateway, with the containers' network still ``none``.

Two ends, both plain byte pipes (the gateway parses and checks everything, as for a local run):

* ``HeadIngress`` on the head: a TCP listener on the head's cluster address. A connection must
  open with the run's relay secret (one line) before anything is forwarded to the gateway's
  loopback port; anything else is closed unanswered. The gateway then sees harnessopt's own uid
  and still checks each request's lease token, budget and limits.
* ``WorkerRelay`` on a worker: a Unix socket (0660 in a 0750 dir of a group reserved for it, the
  one task containers join, as the gateway's own socket) and a loopback TCP port (for the local
  sandbox). Peers other than root, this uid and the container uids are closed unanswered; each
  accepted connection is forwarded to the head's ingress behind the secret.

The secret only lets bytes reach the gateway; a call still needs a live lease token. Neither the
real API key nor any gold answer ever crosses the relay. docs/cluster.md has the security model.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import shutil
import socket
import socketserver
import tempfile
import threading
from pathlib import Path
from typing import Any

from harnessopt.gateway.guard import secure_socket, secure_socket_dir, tcp_peer_uid, unix_peer_uid, unused_gid

SOCKET_NAME = "gw.sock"  # the name the Docker sandbox mounts it under (its dir at /ho-gw)
HELLO_TIMEOUT_S = 10.0
MAX_PIPES = 256  # connections forwarded at once by one end; more are closed at once
CONTAINER_UIDS = (65534,)


def new_secret() -> str:
    """A fresh relay secret: 32 random bytes, hex (a line of ASCII)."""
    return secrets.token_hex(32)


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides are done; closes both."""

    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=one_way, args=(b, a), daemon=True)
    t.start()
    one_way(a, b)
    t.join()
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.close()


class _Bounded:
    """At most MAX_PIPES connections served at once (a thread each); more are closed at once."""

    slots: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        super().process_request(request, client_address)  # type: ignore[misc]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self.slots.release()


class _TCPServer(_Bounded, socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _UnixServer(_Bounded, socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def _serve(server: Any) -> None:
    server.slots = threading.BoundedSemaphore(MAX_PIPES)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()


class HeadIngress:
    """The head's end: forwards connections that open with the secret to the gateway's TCP port."""

    def __init__(self, gateway_addr: tuple[str, int], bind_host: str, secret: str):
        self.secret = secret
        ingress = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                ingress._forward(self.request)

        self.gateway_addr = gateway_addr
        self._server = _TCPServer((bind_host, 0), Handler)
        _serve(self._server)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) workers connect to."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def _forward(self, conn: socket.socket) -> None:
        conn.settimeout(HELLO_TIMEOUT_S)
        hello = _read_line(conn, len(self.secret) + 1)
        if hello is None or not hmac.compare_digest(hello, self.secret.encode()):
            conn.close()
            return
        conn.settimeout(None)
        _connect_and_pipe(conn, self.gateway_addr)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class WorkerRelay:
    """A worker's end: a Unix socket and a loopback port, each connection forwarded to the ingress."""

    def __init__(self, ingress: tuple[str, int], secret: str, parent: Path | None = None):
        self.ingress = ingress
        self._hello = secret.encode() + b"\n"
        self._dir = Path(
            tempfile.mkdtemp(prefix="ho-relay-", dir=parent)
        )  # short: Unix socket paths cap at 108
        self.gid = unused_gid() if os.geteuid() == 0 else os.getgid()
        secure_socket_dir(self._dir, self.gid)
        allowed = {0, os.getuid(), *CONTAINER_UIDS}
        relay = self

        class UnixHandler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if unix_peer_uid(self.request) in allowed:
                    relay._forward(self.request)

        class TCPHandler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if tcp_peer_uid(self.client_address, self.request.getsockname()) in allowed:
                    relay._forward(self.request)

        self.socket_path = self._dir / SOCKET_NAME
        self._unix = _UnixServer(str(self.socket_path), UnixHandler)
        secure_socket(self.socket_path, self.gid)
        self._tcp = _TCPServer(("127.0.0.1", 0), TCPHandler)
        _serve(self._unix)
        _serve(self._tcp)

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT, for a local sandbox on this worker."""
        return f"http://127.0.0.1:{self._tcp.server_address[1]}"

    def _forward(self, conn: socket.socket) -> None:
        _connect_and_pipe(conn, self.ingress, self._hello)

    def close(self) -> None:
        for server in (self._unix, self._tcp):
            server.shutdown()
            server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _connect_and_pipe(conn: socket.socket, addr: tuple[str, int], hello: bytes = b"") -> None:
    """Connect to ``addr`` (sending ``hello`` first) and pipe ``conn`` both ways; an unreachable
    upstream closes ``conn``."""
    try:
        upstream = socket.create_connection(addr, timeout=HELLO_TIMEOUT_S)
        if hello:
            upstream.sendall(hello)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    pipe(conn, upstream)


def _read_line(conn: socket.socket, limit: int) -> bytes | None:
    """Bytes up to the first newline (without it), or None past ``limit`` bytes, a timeout or EOF."""
    data = b""
    while len(data) <= limit:
        try:
            chunk = conn.recv(1)  # byte by byte: nothing past the line may be swallowed
        except OSError:
            return None
        if not chunk:
            return None
        if chunk == b"\n":
            return data
        data += chunk
    return None
