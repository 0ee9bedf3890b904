"""Issue 8.3: an optimizer whose tools would run on this host needs --unsafe-host-optimizer.

Without it, ``harnessopt run --sandbox local`` stops before any rollout or model call with one
line that says what to do; with it, the run goes on and a warning names what is exposed.
"""

from __future__ import annotations

from pathlib import Path

from harnessopt.gateway.models.scripted import ScriptedModel
from tests.support.cli import REAL_KEY, cli, git, upstream_script, write_example
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.workspace import make_ws


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


def test_a_dry_run_where_auto_falls_back_to_local_names_the_flag_the_run_needs(tmp_path: Path) -> None:
    """rollout.sandbox: auto without a Docker engine runs the optimizer on this host, which the run
    refuses without --unsafe-host-optimizer; the dry run said "start it with" a command that
    refused (QA)."""
    ws = make_ws(tmp_path, rollout={"sandbox": "auto"}, optimizer={"unsafe_host": False})
    no_docker = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    dry = cli("run", ws, "--rounds", "1", "--dry-run", env=no_docker)
    assert dry.returncode == 2 and "--unsafe-host-optimizer" in dry.stderr, (dry.stdout, dry.stderr)
    assert "start it with" not in dry.stdout
    ok = cli("run", ws, "--rounds", "1", "--dry-run", "--unsafe-host-optimizer", env=no_docker)
    assert ok.returncode == 0 and "start it with" in ok.stdout, (ok.stdout, ok.stderr)
