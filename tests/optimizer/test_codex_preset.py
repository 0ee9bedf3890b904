"""The ``codex`` optimizer preset without Docker: its argv, its refusal of optimizer.command, and
how its JSON events become a Proposal (the real CLI in a round: tests/test_codex.py)."""

from __future__ import annotations

import json

import pytest

from harnessopt.config import OptimizerConfig
from harnessopt.errors import UserError
from harnessopt.optimizer import make_optimizer
from harnessopt.optimizer.codex import codex_argv, proposal
from harnessopt.protocols import AgentResult


def _jsonl(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


def test_argv_writes_the_provider_config_and_reads_the_brief_from_stdin() -> None:
    argv = codex_argv("gpt-opt")
    assert argv[:2] == ["sh", "-c"] and 'wire_api = "responses"' in argv[2]
    assert 'base_url = "$ANTHROPIC_BASE_URL/v1"' in argv[2] and 'env_key = "ANTHROPIC_API_KEY"' in argv[2]
    assert argv[-3:] == ["-m", "gpt-opt", "-"] and "--json" in argv and 'web_search="disabled"' in argv


def test_optimizer_command_is_refused() -> None:
    with pytest.raises(UserError, match="codex builds its own"):
        make_optimizer(
            OptimizerConfig(backend="codex", command=["codex", "exec"], unsafe_host=True),
            client_factory=lambda _round: None,
        )


def test_a_finished_run_is_done_with_the_last_message_and_the_tokens() -> None:
    out = _jsonl(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "item.completed", "item": {"type": "command_execution", "command": "sed -i ..."}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Terse answers\n\nWhy."}},
        {"type": "turn.completed", "usage": {"input_tokens": 12000, "output_tokens": 40}},
    )
    p = proposal(AgentResult(out, "", 0, False))
    assert (p.summary, p.stopped_by, p.turns) == ("Terse answers\n\nWhy.", "done", 2)
    assert (p.input_tokens, p.output_tokens) == (12000, 40)


def test_a_budget_refusal_makes_the_round_an_error_that_says_so() -> None:
    out = _jsonl(
        {"type": "error", "message": "Quota exceeded. Check your plan and billing details."},
        {"type": "turn.failed", "error": {"message": "Quota exceeded. Check your plan and billing details."}},
    )
    p = proposal(AgentResult(out, "", 1, False))
    assert p.stopped_by == "error" and "Quota exceeded" in p.summary and "exit 1" in p.summary
    assert p.summary.count("Quota exceeded") == 1  # said once, not once an event (QA)


def test_a_timeout_is_wall_clock() -> None:
    assert proposal(AgentResult("", "", None, True)).stopped_by == "wall_clock"
