"""What a round's search records of each candidate (``search.state``): a winner is "validated" only
when the round reached its turn."""

from __future__ import annotations

import pytest

from harnessopt.protocols import Outcome
from harnessopt.search.screen import screen
from harnessopt.search.state import Search, attach
from harnessopt.util.text import visible
from tests.support.search import proposed


def _search(keep: int) -> Search:
    """Three screened candidates on four train tasks: c1 wins two, c2 the other two, c3 none."""
    candidates = [proposed(name) for name in ("c1", "c2", "c3")]
    fail, win = [Outcome(0.0)], [Outcome(1.0)]
    inc = {t: fail for t in ("a", "b", "c", "d")}
    runs = {"c1": {**inc, "a": win, "b": win}, "c2": {**inc, "c": win, "d": win}, "c3": dict(inc)}
    search = Search(candidates)
    attach(candidates, screen(runs, inc, keep=keep))
    return search


def test_a_second_winner_the_round_never_reached_is_not_recorded_as_validated() -> None:
    """search.winners: 2 and c1 accepted: c2 was chosen on train but never went to smoke or
    validation, so its record (log's candidate lines, ``diff --candidate``, the report) says so."""
    search = _search(keep=2)
    assert [p.name for p in search.winners] == ["c1", "c2"]
    turns = search.in_turn()
    assert next(turns).name == "c1"  # accepted: the round ends before c2's turn
    record = search.record()
    assert record is not None and record.winners == ["c1", "c2"] and record.validated == ["c1"]
    by_name = {c.name: c for c in record.candidates}
    assert by_name["c1"].chosen and by_name["c1"].reason.startswith("validated: ranked 1 of 3")
    c2 = by_name["c2"]
    assert not c2.chosen
    assert c2.reason == (
        "not validated: c1 ended the round before its turn; chosen: ranked 2 of 3 on train "
        "(+0.500 on 4 train tasks, won 2, lost 0)"
    )
    assert by_name["c3"].reason.startswith("not validated: dominated on train by c1")


@pytest.mark.parametrize("keep", [1, 2])
def test_a_winner_of_a_round_that_ended_before_validation_is_not_recorded_as_validated(keep: int) -> None:
    """STOP, the deadline or an error after the screen and before the first winner's turn: no
    candidate says "validated"."""
    record = _search(keep).record()
    assert record is not None and record.validated == []
    assert not any(c.chosen for c in record.candidates)
    c1 = next(c for c in record.candidates if c.name == "c1")
    assert c1.reason.startswith("not validated: the round ended before its validation; chosen: ranked 1")
    assert all(
        visible(c.reason) == c.reason and c.reason.startswith("not validated") for c in record.candidates
    )


def test_a_verdict_says_its_status_once() -> None:
    from harnessopt.search.state import verdict_text

    assert verdict_text("accepted", "accepted: +0.500 > dead zone 0.256 (n=14)") == (
        "accepted: +0.500 > dead zone 0.256 (n=14)"
    )
    assert verdict_text("failed", "smoke test crashed") == "failed: smoke test crashed"
    # the objective 'both' writes "accepted on ...", the prompt's reject "rejected at the prompt"
    assert verdict_text("accepted", "accepted on pass_rate and tokens, each objective at alpha/2") == (
        "accepted on pass_rate and tokens, each objective at alpha/2"
    )
    assert verdict_text("rejected", "rejected at the prompt") == "rejected at the prompt"
    # the status as a word only: a reason that merely begins with its letters still gets it
    assert verdict_text("failed", "failedover sandbox") == "failed: failedover sandbox"
    assert (
        verdict_text("failed", "accepted by the gate, not applied")
        == "failed: accepted by the gate, not applied"
    )
