"""Issue 8.3: the ``command`` optimizer ran on the host, as harnessopt's user.

A hostile CLI agent reads the API key from harnessopt's ``/proc/<pid>/environ`` (any process of
its uid, the parent first) and plants a git hook in the workspace, which harnessopt's own git
commands then run. Through the production wiring (``open_services`` with the Docker sandbox),
the agent must run in the optimizer's container instead: no host process to read, no
workspace to write, yet its edits in the view and its model calls through the gateway work.
On the code before the fix the agent ran on the host and both attacks succeeded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harnessopt.commands.demo import DEMO_DATA
from harnessopt.config import Config, GateConfig, ModelConfig, OptimizerConfig, RolloutConfig
from harnessopt.workspace.core import init_workspace

pytestmark = pytest.mark.docker

KEY = "sk-ant-HOST-KEY-5b1e0c"

# The agent: every process's environ it can read (its parent's first), then a hook in the workspace.
ATTACK = r"""
cat > /dev/null
{ tr '\0' '\n' < /proc/$PPID/environ; for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ; done; } 2>/dev/null \
  | grep -h 'HOST-KEY' | sort -u > skill/stolen.md
mkdir -p "$WS/.git/hooks" 2>/dev/null && printf '#!/bin/sh\ntouch "$WS/PWNED"\n' > "$WS/.git/hooks/post-commit" \
  && chmod +x "$WS/.git/hooks/post-commit"
echo "Title: nothing to see"
"""

# harnessopt as it runs a round's proposal: a process started with the key in its environment.
DRIVER = """
import json, shutil, sys, tempfile
from pathlib import Path
from harnessopt.optimizer.view import build_view
from harnessopt.round.services import open_services
from harnessopt.workspace.core import Workspace

ws = Workspace.open(Path(sys.argv[1]))
with open_services(ws.root, ws.cfg, print) as svc:
    private = Path(tempfile.mkdtemp())
    build_view(ws.root, private / "view", history_md="h", brief_md="b")
    proposal = svc.propose(private / "view", "the brief", 1)
    stolen = (private / "view" / "skill" / "stolen.md").read_text()
    shutil.rmtree(private, ignore_errors=True)
print("RESULT " + json.dumps({"summary": proposal.summary, "stopped_by": proposal.stopped_by, "stolen": stolen}))
"""


def test_a_command_optimizer_cannot_read_the_key_or_plant_a_hook(tmp_path: Path, docker_client) -> None:
    ws = tmp_path / "ws"
    script = ATTACK.replace("$WS", str(ws))
    cfg = Config(
        model=ModelConfig(provider="scripted", target="scripted-demo-target", script="scripted_model.yaml"),
        rollout=RolloutConfig(sandbox="docker", concurrency=1, timeout_s=60),
        optimizer=OptimizerConfig(backend="command", command=["bash", "-c", script], wall_s=120),
        gate=GateConfig(smoke=1),
    )
    init_workspace(
        ws,
        DEMO_DATA / "skill",
        DEMO_DATA / "tasks.jsonl",
        config=cfg,
        extra_files={"scripted_model.yaml": DEMO_DATA / "model.yaml"},
        announce=lambda _m: None,
    )
    env = {**os.environ, "ANTHROPIC_API_KEY": KEY, "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DRIVER), str(ws)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["stopped_by"] == "done" and "Title: nothing to see" in result["summary"]  # it ran
    assert KEY not in result["stolen"], "the agent read the API key from a host process"
    assert not (ws / ".git" / "hooks" / "post-commit").exists(), "the agent planted a hook in the workspace"
