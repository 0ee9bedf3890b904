"""Issue 8.3: an optimizer whose tools would run on this host needs --unsafe-host-optimizer.

Without it, ``harnessopt run --sandbox local`` stops before any rollout or model call with one
line that says what to do; with it, the run goes on and a warning names what is exposed.
"""

from __future__ import annotations

from pathlib import Path

from harnessopt.gateway.models.scripted import ScriptedModel
from tests.support.cli import REAL_KEY, cli, git, upstream_script, write_example
from tests.support.fake_anthropic import FakeAnthropicServer


def test_the_local_sandbox_needs_the_flag_for_the_optimizer_and_then_warns(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    with FakeAnthropicServer(ScriptedModel.from_dict(upstream_script())) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        assert cli("init", ws, "--skill", skill, "--tasks", tasks, env=env).returncode == 0
        head = git(ws, "rev-parse", "HEAD")

        refused = cli("run", ws, "--sandbox", "local", "--batch-size", "2", env=env)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "--unsafe-host-optimizer" in line and "--sandbox docker" in line and "Traceback" not in line
        assert fake.requests == [], "a model was called before the refusal"
        assert git(ws, "rev-parse", "HEAD") == head and not list((ws / "trajectories").glob("*.md"))

        ran = cli("run", ws, "--sandbox", "local", "--unsafe-host-optimizer", "--batch-size", "2", env=env)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    warning = next(x for x in ran.stdout.splitlines() if x.startswith("WARNING: optimizer"))
    for exposed in ("on this host", "API key", "workspace", "gold answers", ".git", "network"):
        assert exposed in warning, exposed
