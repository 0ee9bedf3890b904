"""A task container reaches the real gateway through a socket dir only the run's group may pass."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.sandbox.docker.sandbox import DockerSandbox

pytestmark = pytest.mark.docker

HARNESS = """
    import urllib.request
    body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 8,
                       "messages": [{"role": "user", "content": "capital?"}]}).encode()
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body,
                                 headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                          "content-type": "application/json"})
    reply = json.load(urllib.request.urlopen(req, timeout=10))
    answer(reply["content"][0]["text"] + " uid=%d groups=%s" % (os.getuid(), sorted(os.getgroups())))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a reserved group needs root")
def test_container_joins_the_runs_group_to_reach_the_gateway(
    docker_client, candidate, spec_for, small_cfg, tmp_path
):
    sock_dir = Path(tempfile.mkdtemp(prefix="ho-gwt-"))
    sandbox = DockerSandbox(small_cfg(), docker_client, warm=1)
    try:
        model = ScriptedModel.from_dict({"rules": [{"reply": "Paris"}]})
        with Gateway(model, BudgetConfig(), socket_dir=sock_dir) as gw:
            gid = gw.socket_gid
            assert gid is not None and gid != 0
            mode = stat.S_IMODE(os.stat(sock_dir).st_mode)
            assert mode == 0o710  # the sandbox did not open it to every local user
            skill, harness = candidate(HARNESS)
            lease = gw.lease("target", 1, "t1")
            out = sandbox.run(spec_for(skill, harness, lease), tmp_path / "out")
            exchanges = gw.release(lease.token)
        assert out.exit_code == 0, out.stderr_tail
        text = (tmp_path / "out" / "answer.txt").read_text()
        assert text.startswith("Paris uid=65534 ") and str(gid) in text
        assert len(exchanges) == 1 and exchanges[0].response is not None
        assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o710
    finally:
        sandbox.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    left: list[Any] = docker_client.containers.list(
        all=True, filters={"label": f"harnessopt.run={sandbox.run_id}"}
    )
    assert left == []
