"""What the run's budget still pays for (``search.budget``): a validation's runs with one look or two,
and whether a step and that validation fit each limit set, at the projection's rates."""

from __future__ import annotations

import pytest

from harnessopt.config import Config
from harnessopt.protocols import Usage
from harnessopt.search.budget import (
    RESERVE_MARGIN,
    fits,
    limited,
    looks,
    one_look,
    one_look_bank,
    room_for_step,
    round_can_commit,
    runs_left,
    validation_runs,
)
from harnessopt.search.checkpoints import TASKS

RATES = {  # a target run: 2 calls of 100 tokens at $0.01; an optimizer turn: 5 calls of 1,000 at $0.10
    "target_calls_per_run": 2.0,
    "target_tokens_per_call": 100.0,
    "target_usd_per_call": 0.01,
    "optimizer_calls": 5.0,
    "optimizer_tokens_per_call": 1000.0,
    "optimizer_usd_per_call": 0.10,
}


def whole(n: int) -> int:  # a bank that holds every run asked for
    return 0


def _cfg(**budget: float) -> Config:
    return Config.model_validate({"budget": budget})


def test_a_validation_counts_the_bank_it_lacks_each_look_the_check_and_the_confirmation() -> None:
    cfg = Config()  # the banked gate: 1 run first look, 10 second, 3 confirmation; memorised check 2
    assert validation_runs(cfg, 50, 0, looks=2) == pytest.approx(50 * (1 + 10 + 3 + 2) * (1 + RESERVE_MARGIN))
    assert validation_runs(cfg, 50, 550, looks=1) == pytest.approx((50 * (1 + 3 + 2) + 550) * 1.1)
    paired = Config.model_validate(
        {"gate": {"policy": "paired", "second_look": 2}, "checks": {"memorised": "off"}}
    )  # both sides run again on the second look and the confirmation
    assert validation_runs(paired, 10, 0, looks=2) == pytest.approx(10 * (1 + 2 * 2 + 2) * 1.1)
    assert validation_runs(paired, 10, 0, looks=1) == pytest.approx(10 * (1 + 2) * 1.1)


def test_each_limit_set_is_checked_in_its_own_unit() -> None:
    spent = Usage(calls=100, input_tokens=9_000, output_tokens=1_000, cost_usd=1.0)
    # 10 runs and a turn: 25 calls, 7,000 tokens, $0.70
    assert fits(_cfg(), RATES, spent, 10, 1)  # no limit
    assert fits(_cfg(max_calls=125), RATES, spent, 10, 1)
    assert not fits(_cfg(max_calls=124), RATES, spent, 10, 1)
    assert fits(_cfg(max_tokens=17_000), RATES, spent, 10, 1)
    assert not fits(_cfg(max_tokens=16_999), RATES, spent, 10, 1)
    assert fits(_cfg(max_cost=1.70), RATES, spent, 10, 1)
    assert not fits(_cfg(max_cost=1.69), RATES, spent, 10, 1)
    assert not fits(_cfg(max_calls=10_000, max_cost=1.69), RATES, spent, 10, 1)  # every limit
    assert runs_left(_cfg(max_calls=200, max_cost=2.0), RATES, spent) == pytest.approx(50)  # calls: 100 / 2
    assert runs_left(_cfg(max_cost=2.0), RATES, spent) == pytest.approx(50)  # $1 / $0.02
    assert runs_left(_cfg(max_calls=50), RATES, spent) == 0.0  # spent past it already
    assert runs_left(_cfg(), RATES, spent) is None


def test_a_limit_no_rate_converts_plans_nothing() -> None:
    """A model without a price has a target run at $0: a dollar budget cannot say how many runs
    it pays for, so it ends no chain (the gateway still holds it)."""
    free = {**RATES, "target_usd_per_call": 0.0}
    assert fits(_cfg(max_cost=1.0), free, Usage(cost_usd=5.0), 1_000, 1)
    assert runs_left(_cfg(max_cost=1.0), free, Usage(cost_usd=5.0)) is None
    assert fits(_cfg(max_calls=10), {}, Usage(calls=50), 100)  # no rates: no plan


def test_the_plan_of_a_step_and_of_the_gates_looks() -> None:
    """At one call a run (``max_calls``, 50 val tasks, bank whole): one look with the check and the
    confirmation is 50 x 6 x 1.1 = 330 runs, two looks 50 x 16 x 1.1 = 880; a step on 8 tasks
    is 16 runs and a turn of 5 calls."""
    rates = {"target_calls_per_run": 1.0, "optimizer_calls": 5.0}
    cfg = _cfg(max_calls=1_000)
    assert limited(cfg, rates) and not limited(_cfg(), rates) and not limited(cfg, {})
    assert looks(cfg, rates, Usage(calls=119), 50, whole) == 2  # 119 + 880 fits
    assert looks(cfg, rates, Usage(calls=121), 50, whole) == 1  # two looks do not fit, one does
    assert looks(cfg, rates, Usage(calls=671), 50, whole) == 2  # not even one: nothing to plan
    assert looks(cfg, rates, Usage(calls=200), 40, whole) == 2  # 40 x 16 x 1.1 = 704 fits
    no_second = Config.model_validate({"budget": {"max_calls": 1_000}, "gate": {"second_look": 0}})
    assert looks(no_second, rates, Usage(calls=500), 50, whole) == 2  # one look is all it has
    assert room_for_step(cfg, rates, Usage(calls=648), 8, 50, whole)  # 648 + 16 + 5 + 330 = 999
    assert not room_for_step(cfg, rates, Usage(calls=650), 8, 50, whole)
    lacking = lambda n: 600  # noqa: E731 - the bank's missing runs count
    assert not room_for_step(cfg, rates, Usage(calls=100), 8, 50, lacking)
    g = one_look(Config().gate)
    assert g.second_look == 0 and g.banked_epochs == Config().gate.banked_epochs == 11


def test_a_validation_planned_for_one_look_counts_a_bank_of_the_confirmations_size() -> None:
    """No bank yet (50 val tasks, the A/A test on the bank's runs): two looks need the whole bank,
    50 x 11 runs, one look a bank of ``gate.confirm_runs`` (3), 50 x 3. At one call a run: two
    looks are (50 x 16 + 550) x 1.1 = 1,485, one look (50 x 6 + 150) x 1.1 = 495 (with the whole
    bank it would be (300 + 550) x 1.1 = 935)."""
    rates = {"target_calls_per_run": 1.0, "optimizer_calls": 5.0}
    cfg = _cfg(max_calls=1_000)
    asked: list[int] = []

    def empty(n: int) -> int:
        asked.append(n)
        return 50 * n

    assert one_look_bank(cfg.gate) == cfg.gate.confirm_runs == 3
    assert looks(cfg, rates, Usage(calls=500), 50, empty) == 1  # 500 + 495 fits, 500 + 1,485 does not
    assert asked == [11, 3]
    assert looks(cfg, rates, Usage(calls=510), 50, empty) == 2  # not even one: nothing to plan
    assert room_for_step(cfg, rates, Usage(calls=474), 8, 50, empty)  # 474 + 16 + 5 + 495 = 990
    assert not room_for_step(cfg, rates, Usage(calls=490), 8, 50, empty)  # 1,006
    assert asked[-1] == 3
    # never more than the bank, never fewer than epochs; a gate that does not judge the bank keeps it
    assert one_look_bank(Config.model_validate({"gate": {"confirm_epochs": 20}}).gate) == 11
    assert one_look_bank(Config.model_validate({"gate": {"epochs": 4, "confirm_epochs": 2}}).gate) == 4
    paired = Config.model_validate({"gate": {"policy": "paired", "incumbent_epochs": 5}}).gate
    assert one_look_bank(paired) == 5


def test_the_hours_left_are_planned_as_a_limit_in_seconds() -> None:
    """``budget.max_hours``: a target run takes ``seconds_per_run`` over ``rollout.concurrency``
    (here 12 s / 4 = 3 s), an optimizer turn its calls times ``seconds_per_optimizer_call``
    (5 x 20 s = 100 s); the limit is the seconds left to the deadline. One look (50 val tasks,
    bank whole) is 330 runs = 990 s, two looks 880 runs = 2,640 s."""
    rates = {**RATES, "seconds_per_run": 12.0, "seconds_per_optimizer_call": 20.0}
    cfg = Config.model_validate({"budget": {"max_hours": 1.0}, "rollout": {"concurrency": 4}})
    assert limited(cfg, rates, 3600.0) and not limited(cfg, rates)  # no deadline known: nothing to plan
    assert not limited(_cfg(), rates, 3600.0)  # no max_hours: the seconds left are not a limit
    assert not limited(cfg, {**rates, "seconds_per_run": 0.0}, 3600.0)  # no time a run: no plan
    assert fits(cfg, rates, Usage(), 10, 1, seconds_left=130.0)  # 30 s + 100 s
    assert not fits(cfg, rates, Usage(), 10, 1, seconds_left=129.0)
    assert runs_left(cfg, rates, Usage(), 300.0) == pytest.approx(100)
    assert runs_left(cfg, rates, Usage(), -5.0) == 0.0  # past the deadline
    assert looks(cfg, rates, Usage(), 50, whole, 2_641.0) == 2
    assert looks(cfg, rates, Usage(), 50, whole, 2_600.0) == 1
    assert room_for_step(cfg, rates, Usage(), 8, 50, whole, 1_138.5)  # 48 + 100 + 990
    assert not room_for_step(cfg, rates, Usage(), 8, 50, whole, 1_137.0)
    both = Config.model_validate(
        {"budget": {"max_hours": 1.0, "max_calls": 100}, "rollout": {"concurrency": 4}}
    )
    assert fits(both, rates, Usage(calls=75), 10, 1, seconds_left=3600.0)  # 25 calls, 130 s: both fit
    assert not fits(both, rates, Usage(calls=76), 10, 1, seconds_left=3600.0)  # the calls do not
    assert not fits(both, rates, Usage(calls=75), 10, 1, seconds_left=129.0)  # the time does not


def test_a_round_is_started_only_when_its_train_runs_turns_and_one_look_validation_fit() -> None:
    """``round_can_commit`` at one call a run, a turn of 5 calls (50 val tasks, 30 train, batch 8):
    one proposal needs its batch (8), a turn (5) and a one-look validation (50 x (1 + 3 + 2
    memorised-check runs) = 300, 10% over: 330): 343; four candidates screened on the batch and 4
    more train tasks need the incumbent's 12 runs and each candidate's 12 (60), 4 turns (20) and
    the same validation: 410. A bank that lacks runs adds them (3 a task for a one-look
    validation, 10% over)."""
    rates = {"target_calls_per_run": 1.0, "optimizer_calls": 5.0}
    one = Config.model_validate({"budget": {"max_calls": 1_000}, "search": {"explore": 0}})
    assert round_can_commit(one, rates, Usage(calls=657), 50, 30, whole)
    assert not round_can_commit(one, rates, Usage(calls=658), 50, 30, whole)
    assert round_can_commit(one, rates, Usage(calls=662), 50, 3, whole)  # a train split of 3: a batch of 3
    assert round_can_commit(
        one.model_copy(update={"budget": _cfg().budget}), rates, Usage(calls=10**6), 50, 30, whole
    )
    four = Config.model_validate(
        {"budget": {"max_calls": 1_000}, "search": {"candidates": 4, "screen_tasks": 4}}
    )
    assert round_can_commit(four, rates, Usage(calls=590), 50, 30, whole)
    assert not round_can_commit(four, rates, Usage(calls=591), 50, 30, whole)
    assert not round_can_commit(one, rates, Usage(calls=657), 50, 30, lambda n: 50 * n)  # no bank yet
    assert round_can_commit(one, rates, Usage(calls=657 - 165), 50, 30, lambda n: 50 * n)


def test_a_round_of_a_chain_is_started_only_with_room_for_a_step_and_its_one_look_validation() -> None:
    """``round_can_commit``: a round of a chain (``search.explore``) commits only through a step and
    the chain's validation, so it needs ``room_for_step`` for its batch: the batch and step 1's
    runs (2 x 8), a turn, and a
    one-look validation (50 x (1 + 3 + 2 memorised-check runs) = 300, and its bank's 3 runs a task
    where they lack, 10% over: 330, or 495 with no bank yet)."""
    rates = {"target_calls_per_run": 1.0, "optimizer_calls": 5.0}
    chain = Config.model_validate({"budget": {"max_calls": 1_000}, "search": {"explore": 5}})
    need = 2 * 8 + validation_runs(chain, 50, 0, 1) + 5
    assert round_can_commit(chain, rates, Usage(calls=int(1_000 - need)), 50, 30, whole)
    assert not round_can_commit(chain, rates, Usage(calls=int(1_000 - need) + 1), 50, 30, whole)
    lacking = lambda n: 50 * n  # noqa: E731  (no bank yet: a one-look validation measures 3 runs a task)
    assert not round_can_commit(chain, rates, Usage(calls=int(1_000 - need)), 50, 30, lacking)
    assert round_can_commit(chain, rates, Usage(calls=int(1_000 - need - 165)), 50, 30, lacking)


def test_a_chain_with_checkpoints_reserves_a_checkpoints_runs_too() -> None:
    """``search.checkpoints``: each step's room holds a checkpoint's runs (the end's at least) on
    the fixed train tasks, at most ``checkpoints.TASKS`` of the train split."""
    rates = {"target_calls_per_run": 1.0, "optimizer_calls": 5.0}
    scored = Config.model_validate(
        {"budget": {"max_calls": 2_000}, "search": {"explore": 5, "checkpoints": 2}}
    )
    need = 2 * 8 + validation_runs(scored, 50, 0, 1) + 5
    for n_train, scoring in [(100, TASKS), (30, 30)]:
        room = int(2_000 - need - scoring)
        assert round_can_commit(scored, rates, Usage(calls=room), 50, n_train, whole)
        assert not round_can_commit(scored, rates, Usage(calls=room + 1), 50, n_train, whole)
    assert room_for_step(scored, rates, Usage(calls=int(2_000 - need - 7)), 8, 50, whole, scoring=7)
    assert not room_for_step(scored, rates, Usage(calls=int(2_000 - need - 6)), 8, 50, whole, scoring=7)
