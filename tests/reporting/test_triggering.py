"""The log's triggering line (``reporting/triggering.py``)."""

from __future__ import annotations

from harnessopt.ledger.manifest import TriggerSide, TriggerStats
from harnessopt.reporting.triggering import trigger_note, trigger_row


def test_a_measured_round_shows_both_sides_and_the_description_lengths() -> None:
    stats = TriggerStats(
        candidate=TriggerSide(precision=1.0, recall=1.0),
        incumbent=TriggerSide(precision=1.0, recall=0.2),
        description_chars=160,
        incumbent_description_chars=41,
    )
    note = trigger_note(trigger_row(stats))
    assert note == "trigger: precision 1.00->1.00, recall 0.20->1.00, description 41->160 chars"


def test_a_no_op_round_does_not_read_as_measured() -> None:
    """A no-op round's line was "trigger: description 41->41 chars": no candidate ran, so the
    length is the incumbent's and the line read as a measurement (QA). It says nothing now."""
    unmeasured = TriggerStats(incumbent=TriggerSide(precision=1.0, recall=0.2), description_chars=41,
                              incumbent_description_chars=41)  # fmt: skip
    assert trigger_note(trigger_row(unmeasured)) == ""
    shorter = unmeasured.model_copy(update={"description_chars": 30})  # an edit that was not measured
    assert trigger_note(trigger_row(shorter)) == "trigger: description 41->30 chars"


def test_a_side_with_no_figure_reads_as_none_not_as_an_arrow() -> None:
    """No incumbent precision (it loaded on no query) printed "precision -->1.00" (QA)."""
    t = {"incumbent": {"precision": None, "recall": 0.0}, "candidate": {"precision": 1.0, "recall": 0.5}}
    assert trigger_note(t) == "trigger: precision n/a->1.00, recall 0.00->0.50"
