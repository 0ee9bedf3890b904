"""Hostile clients of the gateway (issue 8, items 5 and 6): floods, slow clients, other users.

Each test reproduces an attack on the gateway's listeners and checks that the host process
stays bounded (threads, memory, bytes read) and that a valid lease is still served.
"""

from __future__ import annotations

import contextlib
import grp
import os
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

from harnessopt.config import BudgetConfig, GatewayConfig
from harnessopt.gateway.guard import ServerLimits
from harnessopt.gateway.http import MessagesServer
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Forward, Model

MIB = 1024 * 1024
MODEL = "claude-haiku-4-5"
SCRIPT = {"rules": [{"last_user": "capital", "reply": "Paris"}], "default": "ok"}
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by other uids (the test's interpreter may not be)


def scripted_gateway(tmp: Path | None = None, **settings: Any) -> Gateway:
    return Gateway(
        ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=tmp, settings=GatewayConfig(**settings)
    )


def address(gw: Gateway) -> tuple[str, int]:
    host, port = gw.base_url.removeprefix("http://").split(":")
    return host, int(port)


def ask_ok(gw: Gateway, retries: int = 2) -> str:
    lease = gw.lease("target", 1, "valid")
    client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=retries)
    reply = client.messages.create(
        model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "capital of France?"}]
    )
    return reply.content[0].text


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def head(token: str, length: int, path: str = "/v1/messages") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: gw\r\nx-api-key: {token}\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


def closed_by_peer(sock: socket.socket) -> bool:
    """True once the server has closed (EOF or reset); reads and drops what it sent."""
    try:
        while chunk := sock.recv(65536):
            del chunk
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_unauthenticated_32mib_bodies_are_never_read():
    """40 connections announce and push 32 MiB bodies with a bad token (one task reached 1,524
    threads and +916 MiB this way): answered 401 from the headers, the bodies stay unread."""
    payload = memoryview(bytes(32 * MIB))  # allocated before the baseline
    with scripted_gateway(max_connections=8, io_timeout_s=2.0) as gw:
        assert ask_ok(gw) == "Paris"  # imports and pools warmed before the baseline
        threads0, rss0 = threading.active_count(), rss_bytes()
        served: list[str] = []  # a valid lease is served in the middle of the flood
        valid = threading.Thread(target=lambda: served.append(ask_ok(gw, retries=4)))
        attackers: list[list[Any]] = []  # [socket, bytes sent, closed]
        for _ in range(40):
            s = socket.create_connection(address(gw))
            s.sendall(head("not-a-lease", 32 * MIB))
            s.setblocking(False)
            attackers.append([s, 0, False])
            if len(attackers) == 20:
                valid.start()
        peak, t0 = threads0, time.monotonic()
        while time.monotonic() - t0 < 8 and not all(a[2] for a in attackers):
            for a in attackers:
                if a[2]:
                    continue
                try:
                    a[1] += a[0].send(payload[a[1] : a[1] + 256 * 1024])
                except BlockingIOError:
                    pass
                except OSError:
                    a[2] = True
                if not a[2]:
                    a[2] = closed_by_peer(a[0])
            peak = max(peak, threading.active_count())
        valid.join(30)
        for a in attackers:
            a[0].close()
        grown = rss_bytes() - rss0
        read = gw.stats.bytes_read
    assert served == ["Paris"]
    assert all(a[2] for a in attackers), "every attacker was disconnected"
    assert max(a[1] for a in attackers) < 32 * MIB  # no body was consumed whole
    assert peak - threads0 <= 8 + 3, f"threads grew by {peak - threads0}"
    assert read < 40 * 160 * 1024, f"the gateway read {read} bytes"
    assert grown < 32 * MIB, f"memory grew by {grown / MIB:.0f} MiB"


def test_slow_clients_are_dropped_after_the_io_timeout():
    """Slow-loris: headers a byte at a time, a body announced and never sent, nothing at all."""
    with scripted_gateway(io_timeout_s=1.0) as gw:
        lease = gw.lease("target", 1, "t1")
        threads0 = threading.active_count()
        request = head(lease.token, 100)
        socks = {kind: socket.create_connection(address(gw)) for kind in ("trickle", "no-body", "silent")}
        socks["no-body"].sendall(request)
        for s in socks.values():
            s.setblocking(False)
        dropped: dict[str, float] = {}
        t0, sent = time.monotonic(), 0
        while len(dropped) < len(socks) and time.monotonic() - t0 < 6:
            if "trickle" not in dropped and sent < len(request) - 1:
                with contextlib.suppress(OSError):
                    sent += socks["trickle"].send(request[sent : sent + 1])  # never the last byte
            for kind, s in socks.items():
                if kind not in dropped and closed_by_peer(s):
                    dropped[kind] = time.monotonic() - t0
            time.sleep(0.1)
        for s in socks.values():
            s.close()
        time.sleep(0.2)
        assert sorted(dropped) == ["no-body", "silent", "trickle"], f"still open after 6 s: {dropped}"
        assert max(dropped.values()) < 3.0
        assert threading.active_count() <= threads0 + 1
        assert gw.stats.timed_out >= 3
        assert ask_ok(gw) == "Paris"


def test_connections_past_the_limit_get_503_at_once():
    with scripted_gateway(max_connections=4, io_timeout_s=5.0) as gw:
        threads0 = threading.active_count()
        idle = [socket.create_connection(address(gw)) for _ in range(4)]
        time.sleep(0.3)  # all four accepted, each holding a thread
        assert threading.active_count() - threads0 <= 4
        lease = gw.lease("target", 1, "t1")
        extra = socket.create_connection(address(gw))
        extra.settimeout(2)
        t0 = time.monotonic()
        extra.sendall(head(lease.token, 2) + b"{}")
        answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"x-should-retry: true" in answer
        assert time.monotonic() - t0 < 1.0
        assert threading.active_count() - threads0 <= 4
        assert gw.stats.refused_busy >= 1
        for s in idle + [extra]:
            s.close()
        time.sleep(0.3)
        assert ask_ok(gw, retries=0) == "Paris"


def test_a_refusal_is_noted_before_the_refused_client_can_read_it():
    """A run whose call was refused may end (and give back its lease) as soon as it reads the
    503; the refusal is noted first, or the runner would score a starved run as evidence."""
    noted = threading.Event()

    def slow_note() -> None:  # a server thread preempted under load, made certain
        time.sleep(0.3)
        noted.set()

    limits = ServerLimits(max_connections=1, io_timeout_s=5.0)
    with MessagesServer(lambda call: {}, limits=limits, on_busy=slow_note) as server:
        held = socket.create_connection(("127.0.0.1", server.port))
        time.sleep(0.2)  # accepted: it holds the one slot
        refused = socket.create_connection(("127.0.0.1", server.port))
        refused.settimeout(3)
        answer = refused.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503")
        assert noted.is_set()
        held.close()
        refused.close()


def test_the_token_is_checked_before_the_body_and_target_bodies_are_capped():
    with scripted_gateway(io_timeout_s=5.0, target_body_mb=4) as gw:
        target = gw.lease("target", 1, "t1")
        optimizer = gw.lease("optimizer", 1)

        def answer_to(data: bytes) -> bytes:
            s = socket.create_connection(address(gw))
            s.settimeout(2)
            try:
                s.sendall(data)
                return s.recv(4096)
            finally:
                s.close()

        # The body is announced but never sent: the answer cannot have waited for it.
        assert answer_to(head("not-a-lease", MIB)).startswith(b"HTTP/1.1 401")
        assert answer_to(head(target.token, 5 * MIB)).startswith(b"HTTP/1.1 413")
        assert gw.stats.bytes_read < 64 * 1024
        # The optimizer may send more: its 5 MiB body is read and answered.
        body = (
            b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "'
            + b"a" * (5 * MIB)
            + b'"}]}'
        )
        assert answer_to(head(optimizer.token, len(body)) + body).startswith(b"HTTP/1.1 200")


class BlockingModel(Model):
    """Answers at once, except a message "wait", which blocks until ``go`` is set."""

    name = "blocking"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.entered = threading.Semaphore(0)

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        if request["messages"][-1]["content"] == "wait":
            self.entered.release()
            self.go.wait(20)
        usage = {"input_tokens": 1, "output_tokens": 1}
        content = [{"type": "text", "text": "done"}]
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
                "content": content, "stop_reason": "end_turn", "stop_sequence": None, "usage": usage}  # fmt: skip


def test_a_lease_gets_a_retryable_429_past_its_concurrency_limit():
    model = BlockingModel()
    with Gateway(model, BudgetConfig(), settings=GatewayConfig(max_calls_per_lease=2)) as gw:
        lease = gw.lease("target", 1, "t1")
        client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0, timeout=10)

        def call(text: str) -> Any:
            return client.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": text}]
            )

        waiting = [threading.Thread(target=call, args=("wait",)) for _ in range(2)]
        for t in waiting:
            t.start()
        assert model.entered.acquire(timeout=5) and model.entered.acquire(timeout=5)
        with pytest.raises(anthropic.RateLimitError) as err:
            call("now")
        assert "max_calls_per_lease" in str(err.value)
        assert err.value.response.headers["x-should-retry"] == "true"
        other = gw.lease("target", 1, "t2")  # another task is not held up
        other_client = anthropic.Anthropic(base_url=other.base_url, api_key=other.token, max_retries=0)
        reply = other_client.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
        assert reply.content[0].text == "done"
        model.go.set()
        for t in waiting:
            t.join(10)
        assert call("now").content[0].text == "done"  # slots come back


# --------------------------------------------------------------------------- other local users

CLIENT = """
import socket, sys
family, where, token = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    if family == "unix":
        s = socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(where)
    else:
        s = socket.create_connection(("127.0.0.1", int(where)), timeout=3)
except PermissionError:
    print("no-permission"); sys.exit()
body = b'{"model": "claude-haiku-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "capital"}]}'
try:
    s.sendall(b"POST /v1/messages HTTP/1.1\\r\\nhost: gw\\r\\nx-api-key: " + token.encode()
              + b"\\r\\ncontent-length: " + str(len(body)).encode() + b"\\r\\n\\r\\n" + body)
    print((s.recv(100).split(b"\\r\\n")[0] or b"closed").decode())
except OSError:
    print("closed")
"""


def run_as(uid: int, groups: list[int], family: str, where: str, token: str) -> str:
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", CLIENT, family, where, token],
        user=uid,
        group=uid,
        extra_groups=groups,
        capture_output=True,
        text=True,
        timeout=20,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path(SYSTEM_PYTHON).exists(), reason="needs root to act as other uids"
)
def test_other_local_users_cannot_reach_the_gateway():
    """The socket dir is 0710 with a group reserved for the run; peers are checked by uid."""
    sock_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ho-gwtest-{os.getpid()}"
    sock_dir.mkdir(mode=0o700)
    try:
        with scripted_gateway(sock_dir, container_uids=[65534]) as gw:
            gid = gw.socket_gid
            assert gid is not None and gid != 0
            with pytest.raises(KeyError):
                grp.getgrgid(gid)  # a group no one on the host is in
            st_dir, st_sock = os.stat(sock_dir), os.stat(sock_dir / "gateway.sock")
            assert (stat.S_IMODE(st_dir.st_mode), st_dir.st_gid) == (0o710, gid)
            assert (stat.S_IMODE(st_sock.st_mode), st_sock.st_gid) == (0o660, gid)
            sock = str(gw.socket_path)
            port = str(address(gw)[1])
            token = gw.lease("target", 1, "t1").token
            # A task container's user: uid 65534 with the run's group.
            assert run_as(65534, [gid], "unix", sock, token) == "HTTP/1.1 200 OK"
            # Another local user cannot pass the directory ...
            assert run_as(12345, [], "unix", sock, token) == "no-permission"
            # ... and with the group (or root's help) is still refused by its uid, as on TCP.
            refused = gw.stats.refused_peer
            assert run_as(12345, [gid], "unix", sock, token) == "closed"
            assert run_as(12345, [], "tcp", port, token) == "closed"
            assert gw.stats.refused_peer == refused + 2
            assert run_as(0, [], "tcp", port, token) == "HTTP/1.1 200 OK"
    finally:
        import shutil

        shutil.rmtree(sock_dir, ignore_errors=True)


def test_tcp_peer_uid_from_the_kernel_and_from_proc(monkeypatch):
    from harnessopt.gateway import guard as http_guard

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, addr = server.accept()
        with client, conn:
            assert http_guard.tcp_peer_uid(addr, conn.getsockname()) == os.getuid()
            assert http_guard.tcp_peer_uid(("127.0.0.1", 1), conn.getsockname()) is None

            def no_netlink(*_a: Any) -> int:
                raise OSError("no sock_diag")

            monkeypatch.setattr(http_guard, "_sock_diag_uid", no_netlink)
            assert http_guard.tcp_peer_uid(addr, conn.getsockname()) == os.getuid()  # /proc/net/tcp
