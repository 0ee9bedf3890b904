"""The yield benchmark behind docs/gate.md ("Yield") runs end to end on a few runs and decides with
the shipped gate (the real figures take minutes)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import run_yield as y


def test_the_benchmark_prints_every_table_for_every_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert y.main(["--runs", "2", "--trials", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    for i, st in enumerate(y.strategies()):
        per_round = i < 2  # today and the default
        assert out.count(f"| {st.label} |") == (3 if st.kind in y.LOOP_KINDS else 2) + per_round
    for b in y.BUDGETS:
        assert f"yield at {b} rollouts" in out
    for st in y.round_strategies()[2:]:  # per round only
        assert out.count(f"| {st.label} |") == 1


def test_a_run_spends_no_more_than_its_budget_and_counts_true_effects() -> None:
    w = y.world(3)
    for st in y.strategies():
        r = y.run_one(st, w, 3, 600)
        assert r.spent[0] <= 600 + 2 * y.M * 5 + y.M * 6  # the last round may finish past the budget
        assert 0 <= r.bad_commits <= r.commits
        assert len(r.gain) == 1 and np.isfinite(r.gain[0])


def test_correlated_crashes_take_whole_tasks_down_in_some_batches() -> None:
    w, rng = y.world(1), np.random.default_rng(0)
    crashed = [
        sum(o.crashed for runs in y.crashy(w.s0, w.val, rng, 2).values() for o in runs) for _ in range(200)
    ]
    rate = sum(crashed) / (200 * 2 * y.M)
    assert 0.03 < rate < 0.07  # 3% at random plus outages: about 5%
    assert max(crashed) > 3 * 2 * y.M * y.CRASH  # some batches far above the random rate


def test_explore_moves_main_only_through_the_gate_every_explore_proposals() -> None:
    for kind in ("explore", "explore-carry"):
        st = next(s for s in y.strategies() if s.kind == kind)
        for seed in range(6):
            early = y.run_explore(st, y.world(seed), seed, 10**6, y.EXPLORE - 1)
            assert early.commits == 0 and early.gain == [0.0]  # the head moved on train; main did not
        runs = [y.run_explore(st, y.world(seed), seed, 10**6, 4 * y.EXPLORE) for seed in range(6)]
        assert any(r.commits for r in runs)  # four gate tests a run: some head gets through
        assert all(r.commits <= 4 and r.proposals == [4 * y.EXPLORE] for r in runs)


def test_the_loops_explore_pays_for_each_later_base_batch() -> None:
    """Same proposals and draws: the loop's explore pays (EXPLORE - 1) base batches a round more."""
    loop, carry = (next(s for s in y.strategies() if s.kind == k) for k in ("explore", "explore-carry"))
    w = y.world(0)
    a, b = y.run_explore(loop, w, 0, 10**6, y.EXPLORE - 1), y.run_explore(carry, w, 0, 10**6, y.EXPLORE - 1)
    assert a.spent[0] - b.spent[0] == (y.EXPLORE - 2) * y.BATCH  # steps 2..E-1 of the first round
