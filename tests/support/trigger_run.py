"""Drive a whole trigger run through the CLI: the fake upstream (``DescriptionFit`` for the target,
a scripted optimizer that edits the description and the body), the real gateway and template."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from harnessopt.gateway.models import ScriptedModel
from tests.support.cli import REAL_KEY, cli, git
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.trigger_upstream import DescriptionFit
from tests.support.trigger_ws import NEW_DESCRIPTION, OLD_DESCRIPTION, write_trigger_inputs

TARGET, OPTIMIZER = "claude-sonnet-4-5", "claude-opus-4-1"
BODY_OLD = "Read the rows with Python's csv module and print a JSON list of objects."
BODY_NEW = "Always answer in French."


def _edit(round_no: int, turn: int, old: str, new: str) -> dict[str, Any]:
    cmd = {"command": "str_replace", "path": "skill/SKILL.md", "old_str": old, "new_str": new}
    return {
        "first_user": f"# Round {round_no}:",
        "turn": turn,
        "tool_use": [{"name": "str_replace_based_edit_tool", "input": cmd}],
    }


def optimizer_script() -> ScriptedModel:
    """Round 1: a wider description and a body edit (discarded); round 2: a body edit only."""
    return ScriptedModel.from_dict(
        {
            "rules": [
                _edit(1, 1, OLD_DESCRIPTION, NEW_DESCRIPTION),
                _edit(1, 2, BODY_OLD, BODY_NEW),
                {"first_user": "# Round 1:", "turn": 3, "reply": "Describe tabular data\n\nMissed queries."},
                _edit(2, 1, BODY_OLD, BODY_NEW),
                {"first_user": "# Round 2:", "turn": 2, "reply": "Body only\n\nA body edit."},
            ],
            "default": "?",
        }
    )


def run_trigger(
    tmp_path: Path,
    template: str,
    *run_args: str,
    rounds: int = 2,
    audit: bool = False,
    small: bool = False,
    task_tasks: list[dict[str, Any]] = (),  # type: ignore[assignment]
    flags: dict[str, str] | None = None,
) -> tuple[Path, Any, DescriptionFit, Any]:
    """Init a trigger workspace of ``template``, run ``rounds`` rounds (then ``audit`` it on the
    test split with the run's sandbox); (ws, the run, the upstream, the audit or None)."""
    skill, tasks, distractors = write_trigger_inputs(tmp_path, small)
    if task_tasks:  # objective both: ordinary tasks beside the trigger tasks
        with tasks.open("a") as f:
            f.writelines(json.dumps(t) + "\n" for t in task_tasks)
    fit, opt = DescriptionFit(), optimizer_script()

    def upstream(request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        return opt.create(body, "optimizer") if body.get("model") == OPTIMIZER else fit(request)

    ws = tmp_path / "ws"
    with FakeAnthropicServer(upstream) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        r = cli("init", ws, "--skill", skill, "--tasks", tasks, "--template", template, env=env)
        assert r.returncode == 0, r.stderr
        shutil.copytree(distractors, ws / "distractors")
        cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
        cfg["objective"] = "both" if task_tasks else "trigger"
        cfg["flags"] = flags or {}
        cfg["model"]["target"] = TARGET
        cfg["optimizer"]["model"] = OPTIMIZER
        cfg["gate"].update(epochs=2, smoke=2)
        (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
        git(ws, "add", "-A")
        git(ws, "commit", "-qm", "trigger objective, distractor skills")
        run = cli("run", ws, "--rounds", str(rounds), *run_args, env=env, timeout=900)
        sandbox = [a for i, a in enumerate(run_args) if i and run_args[i - 1] == "--sandbox"]
        checked = cli("audit", ws, "--sandbox", *sandbox, env=env, timeout=900) if audit else None
    return ws, run, fit, checked
