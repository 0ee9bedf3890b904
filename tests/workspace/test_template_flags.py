"""Every flag a shipped template reads is registered in its flags.yaml, so ``ablate`` and
``-c flags.NAME=...`` work on a fresh workspace."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.workspace import flags
from harnessopt.workspace.core import templates_dir
from tests.support.cli import REAL_KEY, cli, git, upstream_script, write_example
from tests.support.fake_anthropic import FakeAnthropicServer

READ = re.compile(r"HO_FLAG_([A-Z][A-Z0-9_]*)")


@pytest.mark.parametrize("template", sorted(p.name for p in templates_dir().iterdir() if p.is_dir()))
def test_every_flag_a_template_reads_is_registered(template: str) -> None:
    tpl = templates_dir() / template
    read = {m.lower() for f in tpl.rglob("*") if f.is_file() for m in READ.findall(f.read_text())}
    assert read <= {f.name for f in flags.registered(tpl)}, f"{template} reads {sorted(read)}"


def test_ablate_and_config_reach_the_chat_templates_stream_flag(tmp_path: Path) -> None:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", skill, "--tasks", tasks).returncode == 0
    dry = cli("run", ws, "--dry-run", "-c", "flags.stream=0")
    assert dry.returncode == 0, dry.stderr
    with FakeAnthropicServer(ScriptedModel.from_dict(upstream_script())) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        out = cli("ablate", ws, "stream", "--sandbox", "local", "--json", env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["runs"] == report["runs_that_read_it"] > 0  # every run read HO_FLAG_STREAM
    assert git(ws, "status", "--porcelain") == ""
