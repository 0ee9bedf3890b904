"""What the claude-code preset reads from the CLI's last stream-json event (``claude_code.proposal``)."""

from __future__ import annotations

import json

from harnessopt.optimizer.claude_code import proposal
from harnessopt.protocols import AgentResult


def _result(final: dict, exit_code: int | None = 1) -> AgentResult:
    return AgentResult(json.dumps({"type": "result", **final}) + "\n", "", exit_code, False)


def test_an_api_error_is_not_called_a_success() -> None:
    """The CLI ends an API error with subtype "success" and is_error true: the summary read
    "claude-code stopped: success: API Error: Repeated 529 ..." (QA)."""
    got = proposal(_result({"subtype": "success", "is_error": True, "result": "API Error: Repeated 529"}))
    assert got.stopped_by == "error"
    assert got.summary.startswith("claude-code stopped: error: API Error: Repeated 529")


def test_another_subtype_is_named() -> None:
    got = proposal(_result({"subtype": "error_max_turns", "is_error": True, "result": "out of turns"}))
    assert got.summary.startswith("claude-code stopped: error_max_turns: out of turns")
