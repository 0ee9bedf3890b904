"""What a round's manifest records of its optimizer."""

from __future__ import annotations

from harnessopt.protocols import Proposal
from harnessopt.round.record import optimizer_record


def test_an_optimizer_that_reports_no_tokens_is_recorded_with_the_gateways_count() -> None:
    """A Codex turn that fails sends no usage: the manifest said 0 tokens for an optimizer the
    gateway had counted thousands for (QA)."""
    counted = {"calls": 3, "input": 4200, "output": 310}
    failed = Proposal(summary="codex stopped (exit 1): boom", turns=2, stopped_by="error")
    record = optimizer_record(failed, ["big.bin"], counted)
    assert (record.input_tokens, record.output_tokens) == (4200, 310)
    assert record.stopped_by == "error" and record.turns == 2 and record.view_skipped == ["big.bin"]
    reported = Proposal(summary="done", turns=5, stopped_by="done", input_tokens=900, output_tokens=40)
    record = optimizer_record(reported, [], counted)  # the agent's own count is kept
    assert (record.input_tokens, record.output_tokens) == (900, 40)
    record = optimizer_record(failed, [], None)  # nothing counted: nothing made up
    assert (record.input_tokens, record.output_tokens) == (0, 0)
