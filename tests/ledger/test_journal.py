"""The journal is append-only and fsynced; a line torn by a crash is skipped and reported."""

from __future__ import annotations

from pathlib import Path

from harnessopt.ledger.journal import Journal, last_step, stopped_step


def test_torn_line_is_tolerated_reported_and_never_glued_to_the_next(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.write(1, "start", parent="abc")
    with j.path.open("a") as f:
        f.write('{"t": 1, "round": 1, "pha')  # the crash came mid-write
    j.write(1, "rollout", passed=3)
    entries, torn = j.read()
    assert [e["phase"] for e in entries] == ["start", "rollout"] and torn == 1
    assert Journal(tmp_path / "empty").read() == ([], 0)


def test_the_last_step_reads_past_the_spend_lines_a_rounds_way_out_writes(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    assert last_step(j.entries()) is None and stopped_step(j.entries()) is None
    j.write(1, "start", parent="abc")
    j.write(1, "validating")
    j.write(1, "spend", usd=0.1)
    assert last_step(j.entries()) == stopped_step(j.entries()) == j.entries()[1]
    j.write(1, "recorded", status="rejected")
    j.write(1, "spend", usd=0.2)
    assert last_step(j.entries()) == j.entries()[3] and stopped_step(j.entries()) is None


def test_a_line_that_is_not_ours_is_skipped_not_a_traceback(tmp_path: Path) -> None:
    """A hand-edited line ({"phase": "spend"} without a round, or "round": "x") crashed status and
    report with a KeyError or ValueError (QA): only lines as the journal writes them are read."""
    from harnessopt.reporting.log import status_lines
    from harnessopt.workspace.core import Workspace
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    path = ws / ".harnessopt" / "journal.jsonl"
    path.parent.mkdir(exist_ok=True)
    with path.open("a") as f:
        f.write('{"phase": "spend"}\n{"phase": "spend", "round": "x"}\n{"round": true, "phase": "x"}\n')
    opened = Workspace.open(ws)
    assert opened.journal.read() == ([], 3)
    assert any(x.startswith("journal: 3 line(s) that do not read") for x in status_lines(opened))
