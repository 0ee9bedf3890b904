"""A wrong cluster address fails before the run, in one line (Ray itself retries for minutes)."""

from __future__ import annotations

import socket
import subprocess
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
    try:
        out = cli("run", ws, "--executor", "ray", env={"RAY_ADDRESS": address}, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("harnessopt run hung on a Ray address nobody listens on")
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("harnessopt:")]
    assert f"the Ray cluster at {address} does not answer" in line and "RAY_ADDRESS" in line
    assert "Traceback" not in out.stderr and "Failed to connect to GCS" not in out.stderr


def test_address_forms() -> None:
    for ok in (None, "", "auto", "local"):
        check_reachable(ok)  # nothing to dial: Ray finds or starts a local cluster
    port = _closed_port()
    for bad in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", "127.0.0.1:notaport"):
        with pytest.raises(UserError, match="does not answer"):
            check_reachable(bad, timeout_s=2)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        check_reachable(f"127.0.0.1:{listening.getsockname()[1]}")
