"""How many steps a round chains when ``search.explore`` is null (the default): from what a step and
a validation cost, in runs of the target.

A step (``search.explore``) is an optimizer conversation and two runs of the train batch, the step's
and its base's. A chain's end that goes to the gate can spend, on each val task, the candidate's
first and second look and, after an accept, the confirmation and the new incumbent's bank:
``epochs + second_look + incumbent_epochs`` runs a task (1 + 10 + 11 with the defaults). A round
buys its proposals with steps and its commit with one validation, so a chain as long as a validation
costs in steps, ``validation / step``, spends about as much on each; shorter chains spend most of a
round on validating sums of few steps, longer ones leave more of the budget in a chain no gate has
judged. When the target's runs are cheap against an optimizer conversation (a chat target and a
frontier optimizer: a conversation is hundreds of runs) a round validates every ``MIN_STEPS``
steps; when they are dear (an agent target, whose task is dozens of calls) chains run long.

The yield benchmark (``benchmarks/run_yield.py``, docs/gate.md "Yield") prints the rule beside
fixed chains of 3, 10 (the default before the rule) and 30 at three prices of an optimizer turn
and two budgets each: it is at or above each of them in five of the six tables, and below
explore 30 in one (20,000 rollouts with turns at 600, where 30 then falls behind at 50,000).
Prices come from the projection's rates: measured on the workspace's rounds, else its priors; a
model without a price counts by tokens, and with neither (or an optimizer whose calls the gateway
never saw: ``--optimizer manual``, a command) the chain is ``UNPRICED_STEPS`` long.
"""

from __future__ import annotations

from dataclasses import dataclass

from harnessopt.config import Config

MIN_STEPS, MAX_STEPS = 3, 50  # search.explore's bounds when chosen here (the config allows 2 to 50)
UNPRICED_STEPS = 10  # neither dollars nor tokens say what a step costs: the length before this rule


@dataclass(frozen=True)
class ChainLength:
    steps: int
    step_runs: float  # a step in target runs: its optimizer conversation and its two batches
    validation_runs: float  # what validating a chain's end can spend, in target runs
    unit: str  # what the prices were compared in: "dollars", "tokens" or "" (unpriced)

    def basis(self) -> str:
        """Why this length, in a clause."""
        if not self.unit:
            return "no price or token count weighs a step"
        return (
            f"a step costs about {self.step_runs:,.0f} target runs and validating a chain's end up to "
            f"{self.validation_runs:,.0f}, by {self.unit}"
        )

    def why(self) -> str:
        """What a run says it chose: ``this run chains`` + this."""
        return f"{self.steps} steps a round (search.explore: null; {self.basis()})"


def chain_length(cfg: Config, rates: dict[str, float], n_val: int, n_train: int | None = None) -> ChainLength:
    """The steps a round chains under ``cfg`` at these prices (``reporting.projection`` rates), with
    ``n_val`` val tasks and ``n_train`` train tasks (a batch is never more than the train split has)."""
    g = cfg.gate
    batch = cfg.rollout.batch_size if n_train is None else max(1, min(cfg.rollout.batch_size, n_train))
    validation = float(max(n_val, 1) * (g.epochs + g.second_look + g.banked_epochs))
    per_run, calls = rates["target_calls_per_run"], rates["optimizer_calls"]
    for unit, target, optimizer in (
        ("dollars", rates["target_usd_per_call"], rates["optimizer_usd_per_call"]),
        ("tokens", rates["target_tokens_per_call"], rates["optimizer_tokens_per_call"]),
    ):
        # a model missing from the price table is not free: the next unit weighs it; and an optimizer
        # that made no call through the gateway (manual, a command of one's own) is not weighed at all
        if target > 0 and per_run > 0 and optimizer > 0 and calls > 0:
            turn = calls * optimizer / (per_run * target)
            step = turn + 2 * batch
            steps = min(MAX_STEPS, max(MIN_STEPS, round(validation / step)))
            return ChainLength(steps, step, validation, unit)
    return ChainLength(UNPRICED_STEPS, 0.0, validation, "")


def chooses(cfg: Config) -> bool:
    """Does this config leave the chain's length to ``chain_length``? (``search.explore`` null where
    a chain can run: one candidate a round, the task objective.)"""
    return cfg.search.explore is None and cfg.explore_steps > 0


def with_steps(cfg: Config, steps: int) -> Config:
    """``cfg`` with ``search.explore`` set to ``steps`` (what a run chose runs as set)."""
    return cfg.model_copy(update={"search": cfg.search.model_copy(update={"explore": steps})})
