"""A template brings the sandbox image it needs: ``init --template claude-code`` sets rollout.image."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harnessopt.sandbox.image.variants import build_command
from tests.support.cli import cli, git, write_example


@pytest.mark.parametrize("template", ["claude-code", "codex"])  # codex: it did not (QA)
def test_init_of_an_agent_template_sets_the_image_it_runs_in(tmp_path: Path, template: str) -> None:
    skill, tasks = write_example(tmp_path)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--template", template)
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())
    assert cfg["rollout"]["image"] == f"harnessopt-sandbox:{template}"
    assert f"build it once with `harnessopt sandbox build --with {template}`" in out.stdout


def test_the_claude_code_template_sets_the_memory_its_runtime_needs(tmp_path: Path) -> None:
    """The CLI's runtime (Bun) reserves more address space than the local sandbox's RLIMIT_AS at the
    1024 default: every task crashed with Bun's crash text (QA). init sets rollout.memory_mb from
    template.yaml, unless the config names one."""
    skill, tasks = write_example(tmp_path)
    assert (
        cli(
            "init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--template", "claude-code"
        ).returncode
        == 0
    )
    cfg = yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())
    assert cfg["rollout"]["memory_mb"] == 8192
    assert cli("init", tmp_path / "chat", "--skill", skill, "--tasks", tasks).returncode == 0
    assert yaml.safe_load((tmp_path / "chat" / "harnessopt.yaml").read_text())["rollout"]["memory_mb"] == 1024


def test_other_templates_keep_the_plain_image(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    assert cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks).returncode == 0
    cfg = yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())
    assert cfg["rollout"]["image"] == "harnessopt-sandbox:latest"


def test_a_missing_variant_image_names_its_build_command() -> None:
    assert build_command("harnessopt-sandbox:claude-code") == "harnessopt sandbox build --with claude-code"
    assert build_command("harnessopt-sandbox:latest") == "harnessopt sandbox build"
    assert build_command("mine:v1") == "harnessopt sandbox build --tag mine:v1"


def test_the_command_template_names_the_program_the_skill_lacks(tmp_path: Path) -> None:
    """harness/command.yaml runs {skill}/scripts/answer.py: init said "next: harnessopt run" for a
    skill without it, and that run crashed every task of round 1. Init says what to add, the run
    and its dry run refuse before anything runs, and with the program added the dry run starts."""
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    out = cli("init", ws, "--skill", skill, "--tasks", tasks, "--template", "command")
    assert out.returncode == 0, out.stderr
    said = "harness/command.yaml runs {skill}/scripts/answer.py, which skill/ does not have"
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("next: ")]
    assert said in line and line.endswith(f"; then harnessopt run {ws}")
    for dry in (("--dry-run",), ()):
        r = cli("run", ws, "--rounds", "1", "--sandbox", "local", "--unsafe-host-optimizer", *dry)
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    (ws / "skill" / "scripts").mkdir()
    (ws / "skill" / "scripts" / "answer.py").write_text("import sys\nprint('word')\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "the program that answers")
    r = cli("run", ws, "--rounds", "1", "--sandbox", "local", "--unsafe-host-optimizer", "--dry-run")
    assert r.returncode == 0 and "start it with" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize(("template", "executable"), [("claude-code", "claude"), ("codex", "codex")])
def test_an_agent_template_under_the_local_sandbox_needs_its_cli_on_this_host(
    tmp_path: Path, template: str, executable: str
) -> None:
    """Under --sandbox local the harness runs the CLI from this host's PATH: without it every task
    of round 1 failed on the harness's line, which named the Docker image to build (QA). The run
    and its dry run refuse up front with the npm install, and nothing in the workspace changes."""
    import os
    import shutil
    import sys

    from tests.support.cli_errors import assert_unchanged, assert_user_error, snapshot

    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", skill, "--tasks", tasks, "--template", template).returncode == 0
    bin_dir = tmp_path / "bin"  # this host's tools but for the CLI
    bin_dir.mkdir()
    for tool in ("git", "bwrap", "sh", "bash"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    env = {
        "ANTHROPIC_API_KEY": "x",
        "OPENAI_API_KEY": "x",
        "PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}",
    }
    before = snapshot(ws)
    run = ("run", ws, "--sandbox", "local", "--unsafe-host-optimizer", "--rounds", "1")
    for dry in (("--dry-run",), ()):
        out = cli(*run, *dry, env=env)
        assert_user_error(
            out, f"runs the '{executable}' CLI, which is not on this host's PATH", "npm install -g"
        )
    assert_unchanged(ws, before)
    (bin_dir / executable).symlink_to(shutil.which(executable) or "/bin/true")  # with it, the dry run goes on
    out = cli(*run, "--dry-run", env=env)
    assert f"runs the '{executable}' CLI" not in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("template", "api"),
    [("openai-chat", "Chat Completions"), ("openai-chat-sdk", "Chat Completions"), ("codex", "Responses")],
)
def test_init_of_an_openai_template_says_how_to_point_the_provider_at_an_openai_endpoint(
    tmp_path: Path, template: str, api: str
) -> None:
    """``init --template openai-chat`` kept model.provider anthropic and said nothing, so a user with a
    local OpenAI-compatible server ran against the Messages API (QA). The provider stays the default
    (the gateway translates every pairing); init now says so and what to set."""
    skill, tasks = write_example(tmp_path)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--template", template)
    assert out.returncode == 0, out.stderr
    assert f"template {template} speaks the {api} API; model.provider is anthropic" in out.stdout
    assert "set model.provider: openai, model.target and model.base_url" in out.stdout
    assert (
        yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())["model"]["provider"] == "anthropic"
    )
    plain = cli("init", tmp_path / "chat", "--skill", skill, "--tasks", tasks)
    assert "model.provider" not in plain.stdout
