import pytest

from harnessopt.protocols import Outcome
from harnessopt.search.screen import Screened, alpha_split, screen


def outs(**scores: tuple[float, ...]) -> dict[str, list[Outcome]]:
    """Task id -> one Outcome per score; a negative score is a crashed run (scored 0)."""
    return {tid: [Outcome(score=max(s, 0.0), crashed=s < 0) for s in ss] for tid, ss in scores.items()}


INC = outs(t1=(0, 0), t2=(1, 1), t3=(0, 0), t4=(1, 0))


def by_name(rows: list[Screened]) -> dict[str, Screened]:
    return {r.name: r for r in rows}


def test_best_on_train_is_the_only_one_chosen() -> None:
    good = outs(t1=(1, 1), t2=(1, 1), t3=(0, 0), t4=(1, 0))
    bad = outs(t1=(0, 0), t2=(0, 0), t3=(0, 0), t4=(1, 0))
    same = dict(INC)
    rows = screen({"c1": bad, "c2": good, "c3": same}, INC)
    assert [r.name for r in rows] == ["c2", "c3", "c1"]
    got = by_name(rows)
    assert got["c2"].chosen and not got["c1"].chosen and not got["c3"].chosen
    assert got["c2"].mean_delta == pytest.approx(0.25)
    assert got["c2"].wins == ("t1",) and got["c1"].losses == ("t2",)
    assert got["c1"].mean_delta == pytest.approx(-0.25)
    assert got["c2"].n == 4
    assert got["c2"].reason.startswith("validated: ranked 1 of 3")
    assert "c2 validated instead" in got["c1"].reason
    assert alpha_split(rows) == 1


def test_ties_break_by_wins_then_losses_then_natural_name() -> None:
    # c10 and c2 have identical outcomes: the natural order puts c2 first, whatever the input order.
    a = outs(t1=(1, 1), t2=(1, 1), t3=(0, 0), t4=(1, 0))
    rows = screen({"c10": a, "c2": dict(a)}, INC)
    assert [r.name for r in rows] == ["c2", "c10"] and rows[0].chosen
    rows = screen({"c2": dict(a), "c10": a}, INC)
    assert [r.name for r in rows] == ["c2", "c10"]
    # Same mean difference (+0.0): one wins t1 and loses t2, the other changes nothing. Winning
    # somewhere ranks first (it is the one that found something).
    trade = outs(t1=(1, 1), t2=(0, 0), t3=(0, 0), t4=(1, 0))
    rows = screen({"c1": dict(INC), "c2": trade}, INC)
    assert [r.name for r in rows] == ["c2", "c1"]


def test_floor_keeps_every_candidate_worse_than_the_incumbent_out() -> None:
    bad = outs(t1=(0, 0), t2=(0, 0), t3=(0, 0), t4=(1, 0))
    rows = screen({"c1": bad}, INC, floor=0.0)
    assert not rows[0].chosen and "below the screen floor" in rows[0].reason
    assert alpha_split(rows) == 1
    # Without a floor the best is validated whatever its train result (a one-candidate round).
    assert screen({"c1": bad}, INC)[0].chosen


def test_a_single_unscreened_candidate_is_chosen_others_without_runs_are_not() -> None:
    rows = screen({"c1": {}}, INC)
    assert rows[0].chosen and rows[0].reason == "validated: the only candidate (not screened)"
    good = outs(t1=(1, 1), t2=(1, 1), t3=(0, 0), t4=(1, 0))
    rows = by_name(screen({"c1": {}, "c2": good}, INC))
    assert rows["c2"].chosen and not rows["c1"].chosen
    assert "no train run paired" in rows["c1"].reason


def test_keep_two_returns_non_dominated_and_splits_alpha() -> None:
    a = outs(t1=(1, 1), t2=(1, 1), t3=(0, 0), t4=(1, 0))  # wins t1
    b = outs(t1=(0, 0), t2=(1, 1), t3=(1, 1), t4=(1, 1))  # wins t3 and t4: best mean
    dominated = outs(t1=(0, 0), t2=(1, 1), t3=(1, 1), t4=(1, 0))  # b is as good everywhere, better on t4
    rows = by_name(screen({"c1": a, "c2": b, "c3": dominated}, INC, keep=2))
    assert rows["c2"].chosen and rows["c1"].chosen and not rows["c3"].chosen
    assert "dominated on train by c2" in rows["c3"].reason
    assert alpha_split(list(rows.values())) == 2


def test_crashes_are_counted_and_rank_after_clean_runs() -> None:
    crashy = outs(t1=(1, 1), t2=(1, 1), t3=(0, -1), t4=(1, 0))  # +0.25, wins t1, one crash
    clean = outs(t1=(1, 1), t2=(1, 1), t3=(0, 0), t4=(1, 0))  # the same without the crash
    rows = screen({"c1": crashy, "c2": clean}, INC)
    assert rows[0].name == "c2" and by_name(rows)["c1"].crashes == 1


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError):
        screen({}, INC, keep=0)
