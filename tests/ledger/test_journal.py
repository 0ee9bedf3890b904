"""The journal is append-only and fsynced; a line torn by a crash is skipped and reported."""

from __future__ import annotations

from pathlib import Path

from harnessopt.ledger.journal import Journal


def test_torn_line_is_tolerated_reported_and_never_glued_to_the_next(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.write(1, "start", parent="abc")
    with j.path.open("a") as f:
        f.write('{"t": 1, "round": 1, "pha')  # the crash came mid-write
    j.write(1, "rollout", passed=3)
    entries, torn = j.read()
    assert [e["phase"] for e in entries] == ["start", "rollout"] and torn == 1
    assert j.last() == entries[-1]
    assert Journal(tmp_path / "empty").read() == ([], 0)
