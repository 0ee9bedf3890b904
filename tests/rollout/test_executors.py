"""The executor seam without a cluster: the local pool, the relay's two ends, what the worker ships
back, and Ray staying out of every process that does not ask for it."""

from __future__ import annotations

import errno
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnessopt.rollout.executors import PooledExecutor
from harnessopt.rollout.ray import worker as ray_worker
from harnessopt.rollout.ray.relay import HeadIngress, WorkerRelay, new_secret

PY = [sys.executable, "-c"]


class _Echo(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(b"echo:" + data)


@pytest.fixture
def relay_pair() -> Iterator[tuple[HeadIngress, WorkerRelay, _Echo]]:
    """An echo server standing in for the gateway, the head's ingress to it, and a worker's relay."""
    echo = _Echo(("127.0.0.1", 0), _EchoHandler)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    ingress = HeadIngress(echo.server_address[:2], "127.0.0.1", new_secret())
    relay = WorkerRelay(ingress.address, ingress.secret)
    try:
        yield ingress, relay, echo
    finally:
        relay.close()
        ingress.close()
        echo.shutdown()
        echo.server_close()


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.settimeout(10)
    sock.sendall(data)
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError as e:  # the peer closed first (a rejected hello): what we read says what came back
        if e.errno != errno.ENOTCONN:
            raise
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except ConnectionResetError:  # closed with our bytes unread: nothing came back
        pass
    sock.close()
    return got


def test_relay_forwards_its_unix_socket_and_loopback_port_to_the_gateway(relay_pair) -> None:
    _ingress, relay, _echo = relay_pair
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.connect(str(relay.socket_path))
    assert _roundtrip(unix, b"POST /v1/messages") == b"echo:POST /v1/messages"
    port = int(relay.base_url.rsplit(":", 1)[1])
    assert _roundtrip(socket.create_connection(("127.0.0.1", port)), b"hi") == b"echo:hi"
    mode = os.stat(relay.socket_path.parent).st_mode & 0o777
    assert mode == 0o750 and os.stat(relay.socket_path.parent).st_gid == relay.gid  # as the gateway's dir


def test_ingress_closes_a_connection_without_the_secret(relay_pair) -> None:
    ingress, _relay, _echo = relay_pair
    for hello in (
        b"not-the-secret\nPOST /v1/messages",
        b"GET / HTTP/1.1\r\n\r\n",
        ingress.secret.encode()[:-1] + b"x\nhi",
    ):
        sock = socket.create_connection(ingress.address)
        assert _roundtrip(sock, hello) == b"", hello  # nothing reaches the gateway, nothing comes back
    sock = socket.create_connection(ingress.address)
    assert _roundtrip(sock, ingress.secret.encode() + b"\nhi") == b"echo:hi"


def test_pack_sends_back_files_and_dirs_only_and_caps_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "d").mkdir(parents=True)
    (out / "answer.txt").write_text("Paris")
    (out / "d" / "big.bin").write_bytes(b"x" * 5000)
    (out / "link").symlink_to("/etc/passwd")
    data, notes = ray_worker.pack(out, cap=100_000)
    from harnessopt.sandbox.untar import extract

    dest = tmp_path / "dest"
    dest.mkdir()
    extract(data, dest, max_bytes=10**6, max_members=100)
    assert (dest / "answer.txt").read_text() == "Paris" and (dest / "d" / "big.bin").stat().st_size == 5000
    assert not (dest / "link").exists() and notes == []
    _data, notes = ray_worker.pack(out, cap=1000)
    assert notes and "larger than 1000 bytes" in notes[0]


def test_bundle_is_the_candidate_and_its_digest_follows_the_content(tmp_path: Path) -> None:
    for part in ("skill", "harness"):
        (tmp_path / part).mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("be brief")
    (tmp_path / "harness" / "run.py").write_text("print(1)")
    (tmp_path / "scorer.py").write_text("def score(): ...")  # beside the candidate: never shipped
    a = ray_worker.make_bundle(tmp_path)
    time.sleep(0.01)
    assert ray_worker.make_bundle(tmp_path).digest == a.digest  # same content, same digest
    assert b"def score" not in a.data and b"be brief" in a.data
    (tmp_path / "skill" / "SKILL.md").write_text("be briefer")
    assert ray_worker.make_bundle(tmp_path).digest != a.digest


def test_pooled_map_keeps_order_and_bounds_concurrency() -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def job(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i * i

    assert list(PooledExecutor(3).map(job, range(12))) == [i * i for i in range(12)]
    assert peak[0] == 3


def test_join_waits_for_a_stopped_jobs_clean_up_within_its_bound() -> None:
    # A run stopped mid-task: the sandbox ends the task, and the job's thread then removes what it
    # made before the process exits (join), but never holds the exit past the bound.
    started, release, cleaned = threading.Event(), threading.Event(), threading.Event()

    def job(_j: None) -> None:
        started.set()
        try:
            release.wait(30)  # the task, until the sandbox ends it
        finally:
            time.sleep(0.2)  # its clean-up: a temporary folder's removal
            cleaned.set()

    ex = PooledExecutor(2)
    ex.submit(job, None)
    assert started.wait(10)  # running, not queued (shutdown drops a queued job)
    ex.shutdown()
    ex.join(0.3)  # the task still runs: join gives up at its bound instead of holding the exit
    assert not cleaned.is_set() and any(t.is_alive() for t in ex._workers)
    release.set()
    ex.join(5)
    assert cleaned.is_set()
    assert not any(t.is_alive() for t in ex._workers)


def test_import_help_log_and_status_never_import_ray(tmp_path: Path) -> None:
    code = (
        "import sys, harnessopt, harnessopt.cli, harnessopt.round.services, harnessopt.rollout.runner\n"
        "assert 'ray' not in sys.modules, 'ray imported'\n"
        "try:\n    harnessopt.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'ray' not in sys.modules, 'ray imported by --help'\n"
    )
    subprocess.run([*PY, code], check=True, capture_output=True, cwd=tmp_path)


def test_asking_for_ray_without_it_is_one_line_saying_how_to_install(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.modules['ray'] = None  # as if not installed\n"
        "from harnessopt.rollout.ray.executor import import_ray\n"
        "from harnessopt.errors import UserError\n"
        "try:\n    import_ray()\nexcept UserError as e:\n    print(e)\n"
    )
    out = subprocess.run([*PY, code], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.strip() == "rollout.executor ray needs Ray on this machine: pip install 'harnessopt[ray]'"


def test_run_with_executor_ray_but_no_ray_exits_2_saying_what_to_install(tmp_path: Path) -> None:
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    code = (
        "import sys\nsys.modules['ray'] = None  # as if not installed\n"
        "from harnessopt.cli import main\n"
        f"sys.exit(main(['run', {str(ws)!r}, '--executor', 'ray']))\n"
    )
    proc = subprocess.run([*PY, code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "pip install 'harnessopt[ray]'" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_log_and_status_run_where_ray_cannot_be_imported(tmp_path: Path) -> None:
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path, rollout={"executor": "ray"})  # even a workspace set to ray
    for command in ("status", "log"):
        code = (
            "import sys\nsys.modules['ray'] = None  # any import of ray fails\n"
            "from harnessopt.cli import main\n"
            f"sys.exit(main([{command!r}, {str(ws)!r}]))\n"
        )
        proc = subprocess.run([*PY, code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr[-2000:])


def test_jobs_submitted_ahead_run_only_in_slots_no_ordinary_job_waits_for() -> None:
    order: list[str] = []
    gate = threading.Event()
    ex = PooledExecutor(1)
    try:
        blocker = ex.submit(lambda _j: gate.wait(5), None)  # holds the one slot
        ahead = [ex.submit(order.append, f"ahead-{i}", ahead=True) for i in range(2)]
        ordinary = ex.submit(order.append, "ordinary")  # submitted last, runs first
        gate.set()
        list(ex.gather([blocker, ordinary, *ahead]))
        assert order == ["ordinary", "ahead-0", "ahead-1"]
    finally:
        ex.shutdown()


def test_hurry_makes_a_queued_ahead_job_ordinary() -> None:
    order: list[str] = []
    gate = threading.Event()
    ex = PooledExecutor(1)
    try:
        blocker = ex.submit(lambda _j: gate.wait(5), None)
        late = ex.submit(order.append, "ahead", ahead=True)
        other = ex.submit(order.append, "ordinary")
        ex.hurry(late)  # asked for now: it goes by when it was submitted
        gate.set()
        list(ex.gather([blocker, late, other]))
        assert order == ["ahead", "ordinary"]
    finally:
        ex.shutdown()


def test_a_failed_batch_drops_its_queued_jobs_and_leaves_the_executor_usable() -> None:
    ran: list[int] = []

    def job(i: int) -> int:
        if i == 0:
            raise ValueError("boom")
        time.sleep(0.05)
        ran.append(i)
        return i

    ex = PooledExecutor(1)
    try:
        with pytest.raises(ValueError):
            list(ex.map(job, range(5)))
        time.sleep(0.2)
        assert ran in ([], [1])  # the worker may take job 1 before the failure is seen; 2-4 never start
        assert list(ex.map(lambda i: i + 1, range(3))) == [1, 2, 3]
    finally:
        ex.shutdown()
