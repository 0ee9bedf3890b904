from harnessopt.ledger.store import CandidateRecord, Round, RoundManifest, SearchRecord, Status
from harnessopt.search.archive import Archived, archived, complementary


def _round(k: int, status: Status, *cands: CandidateRecord, merged: tuple[str, ...] = ()) -> Round:
    m = RoundManifest(
        round=k, status=status, search=SearchRecord(candidates=list(cands), merged=list(merged))
    )
    return Round(k, m.status, f"sha{k}", f"ref{k}", m, "")


def _c(name: str, wins: list[str], chosen: bool = False, verdict: str = "") -> CandidateRecord:
    return CandidateRecord(name=name, wins=wins, chosen=chosen, commit=f"commit-{name}", verdict=verdict)


def test_the_archive_keeps_winners_not_on_main_and_not_offered_yet() -> None:
    rounds = [
        _round(1, "accepted", _c("c1", ["a"], chosen=True), _c("c2", ["b"]), _c("c3", [])),
        _round(2, "rejected", _c("c1", ["c"], chosen=True), _c("c2", ["d"])),
        _round(3, "rejected", _c("c1", []), merged=("round-2/c2",)),
    ]
    keys = [e.key for e in archived(rounds, 10)]
    # round 1's c1 is on main; c3 won nothing; round-2/c2 was offered to round 3's merge already
    assert keys == ["round-1/c2", "round-2/c1"]
    assert [e.key for e in archived(rounds, 1)] == ["round-2/c1"] and archived(rounds, 0) == []


def test_a_merge_needs_two_candidates_that_each_add_a_win() -> None:
    a, b = Archived(1, "c1", "x", ("t1", "t2"), ""), Archived(2, "c1", "y", ("t2",), "")
    assert complementary([a, b]) == [b, a]  # most recent first; a adds t1
    assert complementary([b, Archived(3, "c2", "z", ("t2",), "")]) == []  # the same win: nothing to merge


def test_explore_steps_are_never_archived() -> None:
    """Each step's wins are over the step before it, and a kept step is part of its chain's end."""
    rounds = [_round(1, "accepted", _c("s1", ["a"]), _c("s2", ["b"], chosen=True), _c("s3", ["c"]))]
    assert archived(rounds, 10) == []


def test_a_winner_rejected_before_the_rounds_accepted_one_stays_in_the_archive() -> None:
    """search.winners 2: c1 validated and rejected, then c2 accepted. Only c2 is on main; c1's
    train wins (italy, which nothing else won) were left out of every later merge."""
    rounds = [
        _round(
            1,
            "accepted",
            _c("c1", ["france", "italy"], chosen=True, verdict="rejected: +0.000 inside dead zone 0.287"),
            _c("c2", ["spain"], chosen=True, verdict="accepted: +0.200 > dead zone 0.150"),
            _c("c3", ["turkey"], chosen=True),  # a third winner the round never reached
        ),
        _round(2, "accepted", _c("c1", ["a"], chosen=True, verdict="accepted on pass_rate and tokens")),
    ]
    assert [e.key for e in archived(rounds, 10)] == ["round-1/c1", "round-1/c3"]
    # a record without verdicts (an older round): every winner of an accepted round counts as in
    assert (
        archived([_round(1, "accepted", _c("c1", ["a"], chosen=True), _c("c2", ["b"], chosen=True))], 10)
        == []
    )
