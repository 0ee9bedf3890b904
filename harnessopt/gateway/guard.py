"""What keeps a local HTTP listener alive against the clients it serves (harnesses, other users).

The model gateway listens on loopback TCP and on a Unix socket that task containers reach. A
client may be hostile: it may open thousands of connections, send headers one byte at a time,
announce a 32 MiB body and never send it, or be another user of the host. This module holds
the defences that do not depend on what is served:

* ``ServerLimits``: at most ``max_connections`` connections per listener are served at once,
  each by one thread; one more is answered ``503`` at once by the accepting thread and closed.
  A connection must deliver a request's headers, and then its body, within ``io_timeout_s``
  each (a total deadline, not a per-``recv`` one, so a trickle of bytes does not keep it).
* Peer credentials: the Unix socket accepts only peers whose uid (``SO_PEERCRED``) is in
  ``unix_uids``; the TCP port only those whose uid (the client socket's owner, asked of the
  kernel) is in ``tcp_uids``. A refused peer is closed before a thread is spent.
* ``secure_socket_dir``/``secure_socket``: the socket's directory 0750 (the gateway's: 0710, so
  that a container can reach its own socket but not list the others') and the socket 0660,
  both owned by a group reserved for the run, given to the task containers (``group_add``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_IO_TIMEOUT_S = 10.0
DRAIN_BYTES = 64 * 1024  # read (and dropped) from an answered request's unread body before closing
DRAIN_S = 0.5  # time spent on that at most


@dataclass(frozen=True)
class ServerLimits:
    """Limits of one server; ``None`` uid sets accept every peer."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS  # per listener, each served by one thread
    io_timeout_s: float = DEFAULT_IO_TIMEOUT_S  # to send a request's headers, then its body
    tcp_uids: frozenset[int] | None = None  # uids whose loopback connections are served
    unix_uids: frozenset[int] | None = None  # uids whose Unix-socket connections are served
    socket_gid: int | None = None  # group of the socket and its dir (0750/0660); None: socket 0666


@dataclass(frozen=True)
class Admission:
    """A caller whose headers were accepted: the body size it may send, and what to do after.

    ``context`` reaches the backend as ``ApiCall.context``; ``done`` is called once the
    backend has returned or raised (the gateway frees the lease's concurrency slot there).
    """

    max_body: int
    context: Any = None
    done: Callable[[], None] | None = None


# Called with (path, lower-cased headers) BEFORE any byte of the body is read; raises
# ModelError (401, 429, ...) to refuse, and the body is then never read.
Admit = Callable[[str, dict[str, str]], Admission]


class ServerStats:
    """Counters a test or an operator can read: bytes read from clients, connections refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.refused_busy = 0
        self.refused_peer = 0
        self.timed_out = 0

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)


class DeadlineReader(io.RawIOBase):
    """A socket's read side that raises ``TimeoutError`` once ``owner.deadline`` has passed.

    Each ``recv`` waits at most until the deadline, so a client that sends a byte now and then
    gets no more time than one that sends nothing. Bytes read are counted in ``stats``.
    """

    def __init__(self, sock: socket.socket, owner: Any, stats: ServerStats):
        self._sock = sock
        self._owner = owner  # has a ``deadline`` attribute (time.monotonic() value)
        self._stats = stats

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._owner.deadline - time.monotonic()
        if remaining <= 0:
            self._stats.add("timed_out")
            raise TimeoutError("the client was too slow to send its request")
        self._sock.settimeout(remaining)
        try:
            n = self._sock.recv_into(buffer)
        except TimeoutError:
            self._stats.add("timed_out")
            raise
        self._stats.add("bytes_read", n)
        return n


class GuardedServer:
    """Mixin for a ``socketserver`` threading server: peer check and a bounded number of threads.

    Set ``limits``, ``stats`` and ``allowed_uids`` before serving; ``_slots`` is made on first use.
    """

    limits: ServerLimits
    stats: ServerStats
    allowed_uids: frozenset[int] | None = None
    on_busy: Callable[[], None] | None = None  # told of each connection refused for lack of a slot
    _slots: threading.BoundedSemaphore | None = None

    def peer_uid(self, request: Any, client_address: Any) -> int | None:
        """The uid of the connecting process, or None when the platform cannot say."""
        return None

    def verify_request(self, request: Any, client_address: Any) -> bool:
        if self.allowed_uids is None:
            return True
        uid = self.peer_uid(request, client_address)
        if uid is None or uid in self.allowed_uids:
            return True
        self.stats.add("refused_peer")
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._slots is None:
            self._slots = threading.BoundedSemaphore(self.limits.max_connections)
        if not self._slots.acquire(blocking=False):
            self.stats.add("refused_busy")
            # Told before the client is answered: a client that reads the refusal may end its run
            # (and its lease) at once, and a refusal noted after that would be lost.
            if self.on_busy is not None:
                self.on_busy()
            answer_busy(request, self.limits.max_connections)
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        try:
            super().process_request(request, client_address)  # type: ignore[misc]
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away mid-answer: nothing to report
        super().handle_error(request, client_address)  # type: ignore[misc]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            assert self._slots is not None
            self._slots.release()


class GuardedTCPServer(GuardedServer):
    """Peer uid of a loopback TCP client, from the kernel's socket table."""

    def peer_uid(self, request: Any, client_address: Any) -> int | None:
        return tcp_peer_uid(client_address, request.getsockname())


class GuardedUnixServer(GuardedServer):
    """Peer uid of a Unix-socket client, from ``SO_PEERCRED``."""

    def peer_uid(self, request: Any, client_address: Any) -> int | None:
        return unix_peer_uid(request)


def unix_peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix stream socket (Linux), else None."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    except OSError:
        return None
    return int(uid)


def tcp_peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of an IPv4 loopback connection (Linux), else None.

    Asked of the kernel for that one socket (``sock_diag`` netlink, microseconds); where that
    is not available, looked up in ``/proc/net/tcp`` (which walks every TCP socket: ~20 ms
    here). The client's socket has the client's address as its source and the server's as
    its destination.
    """
    try:
        return _sock_diag_uid(client, server)
    except (OSError, struct.error, AttributeError):  # no netlink here (AttributeError: not Linux)
        pass
    want = (_hex_addr(client), _hex_addr(server))
    try:
        with open("/proc/net/tcp") as f:
            next(f, None)  # header
            for line in f:
                fields = line.split()
                if len(fields) > 7 and (fields[1], fields[2]) == want:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2


def _sock_diag_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """One ``inet_diag_req_v2`` exact lookup; None when the socket is gone (ENOENT)."""
    sockid = (
        struct.pack(">HH", client[1], server[1])
        + socket.inet_aton(client[0])
        + bytes(12)
        + socket.inet_aton(server[0])
        + bytes(12)
        + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface, no cookie check
    )
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + req  # NLM_F_REQUEST
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.send(msg)
        data = nl.recv(8192)
    _length, kind = struct.unpack_from("=IH", data)
    if kind == _NLMSG_ERROR:
        (errno,) = struct.unpack_from("=i", data, 16)
        if errno == -2:  # ENOENT: the client is gone already
            return None
        raise OSError(-errno, "sock_diag lookup failed")
    # nlmsghdr (16) + inet_diag_msg: family, state, timer, retrans (4), sockid (48),
    # expires, rqueue, wqueue (12), then uid.
    return int(struct.unpack_from("=I", data, 16 + 64)[0])


def _hex_addr(addr: tuple[str, int]) -> str:
    host, port = addr[0], addr[1]
    packed = socket.inet_aton(host)
    return f"{struct.unpack('<I', packed)[0]:08X}:{port:04X}"


def answer_busy(sock: socket.socket, limit: int) -> None:
    """Write a canned ``503`` (retry shortly) without ever blocking the accepting thread."""
    body = json.dumps(
        {
            "type": "error",
            "error": {
                "type": "overloaded_error",
                "message": f"the harnessopt gateway is serving its limit of {limit} connections; retry shortly",
            },
        }
    ).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nx-should-retry: true\r\nretry-after: 1\r\n"
        "connection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(head + body)


def linger(sock: socket.socket, rfile: Any, owner: Any) -> None:
    """After answering a request whose body was not read: end our side, drop a little of theirs.

    Closing a socket with unread input makes the kernel send a reset, which can destroy the
    answer before the client reads it; reading up to DRAIN_BYTES for up to DRAIN_S first lets
    an ordinary client see the answer, and bounds what a hostile one can make us read.
    """
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    owner.deadline = time.monotonic() + DRAIN_S
    left = DRAIN_BYTES
    with contextlib.suppress(OSError, ValueError):
        while left > 0:
            chunk = rfile.read1(min(left, 16 * 1024))
            if not chunk:
                break
            left -= len(chunk)


def secure_socket_dir(directory: Path, gid: int | None, mode: int = 0o750) -> None:
    """Make ``directory`` ``mode`` (0750; 0710: the group may connect to a socket it can name, not
    list the others) owned by group ``gid`` (no-op for None)."""
    if gid is None:
        return
    _give_group(directory, gid)
    os.chmod(directory, mode)


def secure_socket(path: Path, gid: int | None) -> None:
    """The socket 0660 owned by ``gid``; without a group, 0666 (its directory then guards it)."""
    if gid is None:
        os.chmod(path, 0o666)  # a container user of another uid must be able to connect
        return
    _give_group(path, gid)
    os.chmod(path, 0o660)


def _give_group(path: Path, gid: int) -> None:
    """``path`` owned by group ``gid``; no chown when it is already (a file we make has our group),
    which a user namespace without a group mapping refuses even for our own group (EINVAL)."""
    if os.stat(path).st_gid != gid:
        os.chown(path, -1, gid)


def unused_gid(low: int = 2_000_000, high: int = 2_999_999) -> int:
    """A random group id that the host's group database does not name."""
    import grp
    import secrets

    while True:
        gid = low + secrets.randbelow(high - low + 1)
        try:
            grp.getgrgid(gid)
        except KeyError:
            return gid
