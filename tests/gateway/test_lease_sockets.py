"""One task's connections cannot refuse another task's calls (issue 20, item 2).

Each lease of a gateway with a socket dir gets its own Unix socket (what the task's container
mounts and its runner bridges to): a harness that holds every slot of its socket starves only
itself. The victim here is the real anthropic SDK over the victim lease's socket, with its
usual retries, as the in-container bridge makes it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import OWN_REFUSED, Gateway
from harnessopt.protocols import Exchange

MODEL = "claude-haiku-4-5"
SCRIPT = {"rules": [{"last_user": "capital", "reply": "Paris"}], "default": "ok"}
HOSTILE_CONNECTIONS = 80  # what the review's harness held: more than the 64 slots of a listener
_spec = importlib.util.spec_from_file_location(
    "ho_image_runner", Path(__file__).resolve().parents[2] / "sandbox" / "runner.py"
)
assert _spec is not None and _spec.loader is not None
IMAGE_RUNNER = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(IMAGE_RUNNER)  # the in-image runner, whose bridge a container's harness uses


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    sock_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"ho-ls-{os.getpid()}"
    sock_dir.mkdir(mode=0o700)
    try:
        with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=sock_dir) as gw:
            yield gw
    finally:
        import shutil

        shutil.rmtree(sock_dir, ignore_errors=True)


def sdk_over(path: Path, token: str) -> anthropic.Anthropic:
    """The SDK as a harness in a container uses it: a loopback port the runner bridges to ``path``."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    IMAGE_RUNNER.bridge(listener, str(path))  # serves until the test process ends
    base_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    return anthropic.Anthropic(base_url=base_url, api_key=token, max_retries=2)


@contextlib.contextmanager
def silent_connections(path: Path, n: int) -> Iterator[list[socket.socket]]:
    """``n`` connections that never send a byte (each holds a slot until the io timeout)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(path))
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def test_a_task_holding_silent_connections_cannot_refuse_another_tasks_calls(gateway: Gateway) -> None:
    hostile = gateway.lease("target", 1, "hostile")
    victim = gateway.lease("target", 1, "victim")
    assert hostile.socket_path is not None and victim.socket_path is not None
    with silent_connections(hostile.socket_path, HOSTILE_CONNECTIONS):
        client = sdk_over(victim.socket_path, victim.token)
        for _ in range(3):
            reply = client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "capital of France?"}]
            )
            assert reply.content[0].text == "Paris"
        deadline = time.monotonic() + 30  # its listener takes the connections past 64 in its own time
        while not _own_refusal(gateway.recorded(hostile.token)) and time.monotonic() < deadline:
            time.sleep(0.05)
    exchanges = gateway.release(victim.token)
    assert [x.error for x in exchanges] == [None, None, None]
    # The hostile run's transcript says it filled its own socket (its own doing: no rerun).
    assert _own_refusal(gateway.release(hostile.token))


def _own_refusal(exchanges: list[Exchange]) -> bool:
    return any((x.error or "").startswith(OWN_REFUSED) for x in exchanges)


def test_a_lease_socket_is_reachable_only_by_its_name_and_gone_after_release(gateway: Gateway) -> None:
    lease = gateway.lease("target", 1, "t1")
    assert lease.socket_path is not None
    directory = lease.socket_path.parent
    assert lease.socket_path != gateway.socket_path
    # A group member (a container) may pass the dir to a socket it was told of, not list the dir.
    assert stat.S_IMODE(os.stat(directory).st_mode) & 0o070 in (0o010, 0o000)
    assert sdk_over(lease.socket_path, lease.token).messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hi"}]
    )
    gateway.release(lease.token)
    assert not lease.socket_path.exists()
