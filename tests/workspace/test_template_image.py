"""A template brings the sandbox image it needs: ``init --template claude-code`` sets rollout.image."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harnessopt.sandbox.image.variants import build_command
from tests.support.cli import cli, write_example


@pytest.mark.parametrize("template", ["claude-code", "codex"])  # codex: it did not (QA)
def test_init_of_an_agent_template_sets_the_image_it_runs_in(tmp_path: Path, template: str) -> None:
    skill, tasks = write_example(tmp_path)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--template", template)
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())
    assert cfg["rollout"]["image"] == f"harnessopt-sandbox:{template}"
    assert f"build it once with `harnessopt sandbox build --with {template}`" in out.stdout


def test_other_templates_keep_the_plain_image(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    assert cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks).returncode == 0
    cfg = yaml.safe_load((tmp_path / "ws" / "harnessopt.yaml").read_text())
    assert cfg["rollout"]["image"] == "harnessopt-sandbox:latest"


def test_a_missing_variant_image_names_its_build_command() -> None:
    assert build_command("harnessopt-sandbox:claude-code") == "harnessopt sandbox build --with claude-code"
    assert build_command("harnessopt-sandbox:latest") == "harnessopt sandbox build"
    assert build_command("mine:v1") == "harnessopt sandbox build --tag mine:v1"
