"""The full AnthropicOptimizer loop: the real anthropic SDK against a local fake Messages API."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from harnessopt.config import OptimizerConfig
from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer
from harnessopt.optimizer.view import build_view, copy_back
from harnessopt.protocols import ModelError
from harnessopt.sandbox.local.sandbox import LocalShell
from tests.support.fake_anthropic import FakeAnthropicServer

_ids = itertools.count(1)


def _tool(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def _reply(
    content: list[dict[str, Any]], stop: str | None = None, tokens: tuple[int, int] = (100, 20)
) -> dict:
    stop = stop or ("tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn")
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "fake",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def _script(replies: list[dict]) -> Callable[[dict[str, Any]], dict]:
    it: Iterator[dict] = iter(replies)
    return lambda request: next(it)


def _credential(request: dict[str, Any]) -> str:
    headers = request["headers"]
    return str(headers.get("x-api-key") or headers.get("authorization") or "")


@pytest.fixture
def view(ws: Path, tmp_path: Path) -> Path:
    build_view(ws, tmp_path / "view", history_md="# History\n", brief_md="# Brief\nFix the skill.\n")
    return tmp_path / "view"


def _optimizer(base_url: str, tmp_path: Path, **cfg: Any) -> AnthropicOptimizer:
    client = anthropic.Anthropic(base_url=base_url, api_key="optimizer-lease-token", max_retries=2)
    config = OptimizerConfig(**{"bash_timeout_s": 5.0, **cfg})
    return AnthropicOptimizer(
        client, "claude-test", config, LocalShell, transcript_dir=tmp_path / "transcripts"
    )


def test_full_loop_explores_edits_and_summarises(ws: Path, view: Path, tmp_path: Path) -> None:
    replies = [
        _reply(
            [
                {"type": "text", "text": "Looking for failures."},
                _tool("bash", {"command": "grep -l 'passed: false' trajectories/*"}),
                _tool("str_replace_based_edit_tool", {"command": "view", "path": "../ws/tasks/tasks.jsonl"}),
            ]
        ),
        _reply(
            [
                _tool(
                    "str_replace_based_edit_tool",
                    {
                        "command": "str_replace",
                        "path": "skill/SKILL.md",
                        "old_str": "Add numbers.",
                        "new_str": "Add numbers. Answer with the number only.",
                    },
                )
            ]
        ),
        _reply([_tool("web_search", {"query": "x"})]),
        _reply([{"type": "text", "text": "Answer with the number only\n\nPattern in t1: prose answers."}]),
    ]
    with FakeAnthropicServer(_script(replies)) as fake:
        proposal = _optimizer(fake.base_url, tmp_path).propose(view, "# Brief\nFix the skill.\n", 3)

    assert proposal.stopped_by == "done"
    assert proposal.summary.splitlines()[0] == "Answer with the number only"
    assert (proposal.turns, proposal.input_tokens, proposal.output_tokens) == (4, 400, 80)
    bodies = [r["body"] for r in fake.requests]
    assert len(bodies) == 4
    assert bodies[0]["tools"] == [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    assert bodies[0]["model"] == "claude-test"
    assert "Fix the skill." in bodies[0]["messages"][0]["content"]
    assert "optimizer-lease-token" in _credential(fake.requests[0])
    grep_result, escape_result = bodies[1]["messages"][2]["content"]
    assert grep_result["content"].strip() == "trajectories/t1.md" and "is_error" not in grep_result
    assert escape_result["is_error"] is True and "outside the view" in escape_result["content"]
    assert bodies[3]["messages"][-1]["content"][0]["is_error"] is True  # unknown tool name

    assert "Answer with the number only." in (view / "skill" / "SKILL.md").read_text()
    transcript = proposal.transcript_path
    assert transcript is not None and not transcript.is_relative_to(view)
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [e["event"] for e in events].count("tool") == 4
    assert events[0]["event"] == "start" and events[-1]["event"] == "end"


def test_turn_budget_stops_the_round(view: Path, tmp_path: Path) -> None:
    def always_explore(request: dict[str, Any]) -> dict:
        return _reply([{"type": "text", "text": "Still looking."}, _tool("bash", {"command": "ls"})])

    with FakeAnthropicServer(always_explore) as fake:
        proposal = _optimizer(fake.base_url, tmp_path, max_turns=3).propose(view, "brief", 1)
    assert proposal.stopped_by == "turn_budget" and proposal.turns == 3
    assert len(fake.requests) == 3
    assert proposal.summary.startswith("Still looking.")


def test_token_budget_stops_the_round(view: Path, tmp_path: Path) -> None:
    def expensive(request: dict[str, Any]) -> dict:
        return _reply([_tool("bash", {"command": "true"})], tokens=(900, 200))

    with FakeAnthropicServer(expensive) as fake:
        proposal = _optimizer(fake.base_url, tmp_path, max_tokens=2000).propose(view, "brief", 1)
    assert proposal.stopped_by == "token_budget"
    assert proposal.turns == 2 and proposal.input_tokens + proposal.output_tokens == 2200
    assert fake.requests[1]["body"]["max_tokens"] <= 2000 - 1100


def test_wall_clock_stops_the_round(view: Path, tmp_path: Path) -> None:
    def slow_tools(request: dict[str, Any]) -> dict:
        return _reply([_tool("bash", {"command": "sleep 0.4"})])

    with FakeAnthropicServer(slow_tools) as fake:
        proposal = _optimizer(fake.base_url, tmp_path, wall_s=1.0).propose(view, "brief", 1)
    assert proposal.stopped_by == "wall_clock"
    assert 1 <= proposal.turns <= 4


def test_a_stalled_call_ends_the_turn_at_the_wall_clock_with_its_edits(view: Path, tmp_path: Path) -> None:
    """A call that stalls past the wall clock: the SDK retried it twice, each attempt waiting the
    rest of the wall clock again (47 s for wall_s 15), and the round failed as an API error with its
    edits discarded. One attempt, then the turn ends as the wall clock's, as a command agent's does."""
    import time

    calls = itertools.count()

    def edit_then_stall(request: dict[str, Any]) -> dict:
        if next(calls) == 0:
            return _reply([_tool("str_replace_based_edit_tool", {"command": "create", "path": "skill/new.md",
                                                                 "file_text": "x\n"})])  # fmt: skip
        time.sleep(6)
        return _reply([{"type": "text", "text": "late"}])

    with FakeAnthropicServer(edit_then_stall) as fake:
        proposal = _optimizer(fake.base_url, tmp_path, wall_s=2.0).propose(view, "brief", 1)
        stalled = len(fake.requests) - 1
    assert proposal.stopped_by == "wall_clock", proposal.summary
    assert stalled == 1  # one attempt: no retry re-waits the wall clock
    assert (view / "skill" / "new.md").exists()  # the edit made before the stall is the proposal's


def test_gateway_budget_refusal_ends_the_round_as_data(view: Path, tmp_path: Path) -> None:
    def refuse(request: dict[str, Any]) -> dict:
        raise ModelError(429, "rate_limit_error", "run budget exhausted: 10 calls used", retryable=False)

    with FakeAnthropicServer(refuse) as fake:
        proposal = _optimizer(fake.base_url, tmp_path).propose(view, "brief", 2)
    assert proposal.stopped_by == "error"
    assert "HTTP 429" in proposal.summary and "run budget exhausted" in proposal.summary
    assert len(fake.requests) == 1  # x-should-retry: false is honoured, no retries
    assert proposal.transcript_path is not None
    assert '"api_error"' in proposal.transcript_path.read_text()


def test_optimizer_edits_outside_the_whitelist_do_not_reach_the_workspace(ws: Path, tmp_path: Path) -> None:
    view = tmp_path / "view2"
    snap = build_view(ws, view, history_md="", brief_md="brief")
    replies = [
        _reply(
            [
                _tool("bash", {"command": "echo 'print(1)' > harness/run.py && echo tip > skill/tip.md"}),
                _tool(
                    "str_replace_based_edit_tool",
                    {"command": "create", "path": "scorer.py", "file_text": "x"},
                ),
            ]
        ),
        _reply([{"type": "text", "text": "Added a tip"}]),
    ]
    with FakeAnthropicServer(_script(replies)) as fake:
        proposal = _optimizer(fake.base_url, tmp_path).propose(view, "brief", 1)
    assert proposal.stopped_by == "done"
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert res.changed == ["skill/tip.md"]
    assert res.violations == ["harness/run.py", "scorer.py"]
    assert (ws / "harness" / "run.py").read_text().startswith("import sys")


def test_a_per_round_client_factory_is_called_with_the_round(view: Path, tmp_path: Path) -> None:
    rounds: list[int] = []
    with FakeAnthropicServer(_script([_reply([{"type": "text", "text": "Nothing to change"}])])) as fake:

        def factory(round_no: int) -> anthropic.Anthropic:
            rounds.append(round_no)
            return anthropic.Anthropic(base_url=fake.base_url, api_key=f"lease-{round_no}")

        opt = AnthropicOptimizer(factory, "m", OptimizerConfig(), LocalShell, transcript_dir=tmp_path)
        proposal = opt.propose(view, "brief", 7)
    assert rounds == [7] and proposal.summary == "Nothing to change"
    assert "lease-7" in _credential(fake.requests[0])


def test_the_editor_takes_absolute_paths_as_the_shell_sees_the_view(view: Path, tmp_path: Path) -> None:
    def container_like_shell(v: Path) -> LocalShell:
        shell = LocalShell(v)
        shell.view_root = "/view"  # as a container that mounts the view at /view reports it
        return shell

    replies = [
        _reply([_tool("str_replace_based_edit_tool", {"command": "view", "path": "/view/skill/SKILL.md"})]),
        _reply([{"type": "text", "text": "done"}]),
    ]
    with FakeAnthropicServer(_script(replies)) as fake:
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="k", max_retries=0)
        opt = AnthropicOptimizer(
            client, "m", OptimizerConfig(), container_like_shell, transcript_dir=tmp_path
        )
        assert opt.propose(view, "brief", 1).stopped_by == "done"
        result = fake.requests[1]["body"]["messages"][2]["content"][0]
    assert "is_error" not in result and "Add numbers." in result["content"]
