"""The openai-chat and tool-agent (chat API) templates in a real task container, through the socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.sandbox.docker.sandbox import DockerSandbox

pytestmark = pytest.mark.docker

TEMPLATES = Path(__file__).resolve().parents[3] / "workspace_templates"


@pytest.mark.skipif(os.geteuid() != 0, reason="a reserved group needs root")
@pytest.mark.parametrize("template", ["openai-chat", "tool-agent"])
def test_chat_api_harness_runs_in_a_container(
    docker_client, candidate, spec_for, small_cfg, tmp_path: Path, template: str
) -> None:
    finish = {"tool_use": [{"name": "finish", "input": {"answer": "Paris"}}]}
    script = {"rules": [finish if template == "tool-agent" else {"reply": "Paris"}]}
    sock_dir = Path(tempfile.mkdtemp(prefix="ho-gwo-"))
    sandbox = DockerSandbox(small_cfg(timeout_s=60.0), docker_client, warm=1)
    try:
        with Gateway(ScriptedModel.from_dict(script), BudgetConfig(), socket_dir=sock_dir) as gw:
            skill, harness = candidate("")
            shutil.copy(TEMPLATES / template / "run.py", harness / "run.py")  # the template as shipped
            lease = gw.lease("target", 1, "t1")
            spec = spec_for(skill, harness, lease, timeout_s=60.0)
            spec = replace(spec, env={**spec.env, "HO_FLAG_API": "chat"})  # tool-agent: the openai SDK
            out = sandbox.run(spec, tmp_path / "out")
            exchanges = gw.release(lease.token)
        assert out.exit_code == 0, out.stderr_tail
        assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
        assert len(exchanges) == 1 and exchanges[0].error is None
        assert (
            exchanges[0].request["system"].startswith("Answer briefly.")
        )  # a chat system message, made canonical
    finally:
        sandbox.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
