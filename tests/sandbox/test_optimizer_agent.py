"""A CLI agent (the ``command`` optimizer) in the optimizer's container: ``DockerShell.agent``.

The agent reaches the real gateway only through the bridged socket with the optimizer's lease,
sees nothing of the host's environment, leaves no process behind, and is stopped at its timeout.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.sandbox.docker.shell import OPTIMIZER_UID, DockerShell

pytestmark = pytest.mark.docker

# The agent: reads its brief on stdin, calls the model through ANTHROPIC_BASE_URL with its key,
# edits the view, prints what it saw, and leaves a daemon behind.
AGENT = r"""
import json, os, subprocess, sys, urllib.request
brief = sys.stdin.read()
body = json.dumps({"model": "claude-opus-4-1", "max_tokens": 16,
                   "messages": [{"role": "user", "content": brief}]}).encode()
req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", data=body,
                             headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                      "content-type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=20))
with open("skill/SKILL.md", "a") as f:
    f.write("\n" + reply["content"][0]["text"] + "\n")
subprocess.Popen(["setsid", "sleep", "1000"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
print(json.dumps({"uid": os.getuid(), "cwd": os.getcwd(), "env": dict(os.environ)}))
print("stderr line", file=sys.stderr)
"""


@pytest.fixture
def view(tmp_path: Path) -> Iterator[Path]:
    private = Path(tempfile.mkdtemp(prefix="ho-agent-test-"))
    (private / "view" / "skill").mkdir(parents=True)
    (private / "view" / "skill" / "SKILL.md").write_text("---\nname: t\ndescription: d\n---\nbody\n")
    yield private / "view"
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    sock_dir = Path(tempfile.mkdtemp(prefix="ho-gwa-"))
    model = ScriptedModel.from_dict({"rules": [{"reply": "- be terse"}]})
    with Gateway(model, BudgetConfig(), socket_dir=sock_dir, peer_uids=(OPTIMIZER_UID,)) as gw:
        yield gw
    shutil.rmtree(sock_dir, ignore_errors=True)


def _live(docker_client: Any, sh: DockerShell) -> list[list[str]]:
    containers = docker_client.containers.list(filters={"label": f"harnessopt.run={sh.run_id}"})
    rows = [r for c in containers for r in c.top(ps_args="-o pid,stat,args")["Processes"]]
    return [r for r in rows if "Z" not in r[1]]


def test_the_agent_reaches_the_gateway_with_the_lease_and_nothing_else(
    view, gateway, docker_client, small_cfg, monkeypatch
) -> None:
    import json

    monkeypatch.setenv("HOST_ONLY_SECRET", "s3cr3t-on-the-host")
    sh = DockerShell(view, small_cfg(), client=docker_client)
    lease = gateway.lease("optimizer", 3)
    try:
        result = sh.agent(
            ["python3", "-c", AGENT],
            stdin=b"# the brief",
            env={"HARNESSOPT_ROUND": "3"},
            timeout_s=60,
            gateway=lease,
        )
        assert result.exit_code == 0 and not result.timed_out, result
        seen = json.loads(result.stdout.strip().splitlines()[-1])
        assert "stderr line" in result.stderr
        assert _live(docker_client, sh)[0][2].endswith("idle") and len(_live(docker_client, sh)) == 1
    finally:
        sh.close()
    assert seen["uid"] == OPTIMIZER_UID and seen["cwd"] == "/view"
    env = seen["env"]
    assert env["ANTHROPIC_API_KEY"] == lease.token and env["ANTHROPIC_BASE_URL"].startswith(
        "http://127.0.0.1:"
    )
    assert env["HARNESSOPT_ROUND"] == "3" and env["HOME"].startswith("/tmp/")
    assert "HOST_ONLY_SECRET" not in env
    assert (view / "skill" / "SKILL.md").read_text().endswith("- be terse\n")
    usage = gateway.usage()[("optimizer", 3)]
    assert usage.calls == 1, "the agent's call was not counted for the optimizer's round"
    assert docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sh.run_id}"}) == []


def test_the_agent_is_stopped_at_its_timeout(view, docker_client, small_cfg) -> None:
    sh = DockerShell(view, small_cfg(), client=docker_client)
    try:
        result = sh.agent(
            ["bash", "-c", "echo begun; sleep 1000"], stdin=b"", env={}, timeout_s=2, gateway=None
        )
        assert result.timed_out and result.exit_code is None and "begun" in result.stdout
        assert len(_live(docker_client, sh)) == 1  # only the idle runner
    finally:
        sh.close()


def test_a_missing_agent_is_exit_127(view, docker_client, small_cfg) -> None:
    sh = DockerShell(view, small_cfg(), client=docker_client)
    try:
        result = sh.agent(["no-such-agent-xyz"], stdin=b"", env={}, timeout_s=20, gateway=None)
    finally:
        sh.close()
    assert result.exit_code == 127 and "no-such-agent-xyz" in result.stderr


def test_claude_code_without_the_cli_in_the_image_stops_before_any_round(docker_client, small_cfg) -> None:
    from harnessopt.config import OptimizerConfig
    from harnessopt.errors import UserError
    from harnessopt.optimizer import make_optimizer
    from harnessopt.sandbox.docker.sandbox import DockerSandbox

    sandbox = DockerSandbox(small_cfg(), docker_client, warm=0)  # the plain image: no claude in it
    try:
        with pytest.raises(UserError, match="sandbox build --with claude-code"):
            make_optimizer(
                OptimizerConfig(backend="claude-code"),
                client_factory=lambda k: None,  # type: ignore[arg-type,return-value]
                shell_factory=sandbox.shell,
                shell_on_host=False,
            )
    finally:
        sandbox.close()
