"""A wrong cluster address fails before the run, in one line (Ray itself retries for minutes)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.rollout.ray.executor import check_reachable
from tests.support.cli import cli
from tests.support.workspace import make_ws


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_wrong_ray_address_fails_before_the_run_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    ws = make_ws(tmp_path)
    address = f"127.0.0.1:{_closed_port()}"
    line = _refused(ws, address, 120, "a Ray address nobody listens on", env={"RAY_ADDRESS": address})
    assert f"the Ray cluster at {address} does not answer" in line and "RAY_ADDRESS" in line
    # the dry run said "start it with" for it (QA)
    line = _refused(ws, address, 120, "a dry run", "--dry-run", "-c", f"ray.address={address}")
    assert f"the Ray cluster at {address} does not answer" in line


def _refused(ws: Path, address: str, timeout: float, what: str, *args: str, env: dict | None = None) -> str:
    """``run --executor ray`` refused at ``address``: its one line (exit 2, no traceback, no GCS retries)."""
    try:
        out = cli("run", ws, "--executor", "ray", *args, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"harnessopt run hung on {what}")
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("harnessopt:")]
    assert "Traceback" not in out.stderr and "GCS" not in out.stderr
    return line


@contextlib.contextmanager
def _not_ray(reply: bytes | None) -> Iterator[str]:
    """A port that takes every connection, then closes it after ``reply`` (None: says nothing)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = server.accept()
                with conn:
                    if reply is None:
                        stop.wait(3)
                    else:
                        conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()


def test_a_port_that_is_not_ray_fails_before_the_run_in_one_line(tmp_path: Path) -> None:
    """It takes the connection, so Ray would retry "Failed to get cluster ID from GCS" for good."""
    pytest.importorskip("ray")
    ws = make_ws(tmp_path)
    with _not_ray(b"") as address:
        line = _refused(ws, address, 60, "a port that is not a Ray cluster", "-c", f"ray.address={address}")
    assert f"the Ray cluster at {address} does not answer" in line and "is it Ray's port?" in line


def test_a_port_that_speaks_something_else_is_not_ray() -> None:
    for reply in (None, b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", b"SSH-2.0-OpenSSH_9.6\r\n"):
        with _not_ray(reply) as address, pytest.raises(UserError, match="is it Ray's port"):
            check_reachable(address, timeout_s=1)


def test_address_forms() -> None:
    for ok in (None, "", "auto", "local"):
        check_reachable(ok)  # nothing to dial: Ray finds or starts a local cluster
    port = _closed_port()
    for bad in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", "127.0.0.1:notaport"):
        with pytest.raises(UserError, match="does not answer"):
            check_reachable(bad, timeout_s=2)
    # a real cluster's address passes: tests/rollout/ray/test_ray_executor.py


def test_a_failed_join_where_ray_keeps_an_auth_token_names_the_setting(tmp_path: Path, monkeypatch) -> None:
    """Ray 2.60 starts a cluster with token authentication once ~/.ray/auth_token exists (an in-run
    cluster writes it); joining it without RAY_AUTH_MODE=token failed with 'check ray.address' at a
    right address (QA). The refusal names the likely cause where the token file is there."""
    from harnessopt.rollout.ray.executor import auth_hint

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert auth_hint() == ""
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    assert "RAY_AUTH_MODE=token" in auth_hint()
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert auth_hint() == ""
