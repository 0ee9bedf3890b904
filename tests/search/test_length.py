"""The chain's length when ``search.explore`` is null (``search.length``): a validation's cost over a
step's, in target runs, from the projection's rates; and a run that chains what it said it would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import Config, GateConfig, SearchConfig
from harnessopt.ledger import store as ledger
from harnessopt.reporting.projection import project
from harnessopt.round import driver
from harnessopt.search.checkpoints import EVERY, LONG_STEPS, MARGIN, TASKS, WIDE
from harnessopt.search.length import (
    MAX_SCREEN,
    MAX_STEPS,
    MIN_STEPS,
    UNPRICED_STEPS,
    chain_length,
    chooses,
    screen_extra,
    whole_validations,
    with_chain,
)
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli
from tests.support.workspace import DEMO_LINE, FORM, make_ws, scripted_edits, with_more_train

M = 50  # val tasks: validating a chain's end can cost 50 x (1 + 10 + 11) = 1,100 runs


def rates(
    *,
    run_usd: float,
    turn_usd: float,
    calls: float = 20.0,
    per_run: float = 1.0,
    tokens: tuple[float, float] = (0, 0),
) -> dict[str, Any]:
    """Rates as ``reporting.projection`` gives them: a target run of ``per_run`` calls at ``run_usd``
    each, an optimizer conversation of ``calls`` calls at ``turn_usd`` each."""
    return {
        "target_calls_per_run": per_run,
        "target_usd_per_call": run_usd,
        "target_tokens_per_call": tokens[0],
        "optimizer_calls": calls,
        "optimizer_usd_per_call": turn_usd,
        "optimizer_tokens_per_call": tokens[1],
    }


def test_a_validation_over_a_step_in_target_runs() -> None:
    cfg = Config()
    # a step: 20 calls x $0.01 = $0.20 = 20 runs at $0.01, plus its two batches of 8: 36 runs
    got = chain_length(cfg, rates(run_usd=0.01, turn_usd=0.01), M)
    assert (got.step_runs, got.validation_runs, got.unit) == (36.0, 1100.0, "dollars")
    assert got.steps == round(1100 / 36) == 31
    assert got.why() == (
        "31 steps a round (search.explore: null; a step costs as much as about 36 target runs, validating "
        "a chain's end up to 1,100 runs (by dollars)); no checkpoints (search.checkpoints: null; a run without a "
        "budget validates each chain's end)"
    )


def test_a_dear_optimizer_validates_every_few_steps_and_a_free_one_chains_the_most() -> None:
    cfg = Config()
    # the projection's priors for a chat target and a frontier optimizer: a turn is ~600 runs
    assert chain_length(cfg, rates(run_usd=0.0049, turn_usd=0.15), M).steps == MIN_STEPS
    assert chain_length(cfg, rates(run_usd=1.0, turn_usd=1e-9), M).steps == MAX_STEPS  # a turn for nothing
    # an agent target: a run is 20 calls, so a conversation is fewer runs and the chain is longer
    chat = chain_length(cfg, rates(run_usd=0.001, turn_usd=0.002), M).steps
    agent = chain_length(cfg, rates(run_usd=0.001, turn_usd=0.002, per_run=20), M).steps
    assert MIN_STEPS < chat < agent <= MAX_STEPS


def test_the_gate_and_val_size_set_what_a_validation_costs() -> None:
    r = rates(run_usd=0.01, turn_usd=0.01)
    small = Config(gate=GateConfig(second_look=4))  # 1 + 4 + 5 runs a task: 500 runs
    assert chain_length(small, r, M).validation_runs == 500.0 and chain_length(small, r, M).steps == 14
    assert chain_length(Config(), r, 10).steps == round(220 / 36)


def test_a_train_split_smaller_than_the_batch_prices_the_batches_it_has() -> None:
    cfg = Config()  # rollout.batch_size 8; a split of 3 train tasks runs batches of 3 (as train_batch does)
    r = rates(run_usd=0.01, turn_usd=0.01)
    assert chain_length(cfg, r, M, n_train=3).step_runs == 20 + 2 * 3
    assert chain_length(cfg, r, M, n_train=3).steps == round(1100 / 26) == 42
    assert chain_length(cfg, r, M, n_train=100) == chain_length(cfg, r, M)  # a batch never grows past 8


def test_a_dear_turn_is_screened_on_more_train_tasks_than_the_batch() -> None:
    cfg = Config()
    assert [screen_extra(turn, 8) for turn in (0, 20, 80, 100, 600, 10_000)] == [
        0,
        0,
        1,
        2,
        16,
        MAX_SCREEN - 8,
    ]
    # the priors' chat target with a frontier optimizer: a turn of ~600 runs, a screen of 24 tasks
    got = chain_length(cfg, rates(run_usd=0.005, turn_usd=0.15), M, n_train=100)
    assert got.screen_tasks == 16 and got.step_runs == 600 + 2 * 24 and got.steps == MIN_STEPS
    assert got.why() == (
        "3 steps a round (search.explore: null; a step, screened on 16 train tasks beyond its batch, costs "
        "as much as about 648 target runs, validating a chain's end up to 1,100 runs (by dollars)); no checkpoints "
        "(search.checkpoints: null; a run without a budget validates each chain's end)"
    )
    assert (
        chain_length(cfg, rates(run_usd=0.005, turn_usd=0.15), M, n_train=12).screen_tasks == 4
    )  # the split's rest
    # a number is kept as set, and weighed; a run that chose sets it, a fixed one is left alone
    fixed = Config(search=SearchConfig(screen_tasks=2))
    assert chain_length(fixed, rates(run_usd=0.005, turn_usd=0.15), M, n_train=100).screen_tasks == 2
    assert with_chain(cfg, got).search.screen_tasks == 16 and with_chain(cfg, got).search.explore == 3
    assert with_chain(fixed, got).search.screen_tasks == 2


def test_an_unpriced_model_is_weighed_by_tokens_and_nothing_falls_back_to_ten() -> None:
    cfg = Config()
    by_tokens = chain_length(cfg, rates(run_usd=0.0, turn_usd=0.0, tokens=(500.0, 8400.0)), M)
    # a turn of 336 runs: each step screens on 18 tasks (sqrt 336), its batch of 8 and 10 more
    assert by_tokens.unit == "tokens" and by_tokens.step_runs == 20 * 8400 / 500 + 2 * 18
    priced_target_only = chain_length(cfg, rates(run_usd=0.01, turn_usd=0.0, tokens=(500.0, 8400.0)), M)
    assert priced_target_only.unit == "tokens"  # an optimizer missing from the price table is not free
    nothing = chain_length(cfg, rates(run_usd=0.0, turn_usd=0.0), M)
    assert (nothing.steps, nothing.unit) == (UNPRICED_STEPS, "")
    assert "no price or token count" in nothing.why()
    # an optimizer the gateway never saw call (a command of one's own) is not free
    unseen = chain_length(cfg, rates(run_usd=0.01, turn_usd=0.0, calls=0.0, tokens=(500.0, 0.0)), M)
    assert (unseen.steps, unseen.unit) == (UNPRICED_STEPS, "")


def test_a_person_makes_the_fewest_steps_whatever_the_prices_and_budget() -> None:
    """--optimizer manual: each step is a person's edit, so a chain never runs 10, 50 or 150 of them."""
    free = rates(run_usd=0.01, turn_usd=0.0, calls=0.0)
    for budget in ({}, {"max_cost": 1000.0}):  # a budget that would pay for checkpoints' 150 steps
        cfg = Config.model_validate({"optimizer": {"backend": "manual"}, "budget": budget})
        got = chain_length(cfg, free, M, 100)
        assert (got.steps, got.checkpoints, got.ties_move) == (MIN_STEPS, 0, False)
        assert got.why() == (
            f"{MIN_STEPS} steps a round (search.explore: null; a person makes each step "
            "(optimizer.backend: manual), no more than the fewest steps)"
        )
    assert chain_length(Config(), rates(run_usd=0.01, turn_usd=0.0001), M).steps > MIN_STEPS


@pytest.mark.parametrize(
    ("search", "objective", "chosen"),
    [
        (SearchConfig(), "task", True),
        (SearchConfig(explore=10), "task", False),  # a number is kept as set
        (SearchConfig(explore=0), "task", False),
        (SearchConfig(candidates=3), "task", False),  # several side by side: no chain
        (SearchConfig(), "trigger", False),
    ],
)
def test_only_a_null_explore_where_a_chain_can_run_is_chosen(
    search: SearchConfig, objective: str, chosen: bool
) -> None:
    assert chooses(Config(search=search, objective=objective, mode="skill")) is chosen


def test_a_run_chains_the_length_it_projected_and_says_why(tmp_path: Path) -> None:
    script = scripted_edits(tmp_path, {"s1": ("# Round 1:[\\s\\S]*Your step: s1,", DEMO_LINE, FORM)})
    ws = Workspace.open(make_ws(tmp_path, model=script, search={"explore": None}))
    chain = project(ws, 1).chain
    assert chain is not None and chain.unit == "tokens"  # the scripted model has no price
    assert f"search.explore: null, chosen by price: {chain.basis()}" in project(ws, 1).line()
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    assert f"this run chains {chain.why()}" in said
    m = result.manifest
    assert m.search is not None and [c.name for c in m.search.candidates] == [
        f"s{j}" for j in range(1, chain.steps + 1)
    ]
    assert result.status == "accepted" and FORM in (ws.root / "skill" / "SKILL.md").read_text()
    # the choice is the run's, not the workspace's: harnessopt.yaml still says null
    assert Workspace.open(ws.root).cfg.search.explore is None
    assert len(ledger.past_rounds(ws.repo)) == 1


def test_run_dry_run_prints_the_chain_it_would_run(tmp_path: Path) -> None:
    ws = make_ws(tmp_path, search={"explore": None})
    out = cli("run", ws, "--dry-run", "--rounds", "1")
    assert out.returncode == 0, out.stderr
    chain = project(Workspace.open(ws), 1).chain
    assert chain is not None and f"chain: {chain.why()}" in out.stdout.splitlines()
    fixed = cli("run", ws, "--dry-run", "--rounds", "1", "-c", "search.explore=4")
    assert fixed.returncode == 0 and "chain:" not in fixed.stdout  # a number is kept as set


def test_checkpoints_are_switched_on_where_the_budget_pays_for_two_whole_validations() -> None:
    """A whole validation (both looks, the whole bank to measure) at m = 50 is 1,485 target runs:
    at $0.01 a run, $14.85. From two of them the chain is 200 steps and its head scored every 20;
    below, without a budget, or with fewer train tasks than a checkpoint scores, the rule's chain."""
    r = rates(run_usd=0.01, turn_usd=0.01)

    def at(cost: float | None, n_train: int = 100, **search: Any) -> Any:
        budget = {"max_cost": cost} if cost else {}
        return chain_length(Config.model_validate({"budget": budget, "search": search}), r, M, n_train)

    on = at(2 * 14.85 + 0.01)
    assert on.validations == pytest.approx(2.0, abs=1e-3) and (on.steps, on.checkpoints) == (
        LONG_STEPS,
        EVERY,
    )
    assert (
        with_chain(Config(), on).search.checkpoints == EVERY
        and with_chain(Config(), on).search.explore == LONG_STEPS
    )
    assert on.why().endswith(
        f", its head scored every {EVERY} steps on {TASKS} fixed train tasks and the best scored state validated "
        "when more than 0.04 above the end (search.checkpoints: null; the budget pays for 2.0 whole "
        "validations, 2 switch them on)"
    )
    assert (on.checkpoint_tasks, on.checkpoint_margin) == (TASKS, MARGIN)
    assert (
        with_chain(Config(), on).search.checkpoint_tasks,
        with_chain(Config(), on).search.checkpoint_margin,
    ) == (
        TASKS,
        MARGIN,
    )
    below = at(2 * 14.85 - 0.01)
    assert (below.steps, below.checkpoints) == (31, 0)
    assert below.why().endswith(
        "the budget pays for 2.0 whole validations, 2 switch them on); a step level with its base on the "
        "batch moves the chain too (search.ties_move: null)"
    )
    assert with_chain(Config(), below).search.checkpoints == 0  # a null is filled in: off
    # where checkpoints are off for the budget, ties move (a null filled in), and nowhere else
    assert below.ties_move and with_chain(Config(), below).search.ties_move is True
    assert not on.ties_move and with_chain(Config(), on).search.ties_move is False
    assert not at(None).ties_move and "ties_move" not in at(None).why()
    assert (at(None).steps, at(None).checkpoints, at(None).validations) == (31, 0, None)
    few = at(100.0, n_train=TASKS - 1)
    assert few.checkpoints == 0 and few.why().endswith(
        f"the train split has {TASKS - 1} tasks to score on, not {TASKS})"
    )
    # a number is kept as set, on the rule's length, and 0 is off whatever the budget pays
    assert (at(None, checkpoints=5).steps, at(None, checkpoints=5).checkpoints) == (31, 5)
    assert at(100.0, checkpoints=0).checkpoints == 0 and at(100.0, checkpoints=0).steps == 31
    # a number set keeps its checkpoints' tasks and margin as set, or the narrow pick's where null
    five = at(None, checkpoints=5, checkpoint_tasks=20, checkpoint_margin=0.1)
    assert (five.checkpoint_tasks, five.checkpoint_margin) == (
        20,
        0.1,
    ) and "on 20 fixed train tasks" in five.why()
    assert (at(100.0, checkpoints=5).checkpoint_tasks, at(100.0, checkpoints=5).checkpoint_margin) == (
        TASKS,
        MARGIN,
    )


def test_a_budget_that_pays_for_six_whole_validations_widens_the_pick() -> None:
    """From six whole validations ($89.10 at $0.01 a run, m = 50) the chain is 300 steps and each
    checkpoint runs all the train tasks up to 100, the pick beating the end by more than 0.03; a
    checkpoint never runs more tasks than the train split has; a number set for the tasks or the
    margin is kept (the rule fills in only a null)."""
    r = rates(run_usd=0.01, turn_usd=0.01)

    def at(cost: float, n_train: int = 100, **search: Any) -> Any:
        return chain_length(
            Config.model_validate({"budget": {"max_cost": cost}, "search": search}), r, M, n_train
        )

    wide, narrow = at(6 * 14.85 + 0.01), at(6 * 14.85 - 0.01)
    assert (wide.steps, wide.checkpoints, wide.checkpoint_tasks, wide.checkpoint_margin) == (
        300,
        WIDE.every,
        100,
        0.03,
    )
    assert (narrow.steps, narrow.checkpoint_tasks, narrow.checkpoint_margin) == (LONG_STEPS, TASKS, MARGIN)
    assert wide.why().endswith(
        "on 100 fixed train tasks and the best scored state validated when more than 0.03 above the end "
        "(search.checkpoints: null; the budget pays for 6.0 whole validations, 6 widen the pick)"
    )
    cfg = with_chain(Config(), wide)
    assert (cfg.search.explore, cfg.search.checkpoints, cfg.search.checkpoint_tasks) == (300, WIDE.every, 100)
    assert cfg.search.checkpoint_margin == WIDE.margin
    assert at(1000.0, n_train=70).checkpoint_tasks == 70  # all the train tasks there are
    kept = at(1000.0, checkpoint_tasks=40, checkpoint_margin=0.05)
    assert (kept.steps, kept.checkpoint_tasks, kept.checkpoint_margin) == (300, 40, 0.05)
    assert (
        with_chain(Config.model_validate({"search": {"checkpoint_tasks": 40}}), kept).search.checkpoint_tasks
        == 40
    )


def test_checkpoint_tasks_and_margin_need_checkpoints() -> None:
    for bad in ({"checkpoints": 0}, {"explore": 0}, {"candidates": 3, "explore": 0}):
        with pytest.raises(ValueError, match="search.checkpoint_tasks is about a chain's checkpoints"):
            SearchConfig.model_validate({**bad, "checkpoint_tasks": 30})
        with pytest.raises(ValueError, match="search.checkpoint_margin is about a chain's checkpoints"):
            SearchConfig.model_validate({**bad, "checkpoint_margin": 0.02})
    assert SearchConfig(checkpoints=10, checkpoint_tasks=30).checkpoint_tasks == 30


def test_whole_validations_count_the_tightest_limit_and_the_whole_runs_hours() -> None:
    r = {**rates(run_usd=0.01, turn_usd=0.01), "seconds_per_run": 4.0}
    calls = Config.model_validate({"budget": {"max_calls": 2_970, "max_cost": 1_000.0}})
    assert whole_validations(calls, r, M) == pytest.approx(2.0)  # calls are the tighter limit
    hours = Config.model_validate({"budget": {"max_hours": 1.0}, "rollout": {"concurrency": 4}})
    assert whole_validations(hours, r, M) == pytest.approx(3600 / 1.0 / 1485)  # a run is 1 s at 4 at once
    assert whole_validations(Config(), r, M) is None


def test_a_config_that_chains_nothing_cannot_set_checkpoints() -> None:
    with pytest.raises(ValueError, match="search.checkpoints scores the steps of a chain"):
        SearchConfig(explore=0, checkpoints=10)
    with pytest.raises(ValueError, match="search.checkpoints scores the steps of a chain"):
        SearchConfig(candidates=3, explore=0, checkpoints=10)
    assert SearchConfig(explore=0, checkpoints=0).checkpoint_every == 0
    assert SearchConfig(checkpoints=None).checkpoint_every == 0  # null, no run chose: off


def test_run_dry_run_says_a_budget_switches_checkpoints_on_and_counts_their_runs(tmp_path: Path) -> None:
    """58 train tasks and a budget of a million calls: it pays for many whole validations, so the
    run would chain 300 steps and score the head every 10 on all 58 train tasks (the projection
    counts those runs); 500 calls pay for between two and six, a chain of 200 steps scored every 20 on 50;
    200 calls pay for less than two, and the chain's end is validated."""
    ws = make_ws(tmp_path, tasks=with_more_train(tmp_path, 50), search={"explore": None})
    rich = cli("run", ws, "--dry-run", "--rounds", "1", "-c", "budget.max_calls=1000000")
    assert rich.returncode == 0, rich.stderr
    [line] = [x for x in rich.stdout.splitlines() if x.startswith("chain: ")]
    assert line.startswith("chain: 300 steps a round (search.explore: null;")
    assert (
        ", its head scored every 10 steps on 58 fixed train tasks and the best scored state validated when "
        "more than 0.03 above the end" in line
    )
    mid = cli("run", ws, "--dry-run", "--rounds", "1", "-c", "budget.max_calls=500")
    [line] = [x for x in mid.stdout.splitlines() if x.startswith("chain: ")]
    assert line.startswith("chain: 200 steps a round (search.explore: null;")
    assert ", its head scored every 20 steps on 50 fixed train tasks" in line
    assert "on 50 fixed train tasks and the best scored state validated when more than 0.04 above" in line
    poor = cli("run", ws, "--dry-run", "--rounds", "1", "-c", "budget.max_calls=200")
    [line] = [x for x in poor.stdout.splitlines() if x.startswith("chain: ")]
    assert "; no checkpoints (search.checkpoints: null; the budget pays for 1.3 whole validations" in line
    off = cli(
        "run", ws, "--dry-run", "--rounds", "1", "-c", "budget.max_cost=500", "-c", "search.checkpoints=0"
    )
    [line] = [x for x in off.stdout.splitlines() if x.startswith("chain: ")]
    assert "200 steps" not in line and "checkpoints" not in line
    w = Workspace.open(ws)
    on = w.cfg.model_copy(update={"budget": w.cfg.budget.model_copy(update={"max_calls": 1_000_000})})
    scored = project(w, 1, on).rounds[0].target_runs
    unscored = project(
        w, 1, on.model_copy(update={"search": on.search.model_copy(update={"checkpoints": 0})})
    )
    assert unscored.chain is not None and unscored.chain.steps < 150
    # the same 300 steps without checkpoints would cost less by 30 checkpoints of 58 runs
    chain = project(w, 1, on).chain
    assert chain is not None and (chain.steps, chain.checkpoints, chain.checkpoint_tasks) == (300, 10, 58)
    same = {"checkpoints": 0, "explore": 300, "screen_tasks": chain.screen_tasks}
    long = on.model_copy(update={"search": on.search.model_copy(update=same)})
    assert scored - project(w, 1, long).rounds[0].target_runs == pytest.approx(30 * 58)


def test_ties_move_as_set_whatever_the_budget() -> None:
    """search.ties_move true or false is kept as set (the rule fills in only a null), and the
    config refuses it where nothing chains."""
    r = rates(run_usd=0.01, turn_usd=0.01)
    for cost in (None, 20.0, 100.0):
        for ties in (True, False):
            cfg = Config.model_validate(
                {"budget": {"max_cost": cost} if cost else {}, "search": {"ties_move": ties}}
            )
            chain = chain_length(cfg, r, M, 100)
            assert chain.ties_move is ties and "ties_move" not in chain.why()
            assert with_chain(cfg, chain).search.ties_move is ties
    with pytest.raises(ValueError, match="search.ties_move is about the steps of a chain"):
        SearchConfig(explore=0, ties_move=True)
    assert SearchConfig(explore=0, ties_move=False).ties_move is False  # off says nothing wrong
