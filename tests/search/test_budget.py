"""What the run's budget still pays for (``search.budget``): a validation's runs with one look or two,
and whether a step and that validation fit each limit set, at the projection's rates."""

from __future__ import annotations

import pytest

from harnessopt.config import Config
from harnessopt.protocols import Usage
from harnessopt.search.budget import RESERVE_MARGIN, fits, runs_left, validation_runs

RATES = {  # a target run: 2 calls of 100 tokens at $0.01; an optimizer turn: 5 calls of 1,000 at $0.10
    "target_calls_per_run": 2.0,
    "target_tokens_per_call": 100.0,
    "target_usd_per_call": 0.01,
    "optimizer_calls": 5.0,
    "optimizer_tokens_per_call": 1000.0,
    "optimizer_usd_per_call": 0.10,
}


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
