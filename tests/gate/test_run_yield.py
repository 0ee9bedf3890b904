"""The yield benchmark behind docs/gate.md ("Yield") runs end to end on a few runs and decides with
the shipped gate (the real figures take minutes)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from benchmarks import gate_simulation as sim
from benchmarks import run_yield as y
from harnessopt.search.checkpoints import EVERY, LONG_STEPS, MARGIN, TASKS, WIDE


def test_the_benchmark_prints_every_table_for_every_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert y.main(["--runs", "2", "--trials", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    per_round = {st.label for st in y.round_strategies()}
    for st in y.strategies():
        runs = st.kind in y.LOOP_KINDS
        tables = sum(len(budgets) for _, budgets in y.YIELDS.values())
        baseline = st.kind not in y.CHAIN_KINDS  # a row of the paired table too
        assert out.count(f"| {st.label} |") == runs + tables + (st.label in per_round) + baseline
    for b in y.BUDGETS:
        assert f"yield at {b} rollouts" in out
        assert f"yield at a cost of {b} rollouts, an optimizer turn at {y.TURN_PRICE}" in out
    for b in y.PRIORS_BUDGETS:
        assert f"yield at a cost of {b} rollouts, an optimizer turn at {y.PRIORS_TURN_PRICE}" in out
    for st in y.round_strategies()[1:]:  # the gate's rows: per round only
        assert out.count(f"| {st.label} |") == 1
    assert (
        "| default (Config() now: search.explore, search.screen_tasks, search.checkpoints and "
        "search.ties_move null, chosen by price and budget) |" in out
    )  # the shipped default
    paired = out.split("the default against each baseline, run by run")[1].split("where the gain goes")[0]
    rows = [line for line in paired.splitlines() if line.startswith("| ")][1:]  # under the header
    assert [r.split(" | ")[0][2:] for r in rows] == [
        st.label for st in y.strategies() if st.kind not in y.CHAIN_KINDS
    ]
    for r in rows:
        cells = r.strip("| ").split(" | ")[1:]
        assert len(cells) == tables and all(c.split()[-1] in ("above", "below", "level") for c in cells)
    gone = out.split("where the gain goes")[1]  # the default's and GEPA-style's, in each yield table
    assert gone.count("| default | ") == gone.count("| GEPA-style | ") == tables


def test_the_default_is_set_against_a_baseline_run_by_run() -> None:
    """A difference every run shows is above or below however much the runs differ from one another
    (the rows' own standard errors would call it level); one that goes both ways is level."""
    runs = [0.0, 0.5, 1.0, 0.25]
    assert y._paired(runs, [g - 0.125 for g in runs]) == "+0.1250 ±0.0000 above"
    assert y._paired([g - 0.125 for g in runs], runs) == "-0.1250 ±0.0000 below"
    assert y._paired(runs, [0.25, 0.25, 0.75, 0.0]) == "+0.1250 ±0.1250 level"  # -0.25 once, +0.25 thrice
    with pytest.raises(ValueError):
        y._paired(runs, runs[:3])  # runs that are not the same seeds' are not paired


def test_a_budgeted_default_run_ends_without_a_round_the_budget_cut_and_the_stop_befores_did_not() -> None:
    """The default row holds every step of a chain to room for its validation and starts no round
    without room for a step and a one-look validation (``round.driver``), so none of its runs ends
    with a round the gateway stopped; the stop before's row held only a chain that had moved, and
    some of its runs spent their last steps where no validation fit. The two runs are the same up
    to the first step the default does not take, and the default then stops: it spends no more."""
    default, before = y.strategies()[2], y.strategies()[4]  # before checkpoints: at 2,000 the default's run
    assert not default.moved_only and before.moved_only and default.search == before.search
    ran = [
        (y.run_one(default, y.world(s), s, 2000, turn=20), y.run_one(before, y.world(s), s, 2000, turn=20))
        for s in range(12)
    ]
    assert sum(d.stopped for d, _ in ran) == 0 and sum(b.stopped for _, b in ran) >= 3
    assert all(d.spent[0] <= b.spent[0] for d, b in ran)
    assert sum(d.spent[0] < b.spent[0] for d, b in ran) >= 3


def test_a_run_spends_no_more_than_its_budget_and_counts_true_effects() -> None:
    w = y.world(3)
    for st in y.strategies():
        for turn in (0, y.TURN_PRICE):
            r = y.run_one(st, w, 3, 600, turn=turn)
            assert r.spent[0] <= 600  # what would take it past is refused
            assert 0 <= r.bad_commits <= r.commits
            assert len(r.gain) == 1 and np.isfinite(r.gain[0])


def test_a_round_the_budget_cannot_finish_moves_nothing() -> None:
    """780 rollouts pay the default's first chain (the batch and 50 steps: 808) only in part, and
    without the plan (the row of before it) nothing ends the chain early: no run validates, let
    alone commits, though the same rounds unbounded do."""
    st = y.strategies()[3]
    assert not st.plans
    unbounded = [y.run_explore(st, y.world(s), s, 10**6, 1).commits for s in range(20)]
    assert sum(unbounded) >= 2
    bounded = [y.run_one(st, y.world(s), s, 780) for s in range(20)]
    assert all(r.commits == 0 and r.gain == [0.0] and r.spent[0] <= 780 for r in bounded)


def test_the_budgets_plan_validates_a_shorter_last_chain_inside_the_budget() -> None:
    """1,200 rollouts: a chain of 50 steps (808 with the round's batch) and the bank (550) leave no
    validation; the loop's plan (``search.budget``) ends the chain where a one-look validation (its
    bank of 3 runs a task) still fits, so some runs commit, none spends past its budget; without
    the plan (the stop before's row) none commits."""
    planned, unplanned = y.strategies()[2], y.strategies()[3]
    assert planned.plans and not unplanned.plans and planned.search == unplanned.search
    pairs = [
        (y.run_one(planned, y.world(s), s, 1200), y.run_one(unplanned, y.world(s), s, 1200))
        for s in range(20)
    ]
    assert sum(p.commits for p, _ in pairs) >= 2 and sum(u.commits for _, u in pairs) == 0
    assert all(p.spent[0] <= 1200 for p, _ in pairs)
    assert sum(p.bad_commits for p, _ in pairs) == 0


def test_a_confirmations_runs_start_the_bank_the_next_validation_tops_up() -> None:
    st = y.strategies()[1]
    assert st.gate is not None and st.policy is not None
    w, rng = y.world(2), np.random.default_rng(0)
    three = st.gate.confirm_runs
    assert three == 3 < st.gate.banked_epochs == st.policy.inc_epochs == 11
    ok, fresh, n = y.confirm_banked(st, w, w.s0, y.crashy(w.s0, w.val, rng, 11), rng)
    assert n >= three * y.M and all(len(r) == three for r in fresh.values())
    gate = st.policy.make()
    whole, paid = y.banked(st.policy, gate, w.s0, fresh, rng, w.val)
    assert paid >= 8 * y.M and all(len(r) == 11 and r[:three] == fresh[t] for t, r in whole.items())
    assert y.banked(st.policy, gate, w.s0, whole, rng, w.val) == (whole, 0)  # a whole bank: nothing to run
    first, paid = y.banked(st.policy, gate, w.s0, {}, rng, w.val, three)  # no bank yet: measured, to 3
    assert paid >= three * y.M and sorted(first) == sorted(f"t{t}" for t in w.val.tolist())
    assert all(len(r) == three for r in first.values())


def test_a_validation_the_budget_plans_for_one_look_tops_the_bank_up_to_three() -> None:
    """The plan (``search.budget.looks``) at 2,000 rollouts with no bank yet: at the start both
    looks and the whole bank fit; 1,200 in, only one look does, against a bank of
    ``one_look_bank`` (3) runs a task, and a step's reserve counts that bank too."""
    st = y.strategies()[1]
    w = y.world(0)
    plan, two = y.Planner(st, w, 2000, 0), object()
    assert plan.gate(0, {}, two) == (two, None)  # type: ignore[arg-type]
    one, bank = plan.gate(1200, {}, two)  # type: ignore[arg-type]
    assert one is plan.one and bank == 3
    # a step (16) and the one-look validation ((50 x 6 + 150) x 1.1 = 495) fit at 1,488, not at 1,490
    assert plan.room_for_step(1488, 8, {}) and not plan.room_for_step(1490, 8, {})


def test_a_priced_optimizer_turn_buys_fewer_proposals_for_the_same_budget() -> None:
    """Over five runs (in one run a row whose budget goes mostly on validations can end on the
    same count either way: one proposal a round at 2,000 makes 12 in both on world 5)."""
    for st in y.strategies():
        free = priced = 0
        for seed in range(5, 10):
            w = y.world(seed)
            free += y.run_one(st, w, seed, 2000, turn=0).proposals[0]
            priced += y.run_one(st, w, seed, 2000, turn=y.TURN_PRICE).proposals[0]
        assert priced < free, st.label


def test_correlated_crashes_take_whole_tasks_down_in_some_batches() -> None:
    w, rng = y.world(1), np.random.default_rng(0)
    crashed = [
        sum(o.crashed for runs in y.crashy(w.s0, w.val, rng, 2).values() for o in runs) for _ in range(200)
    ]
    rate = sum(crashed) / (200 * 2 * y.M)
    assert 0.03 < rate < 0.07  # 3% at random plus outages: about 5%
    assert max(crashed) > 3 * 2 * y.M * y.CRASH  # some batches far above the random rate


def test_explore_moves_main_only_through_the_gate_once_a_round() -> None:
    for kind in ("explore", "explore-main"):
        st = next(s for s in y.strategies() if s.kind == kind)
        steps = st.chain(0)
        runs = [y.run_explore(st, y.world(seed), seed, 10**6, 4) for seed in range(6)]
        assert any(r.commits for r in runs)  # four gate tests a run: some chain end gets through
        assert all(r.commits <= 4 and r.proposals == [4 * steps] for r in runs)


def test_the_kept_head_acts_only_across_rounds() -> None:
    """Same proposals and draws: one round of the loop's explore and of the previous stop's (every
    round from main) is the same round; only later rounds differ."""
    kept, fresh = (
        next(s for s in y.strategies() if s.kind == k and s.search.explore == 10)
        for k in ("explore", "explore-main")
    )
    for seed in range(4):
        w = y.world(seed)
        a, b = y.run_explore(kept, w, seed, 10**6, 1), y.run_explore(fresh, w, seed, 10**6, 1)
        assert (a.spent, a.gain, a.commits) == (b.spent, b.gain, b.commits)
    longer = [y.run_explore(k, y.world(s), s, 10**6, 6) for k in (kept, fresh) for s in range(4)]
    assert [r.gain for r in longer[:4]] != [r.gain for r in longer[4:]]


def test_the_default_row_chains_what_the_shipped_rule_chooses_at_each_price() -> None:
    """The default's chain is ``search.length.chain_length`` at the table's price of a turn (m = 50,
    a validation up to 1,100 rollouts, a step two batches of 8 and the turn): the lengths
    docs/gate.md names; a fixed row keeps its number."""
    default = y.strategies()[1]
    assert default.search.explore is None
    assert [default.chain(t) for t in (0, y.TURN_PRICE, y.PRIORS_TURN_PRICE)] == [50, 31, 3]
    # each step screens on its batch and, where a turn is dear, ~sqrt(turn) tasks in all: 24 at 600
    assert [default.length(t)[1] for t in (0, y.TURN_PRICE, y.PRIORS_TURN_PRICE)] == [0, 0, 16]
    fixed = [s for s in y.strategies() if s.kind == "explore" and s.search.explore is not None]
    assert sorted({s.chain(600) for s in fixed}) == sorted(set(y.FIXED_CHAINS))
    # with the table's budget: from two whole validations (2,970 rollouts) 200 steps, checkpoints every 20
    # on 50 fixed tasks; from six (8,910) 300 steps, checkpoints on all 100 train tasks, margin 0.03;
    # below two, ties move too (search.ties_move null); not in a run without a budget
    assert [default.length(t, 2000)[:5] for t in (0, y.TURN_PRICE)] == [
        (50, 0, 0, True, 0),
        (31, 0, 0, True, 0),
    ]
    assert default.length(0, 5000) == (LONG_STEPS, 0, EVERY, False, TASKS, MARGIN)
    assert [default.length(t, b) for t, b in ((0, 10_000), (y.PRIORS_TURN_PRICE, 20_000))] == [
        (WIDE.steps, 0, WIDE.every, False, y.TRAIN, WIDE.margin),
        (WIDE.steps, 16, WIDE.every, False, y.TRAIN, WIDE.margin),
    ]
    assert default.length(0)[:5] == (50, 0, 0, False, 0)
    assert y.strategies()[2].length(0, 5000)[:5] == (50, 0, 0, False, 0)  # the default before checkpoints
    assert y.strategies()[-1].length(0, 2000)[:5] == (50, 0, 0, False, 0)  # the default before ties move


def test_confirm_holdout_gates_on_the_rest_of_val_and_confirms_on_the_held_out_tasks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-round row of ``confirm: holdout``: ``split_val`` sets 15 of the 50 val tasks aside;
    the gate measures and judges the other 35, and the confirmation runs both sides on the 15."""
    held_row = y.round_strategies()[-1]
    assert held_row.gate is not None and held_row.gate.confirm == "holdout"
    w = y.world(4)
    seen, held = y.split(held_row, w)
    assert (len(seen), len(held)) == (35, 15) == (y.M - y.HELD, y.HELD)
    assert sorted([*seen.tolist(), *held.tolist()]) == sorted(w.val.tolist())
    whole, none = y.split(y.round_strategies()[1], w)
    assert whole.tolist() == w.val.tolist() and len(none) == 0
    drawn: list[set[int]] = []
    real = y.crashy

    def crashy(s, ids, rng, runs=1, detail="", **kw):  # type: ignore[no-untyped-def]
        drawn.append(set(ids.tolist()))
        return real(s, ids, rng, runs, detail, **kw)

    monkeypatch.setattr(y, "crashy", crashy)
    y.confirmed(held_row, w, w.s0, w.s0, np.random.default_rng(0), None, held)
    assert drawn == [set(held.tolist())] * 2  # the candidate's and the incumbent's fresh runs
    drawn.clear()
    y.per_round(held_row, 4)
    assert drawn and all(ids <= set(seen.tolist()) or ids == set(held.tolist()) for ids in drawn)
    assert any(ids == set(seen.tolist()) for ids in drawn)  # the incumbent and the gate: on the 35


def test_paired_runs_the_default_and_gepa_style_alone_on_the_full_runs_seeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--paired`` reruns only the two strategies (for more runs than the full benchmark affords): a
    seed gives each the same run it has in the full benchmark, so its rows extend the full table's."""
    assert y.main(["--paired", "--runs", "3", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "±" in line]
    assert [r.split(" | ")[0][2:] for r in rows] == [y._table(*key) for key in y.TABLES]
    full = y.strategies()
    gepa = next(i for i, st in enumerate(full) if st.kind == "minibatch")
    key = y.TABLES[0]
    _, _, got = y.work((key[0], key[1], [0, 1, 2]))  # the full benchmark's job for that table
    default, baseline = got[1].gain, got[gepa].gain  # type: ignore[attr-defined]
    assert rows[0].strip("| ").split(" | ")[1:] == [
        y._mean_se(default),
        y._mean_se(baseline),
        y._paired(default, baseline),
    ]


def test_first_seed_moves_the_paired_runs_to_other_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """``--first-seed 7 --runs 2``: the runs of seeds 7 and 8, as the full benchmark would run them;
    the full benchmark itself has no such option (its seeds are its figures')."""
    assert y.main(["--paired", "--runs", "2", "--first-seed", "7", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "seeds 7 to 8" in out
    first = next(line for line in out.splitlines() if line.startswith(f"| {y._table(*y.TABLES[0])} |"))
    _, _, got = y.work(("paired " + y.TABLES[0][0], y.TABLES[0][1], [7, 8]))
    default, gepa = got[0].gain, got[1].gain  # type: ignore[attr-defined]
    assert first.strip("| ").split(" | ")[3] == y._paired(default, gepa)
    with pytest.raises(SystemExit) as exit_:
        y.main(["--first-seed", "7"])
    assert exit_.value.code == 2


def test_larger_runs_the_paired_rows_at_budgets_past_the_full_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--paired --larger``: the same two strategies at 10,000 and 20,000 rollouts, each row the
    runs ``work`` makes for that budget and price; ``--larger`` alone is refused."""
    assert y.main(["--paired", "--larger", "--runs", "2", "--workers", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "±" in line]
    assert [r.split(" | ")[0][2:] for r in rows] == [
        "10000, turns free",
        "20000, turns free",
        "20000, turns at 20",
    ]
    for (what, budget), row in zip(y.LARGER, rows, strict=True):
        _, _, got = y.work((f"paired {what}", budget, [0, 1]))
        default, gepa = got[0].gain, got[1].gain  # type: ignore[attr-defined]
        assert row.strip("| ").split(" | ")[3] == y._paired(default, gepa)
    _, _, free = y.work(("paired yield", 20000, [0]))
    _, _, priced = y.work(("paired priced", 20000, [0]))
    assert free[1].proposals != priced[1].proposals  # type: ignore[attr-defined]  # a turn at 20 buys fewer
    with pytest.raises(SystemExit) as exit_:
        y.main(["--larger"])
    assert exit_.value.code == 2


def test_the_rules_tried_against_the_gepa_gap_print_beside_the_default_and_gepa_style(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert y.main(["--tried", "--runs", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    sts = y.tried_strategies()
    assert sts[0].label == y.strategies()[1].label  # the shipped default
    assert sts[1].label == y.strategies()[2].label  # the default before checkpoints
    assert sts[2].kind == "minibatch"
    tables = sum(len(budgets) for _, budgets in y.YIELDS.values())
    for st in sts:
        row = next(line for line in out.splitlines() if line.startswith(f"| {st.label} |"))
        assert row.count("±") == tables


def test_each_tried_rule_changes_the_run_and_plans_its_own_runs_inside_the_budget() -> None:
    """A rechecked step, a restart from main, a second state's validation, the pick between two
    states on train, a reused batch, long chains and their checkpoints each change what the default
    spends; the plan counts the extra runs, so no run ends with a round the budget cut, and each rule
    changes what some run does."""
    default, *tried = y.tried_strategies()[1:2] + y.tried_strategies()[4:-1]  # [3], [-1]: on the default
    flags = [(st.recheck, st.restart, st.two_states, st.pick_tasks, st.reuse_once) for st in tried]
    assert flags == [
        (True, False, False, 0, False),
        (False, True, False, 0, False),
        (False, False, True, 0, False),
        (False, False, False, y.PICK_TASKS, False),
        (False, False, False, 0, True),
        *[(False, False, False, 0, False)] * 4,
    ]
    assert [(st.steps, st.checkpoints, st.score_start, st.margin, st.switch) for st in tried[-4:]] == [
        (y.MAX_STEPS, (0, 0), True, None, 0.0),
        (y.LONG, (0, 0), True, None, 0.0),
        (y.LONG, y.CHECKPOINTS, True, None, 0.0),
        (y.LONG, y.SPARSE, False, y.MARGIN, y.SWITCH_VALIDATIONS),
    ]
    assert default.chain(20) < y.LONG == tried[-2].chain(20) == tried[-2].chain(0)
    for budget, turn in ((2000, 20), (5000, 0)):
        base = [y.run_one(default, y.world(s), s, budget, turn=turn) for s in range(6)]
        for st in tried[:-1]:
            got = [y.run_one(st, y.world(s), s, budget, turn=turn) for s in range(6)]
            assert sum(r.stopped for r in got) == 0
            assert all(r.spent[0] <= budget for r in got)
            changed = any(
                (r.gain, r.last, r.proposals) != (b.gain, b.last, b.proposals)
                for r, b in zip(got, base, strict=True)
            )
            # a fixed length the rule already chooses here (50 where turns are free) is the default's run
            same = st.steps == default.chain(turn) and st.checkpoints == (0, 0)
            assert changed != same, st.label


def _runs(st: y.Strategy, budget: int, rounds: int | None = None, turn: int = 0) -> list[y.Result]:
    """Runs of ``st`` on the first four seeds."""
    return [y.run_one(st, y.world(s), s, budget, rounds, turn) for s in range(4)]


def _same(a: list[y.Result], b: list[y.Result]) -> bool:
    """The same runs, figure for figure: gains, last states, proposals and rollouts spent."""
    return all(
        (r.gain, r.last, r.proposals, r.spent) == (q.gain, q.last, q.proposals, q.spent)
        for r, q in zip(a, b, strict=True)
    )


def test_the_pick_switched_on_by_budget_is_the_default_below_its_switch_and_in_runs_without_a_budget() -> (
    None
):
    """The sparse pick runs only where the budget pays for ``SWITCH_VALIDATIONS`` whole validations
    (``search.budget.validation_runs``, both looks, the whole bank): at 2,000 rollouts (about 1.3 of
    them) and in a run of counted rounds it is the default's run, figure for figure; at 5,000 (about
    3.4) it changes what runs do, and stays inside the budget with no round cut."""
    shipped, default, switched = y.tried_strategies()[0], y.tried_strategies()[1], y.tried_strategies()[-2]
    whole = y.Planner(switched, y.world(0), 2000, 0).whole_validation()
    assert 2000 < y.SWITCH_VALIDATIONS * whole < 5000
    # below the switch the default's steps move on ties (search.ties_move null), which the row tried
    # before it did not: the default before checkpoints with ties as the default has them
    tied = dataclasses.replace(default, search=default.search.model_copy(update={"ties_move": None}))

    for st, below in ((switched, default), (shipped, tied)):  # the row tried, the default's checkpoints now
        assert _same(_runs(st, 2000, turn=20), _runs(below, 2000, turn=20))
        assert _same(_runs(st, 10**9, rounds=2), _runs(default, 10**9, rounds=2))
        got = _runs(st, 5000)
        assert not _same(got, _runs(default, 5000))
        assert sum(r.stopped for r in got) == 0 and all(r.spent[0] <= 5000 for r in got)


def test_going_on_from_the_pick_changes_only_runs_with_checkpoints_and_adds_no_run() -> None:
    """The last tried row is the default with one rule: at each checkpoint the chain goes on from
    its pick. Where the default scores no checkpoint (2,000 rollouts) it is the default's run; at
    5,000 it changes what runs do, inside the budget, with no round cut and no more runs a step."""
    shipped, backtrack = y.strategies()[-1], y.tried_strategies()[-1]  # the default before ties move
    assert backtrack.backtrack and not shipped.backtrack
    fields = [
        f.name for f in dataclasses.fields(y.Strategy) if f.name not in ("label", "policy", "backtrack")
    ]
    assert [getattr(backtrack, f) for f in fields] == [getattr(shipped, f) for f in fields]

    assert _same(_runs(backtrack, 2000, turn=20), _runs(shipped, 2000, turn=20))
    got = _runs(backtrack, 5000)
    assert not _same(got, _runs(shipped, 5000))
    assert sum(r.stopped for r in got) == 0 and all(r.spent[0] <= 5000 for r in got)


def test_a_margin_keeps_the_chains_end_unless_an_earlier_state_scored_clearly_above_it() -> None:
    """``Checkpoints.best(margin)``: an earlier state is validated instead of the end only when it
    scored more than the margin above the end; a start not scored is no pick."""
    w, rng = y.world(3), np.random.default_rng(0)
    marks = y.Checkpoints(w.train[-y.SPARSE[0] :])
    mid = sim.propose(w.s0, "+0.10", np.random.default_rng(1))
    end = sim.propose(mid, "null", np.random.default_rng(2))
    assert marks.begin(w.s0, rng, score=False) == 0 and marks.chain == []
    marks.score(mid, rng), marks.score(end, rng)
    marks.scores[id(mid)], marks.scores[id(end)] = (mid, 0.60), (end, 0.58)
    assert marks.best(y.MARGIN) is end and marks.best() is mid
    marks.scores[id(mid)] = (mid, 0.66)
    assert marks.best(y.MARGIN) is mid
    assert all(s is not w.s0 for s in marks.chain)


def test_a_long_chains_checkpoints_are_scored_once_each_and_the_best_scored_is_gated() -> None:
    """``Checkpoints``: a state is scored on the fixed train tasks once a run (scoring it again
    costs nothing and reuses its score); the best of the round's chain is the one gated."""
    w, rng = y.world(3), np.random.default_rng(0)
    marks = y.Checkpoints(w.train[-y.CHECKPOINTS[0] :])
    better = sim.propose(w.s0, "+0.10", np.random.default_rng(1))
    assert marks.score(w.s0, rng) == y.M and marks.score(w.s0, rng) == 0
    assert marks.score(better, rng) == y.M
    marks.scores[id(w.s0)] = (w.s0, 0.0)
    marks.scores[id(better)] = (better, 1.0)
    assert marks.best() is better
    assert marks.begin(w.s0, rng) == 0  # a new round's chain: the start alone, its score kept
    assert marks.chain == [w.s0] and marks.best() is w.s0


def test_ties_move_where_the_budget_switches_checkpoints_off_and_the_tried_row_moves_them_everywhere() -> (
    None
):
    """The default's steps move on a tie where a budget pays for fewer than two whole validations
    (2,000 rollouts), so its runs there differ from the default before ties move; at 5,000 and in a
    run of counted rounds they are that row's, figure for figure. The tried row, ties at every
    budget, changes the 5,000 runs too; all stay inside the budget, no round cut."""
    shipped, strict, everywhere = y.strategies()[1], y.strategies()[-1], y.tried_strategies()[3]
    assert everywhere.search.ties_move is True and strict.search.ties_move is False
    assert not _same(_runs(shipped, 2000, turn=20), _runs(strict, 2000, turn=20))
    assert _same(_runs(shipped, 5000), _runs(strict, 5000))
    assert _same(_runs(shipped, 10**9, rounds=2), _runs(strict, 10**9, rounds=2))
    got = _runs(everywhere, 5000)
    assert not _same(got, _runs(shipped, 5000))
    for runs, budget in ((got, 5000), (_runs(shipped, 2000, turn=20), 2000)):
        assert sum(r.stopped for r in runs) == 0 and all(r.spent[0] <= budget for r in runs)


def test_the_wide_pick_runs_where_the_budget_pays_for_six_whole_validations() -> None:
    """At 10,000 rollouts (6.7 whole validations) the default's chains are 300 steps with
    checkpoints on all 100 train tasks: not the narrow pick's runs (200 steps every 20, 50 tasks,
    margin 0.04; 150 every 10 as the default had them at this budget before), and inside the budget with no round cut."""
    default = y.strategies()[1]
    assert default.length(0, 10_000).tasks == y.TRAIN
    narrow_search = default.search.model_copy(update={"checkpoint_tasks": TASKS, "checkpoint_margin": MARGIN})
    narrow = dataclasses.replace(default, search=narrow_search, steps=LONG_STEPS)
    # its checkpoints every WIDE.every: the budget's rule sets them, the row only its steps
    assert narrow.length(0, 10_000) == (LONG_STEPS, 0, WIDE.every, False, TASKS, MARGIN)
    wide = _runs(default, 10_000)
    assert not _same(wide, _runs(narrow, 10_000))
    assert sum(r.stopped for r in wide) == 0 and all(r.spent[0] <= 10_000 for r in wide)
