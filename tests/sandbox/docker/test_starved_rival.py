"""A harness cannot make a concurrent task's model calls fail (issue 20, item 2), in real Docker.

The attack of the review: a hostile task holds every connection it can to the gateway without
sending a byte (reopening those the gateway drops), while a victim task in another container
makes ordinary SDK calls with their retries. With one listener for all containers the victim
lost every call and scored 0, and a candidate could sink the incumbent running beside it.
Each lease now has its own socket, whose random name the other containers cannot list.
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import BudgetConfig, GatewayConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import RunOutput
from harnessopt.sandbox.docker.sandbox import DockerSandbox
from tests.sandbox.conftest import HARNESS_PRELUDE

pytestmark = pytest.mark.docker

HOSTILE = """
    import socket
    from urllib.parse import urlparse
    seen = "listed " + ",".join(sorted(os.listdir("/ho-gw"))) if os.access("/ho-gw", os.R_OK) else "unlisted"
    url = urlparse(os.environ["ANTHROPIC_BASE_URL"])
    def opener(target):
        if isinstance(target, tuple):
            return lambda: socket.create_connection(target, timeout=2)
        def unix():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(target)
            return s
        return unix
    targets = [(url.hostname, url.port), "/ho-gw/gateway.sock"]
    if seen.startswith("listed"):
        targets += ["/ho-gw/" + n for n in os.listdir("/ho-gw")]
    held = {t: [] for t in targets}
    end = time.time() + 25
    while time.time() < end:  # keep 80 silent connections to each, reopening refused or dropped ones
        for t, socks in held.items():
            for s in list(socks):
                s.setblocking(False)
                try:
                    s.recv(4096)  # anything (a 503) or nothing (closed): that one holds no slot
                    s.close()
                    socks.remove(s)
                except BlockingIOError:
                    pass
                except OSError:
                    socks.remove(s)
            while len(socks) < 80:
                try:
                    socks.append(opener(t)())
                except OSError:
                    break
        time.sleep(0.05)
    answer(seen)
"""

VICTIM = """
    import anthropic
    time.sleep(4)  # the hostile task holds its connections by now
    client = anthropic.Anthropic(max_retries=2, timeout=20)
    replies = []
    for _ in range(3):
        try:
            reply = client.messages.create(
                model="claude-haiku-4-5", max_tokens=8, messages=[{"role": "user", "content": "capital?"}]
            )
            replies.append(reply.content[0].text)
        except anthropic.APIError as e:
            replies.append(type(e).__name__)
    answer(" ".join(replies))
"""


def harness_dir(root: Path, source: str) -> Path:
    (root / "harness").mkdir(parents=True)
    (root / "skill").mkdir()
    (root / "skill" / "SKILL.md").write_text("---\nname: t\ndescription: d\n---\nx\n")
    (root / "harness" / "run.py").write_text(HARNESS_PRELUDE + textwrap.dedent(source))
    return root


def test_a_task_holding_connections_cannot_fail_a_concurrent_tasks_calls(
    docker_client: Any, spec_for: Any, small_cfg: Any, tmp_path: Path
) -> None:
    sock_dir = Path(tempfile.mkdtemp(prefix="ho-gws-"))
    sandbox = DockerSandbox(small_cfg(concurrency=2, pids=256, timeout_s=60.0), docker_client, warm=2)
    outs: dict[str, RunOutput] = {}
    try:
        model = ScriptedModel.from_dict({"rules": [{"reply": "Paris"}]})
        # Silent connections are dropped after io_timeout_s; 30 s: no drop while the victim runs.
        settings = GatewayConfig(io_timeout_s=30.0)
        with Gateway(model, BudgetConfig(), socket_dir=sock_dir, settings=settings) as gw:

            def run(name: str, source: str) -> None:
                root = harness_dir(tmp_path / name, source)
                lease = gw.lease("target", 1, name)
                try:
                    spec = spec_for(root / "skill", root / "harness", lease, timeout_s=60.0)
                    outs[name] = sandbox.run(spec, tmp_path / f"{name}-out")
                finally:
                    gw.release(lease.token)

            threads = [
                threading.Thread(target=run, args=(n, s))
                for n, s in (("hostile", HOSTILE), ("victim", VICTIM))
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
    finally:
        sandbox.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    assert outs["victim"].exit_code == 0, outs["victim"].stderr_tail
    assert (tmp_path / "victim-out" / "answer.txt").read_text() == "Paris Paris Paris"
    assert outs["hostile"].exit_code == 0, outs["hostile"].stderr_tail
    assert (tmp_path / "hostile-out" / "answer.txt").read_text() == "unlisted"  # no other socket's name
