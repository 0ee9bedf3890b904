"""Test support: make_result, tool_loop, exchange, SYSTEM, TOOLS (shared by several test modules)."""

from __future__ import annotations

from typing import Any

from harnessopt.protocols import Exchange, TaskResult

SYSTEM = "You are a careful calculator. Use the bash tool."


TOOLS = [{"type": "bash_20250124", "name": "bash"}]


def exchange(
    messages: list[dict[str, Any]], content: list[dict[str, Any]], started: float, **kw: Any
) -> Exchange:
    request = {
        "model": "claude-test",
        "max_tokens": 100,
        "system": SYSTEM,
        "tools": TOOLS,
        "messages": messages,
    }
    response = {"role": "assistant", "content": content, "stop_reason": kw.pop("stop_reason", "tool_use")}
    return Exchange(request=request, response=response, error=None, started=started, wall_s=0.25, **kw)


def tool_loop() -> list[Exchange]:
    user = {"role": "user", "content": "What is 6*7?"}
    use = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "echo $((6*7))"}}
    # The SDK adds fields such as citations=None when a harness sends response blocks back.
    said = {"type": "text", "text": "Let me compute.", "citations": None}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "42\n"}],
    }
    first = exchange([user], [{"type": "text", "text": "Let me compute."}, use], 10.0, input_tokens=50)
    second = exchange(
        [user, {"role": "assistant", "content": [said, use]}, result],
        [{"type": "text", "text": "FINAL: 42"}],
        11.0,
        stop_reason="end_turn",
        input_tokens=80,
        output_tokens=5,
    )
    return [second, first]  # out of order on purpose: rendering sorts by start time


def make_result(**kw: Any) -> TaskResult:
    values: dict[str, Any] = dict(
        task_id="math/1",
        split="train",
        round=3,
        epoch=0,
        score=0.5,
        passed=False,
        soft=0.75,
        feedback='expected "42"\nbut the answer had extra text: yes',
        answer="FINAL: 42",
        exit_code=0,
        error_class=None,
        wall_s=1.23456,
        input_tokens=130,
        output_tokens=25,
        steps=2,
        stderr_tail="warning: slow\n",
        task_input="What is 6*7?",
        exchanges=tool_loop(),
        harness_events=[{"event": "start"}, {"event": "done", "steps": 2}],
        notes=["network: none", "memory limit: 1024 MB"],
    )
    values.update(kw)
    return TaskResult(**values)
