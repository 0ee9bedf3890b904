"""The built-in optimizer on an OpenAI-compatible upstream: its bash and editor tools as functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic

from harnessopt.config import BudgetConfig, OptimizerConfig
from harnessopt.gateway.models import OpenAIModel, ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.gateway.translate import BASH_SCHEMA, EDITOR_SCHEMA
from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer
from harnessopt.optimizer.view import build_view
from harnessopt.sandbox.local.sandbox import LocalShell
from tests.support.fake_openai import FakeOpenAIServer, completion, function_call

EDIT = {
    "command": "str_replace",
    "path": "skill/SKILL.md",
    "old_str": "Add numbers.",
    "new_str": "Add numbers. Answer with the number only.",
}


def test_the_optimizer_edits_the_view_through_an_openai_upstream(ws: Path, tmp_path: Path) -> None:
    view = tmp_path / "view"
    build_view(ws, view, history_md="# History\n", brief_md="# Brief\nFix the skill.\n")
    replies = iter(
        [
            completion(
                "Looking.",
                [
                    function_call("call_1", "bash", json.dumps({"command": "cat skill/SKILL.md"})),
                    function_call("call_2", "str_replace_based_edit_tool", json.dumps(EDIT)),
                ],
                "tool_calls",
            ),
            completion("Answer with the number only\n\nProse answers failed."),
        ]
    )
    with FakeOpenAIServer(lambda r: next(replies)) as fake:
        target = ScriptedModel.from_dict({"default": "unused"})
        optimizer_model = OpenAIModel("sk-up", fake.base_url, max_retries=0)
        with Gateway(target, BudgetConfig(), models={"optimizer": optimizer_model}) as gw:
            lease = gw.lease("optimizer", 3, None)
            client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0)
            cfg = OptimizerConfig(model="gpt-opt", bash_timeout_s=10.0)
            opt = AnthropicOptimizer(client, "gpt-opt", cfg, LocalShell, transcript_dir=tmp_path / "t")
            proposal = opt.propose(view, "# Brief\nFix the skill.\n", 3)
            usage = gw.usage()[("optimizer", 3)]
        first, second = (r["body"] for r in fake.requests)

    assert proposal.stopped_by == "done" and proposal.summary.splitlines()[0] == "Answer with the number only"
    assert (view / "skill" / "SKILL.md").read_text().endswith("Add numbers. Answer with the number only.\n")
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert tools == {"bash": BASH_SCHEMA, "str_replace_based_edit_tool": EDITOR_SCHEMA}
    assert first["messages"][0]["role"] == "system" and first["model"] == "gpt-opt"
    results: list[dict[str, Any]] = [m for m in second["messages"] if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == ["call_1", "call_2"]
    assert "Add numbers." in results[0]["content"] and not results[1]["content"].startswith("Error:")
    assert second["messages"][-3]["tool_calls"][1]["function"]["arguments"] == json.dumps(EDIT)
    assert usage.calls == 2 and usage.input_tokens == 22 and usage.output_tokens == 14
