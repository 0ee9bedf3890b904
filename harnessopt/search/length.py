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
and two budgets each: with the screen below it is at or above each of them in five of the six
tables, and level with explore 30 within a standard error in the sixth (2,000 rollouts, turns at
20; screening on the batch alone, it was below explore 30 at 20,000 rollouts with turns at 600).
With ``search.screen_tasks`` null too, a step is screened on about sqrt(turn) train tasks, where
a turn is an optimizer conversation in target runs (``screen_extra``): the batch alone while turns
are cheap, 24 tasks for a turn of 600 runs, so that a proposal that cost hundreds of runs is not
kept or dropped on 8; the optimizer reads only the batch, and the step's cost counts them all.
Prices come from the projection's rates: measured on the workspace's rounds, else its priors; a
model without a price counts by tokens, and with neither (or an optimizer whose calls the gateway
never saw: a command of one's own) the chain is ``UNPRICED_STEPS`` long. With ``--optimizer manual``
a person makes every step: the chain is ``MIN_STEPS`` long, with no checkpoints.

Where the run's budget pays for ``checkpoints.SWITCH_VALIDATIONS`` whole validations and
``search.checkpoints`` is null, the chain is ``checkpoints.LONG_STEPS`` long whatever the price,
and its head is scored every ``checkpoints.EVERY`` steps (``search.checkpoints``): a long chain
drifts, and the pick validates the state it drifted from. Where it pays for
``checkpoints.WIDE.validations``, the pick is wider: ``checkpoints.WIDE`` sets the chain's steps,
how often its head is scored, the checkpoint's tasks (``search.checkpoint_tasks``) and its margin (``search.checkpoint_margin``). Where a budget pays for fewer, a run
validates about once, and with ``search.ties_move`` null a step level with its base on the batch
moves the chain too: a chain that moves only on a gain 8 tasks can see barely moves before that
one validation (the yield benchmark: above the strict step at 2,000 rollouts, below it where
checkpoints are on).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harnessopt.config import Config
from harnessopt.protocols import Usage
from harnessopt.search import budget, checkpoints
from harnessopt.search.checkpoints import MARGIN

MIN_STEPS, MAX_STEPS = 3, 50  # search.explore's bounds when chosen here (the config allows 2 to 300)
UNPRICED_STEPS = 10  # neither dollars nor tokens say what a step costs: the length before this rule
MAX_SCREEN = 64  # train tasks a step screens on at most when screen_extra chooses
PERSON = "a person's turns"  # ChainLength.unit of the manual backend: MIN_STEPS, no checkpoints


@dataclass(frozen=True)
class ChainLength:
    steps: int
    step_runs: float  # a step in target runs: its optimizer conversation and its two batches
    validation_runs: float  # what validating a chain's end can spend, in target runs
    unit: str  # what the prices were compared in: "dollars", "tokens" or "" (unpriced)
    screen_tasks: int = 0  # train tasks a step screens on beyond the batch (search.screen_tasks)
    checkpoints: int = 0  # steps between the head's checkpoints (search.checkpoints; 0: off)
    checkpoint_tasks: int = 0  # fixed train tasks a checkpoint runs (search.checkpoint_tasks; 0: off)
    checkpoint_margin: float = MARGIN  # how far the pick must beat the end (search.checkpoint_margin)
    validations: float | None = None  # whole validations the run's budget pays for (None: no budget)
    pick: str = ""  # what the chain validates and why checkpoints are on or off: a clause after the length
    ties_move: bool = False  # a step level with its base on the batch moves the chain (search.ties_move)

    def basis(self) -> str:
        """Why this length, in a clause."""
        if not self.unit:
            return "no price or token count weighs a step"
        if self.unit == PERSON:
            return "a person makes each step (optimizer.backend: manual), no more than the fewest steps"
        more = f", screened on {self.screen_tasks} train tasks beyond its batch," if self.screen_tasks else ""
        return (
            f"a step{more} costs as much as about {self.step_runs:,.0f} target runs, validating a chain's "
            f"end up to {self.validation_runs:,.0f} runs (by {self.unit})"
        )

    def chosen_by(self) -> str:
        """How the length was chosen, in two words: by price, or for a person's turns."""
        return "for a person" if self.unit == PERSON else "by price"

    def why(self) -> str:
        """What a run says it chose: ``this run chains`` + this."""
        return f"{self.steps} steps a round (search.explore: null; {self.basis()}){self.pick}"


def chain_length(cfg: Config, rates: dict[str, float], n_val: int, n_train: int | None = None) -> ChainLength:
    """The steps a round chains under ``cfg`` at these prices (``reporting.projection`` rates), with
    ``n_val`` val tasks and ``n_train`` train tasks (a batch is never more than the train split has),
    and the train tasks each step screens on beyond the batch (``search.screen_tasks``, or when it is
    null ``screen_extra``)."""
    g, s = cfg.gate, cfg.search
    batch = cfg.rollout.batch_size if n_train is None else max(1, min(cfg.rollout.batch_size, n_train))
    room = MAX_SCREEN if n_train is None else max(0, n_train - batch)
    validation = float(max(n_val, 1) * (g.epochs + g.second_look + g.banked_epochs))
    if cfg.optimizer.backend == "manual":  # a person makes every step: their turn is the dear one
        return ChainLength(
            MIN_STEPS,
            0.0,
            validation,
            PERSON,
            min(room, s.screening_only),
            checkpoints=s.checkpoints or 0,
            checkpoint_tasks=_tasks(checkpoints.tasks_of(s), n_train) if s.checkpoints else 0,
            checkpoint_margin=checkpoints.margin_of(s),
            ties_move=bool(s.ties_move),
        )
    per_run, calls = rates["target_calls_per_run"], rates["optimizer_calls"]
    for unit, target, optimizer in (
        ("dollars", rates["target_usd_per_call"], rates["optimizer_usd_per_call"]),
        ("tokens", rates["target_tokens_per_call"], rates["optimizer_tokens_per_call"]),
    ):
        # a model missing from the price table is not free: the next unit weighs it; and an optimizer
        # that made no call through the gateway (manual, a command of one's own) is not weighed at all
        if target > 0 and per_run > 0 and optimizer > 0 and calls > 0:
            turn = calls * optimizer / (per_run * target)
            extra = min(room, screen_extra(turn, batch) if s.screen_tasks is None else s.screen_tasks)
            step = turn + 2 * (batch + extra)
            steps = min(MAX_STEPS, max(MIN_STEPS, round(validation / step)))
            return _switched(cfg, rates, n_val, n_train, ChainLength(steps, step, validation, unit, extra))
    chain = ChainLength(UNPRICED_STEPS, 0.0, validation, "", min(room, s.screening_only))
    return _switched(cfg, rates, n_val, n_train, chain)


def whole_validations(cfg: Config, rates: dict[str, float], n_val: int) -> float | None:
    """Whole validations (both looks, the whole bank to measure: ``search.budget.validation_runs``)
    the run's budget pays for from its start, by its tightest limit (``budget.max_hours`` as the
    whole run's hours); None without a limit these rates convert into runs."""
    hours = cfg.budget.max_hours
    total = budget.runs_left(cfg, rates, Usage(), hours * 3600 if hours is not None else None)
    if total is None:
        return None
    g = cfg.gate
    return total / budget.validation_runs(cfg, max(n_val, 1), g.banked_epochs * max(n_val, 1), 2)


def _switched(
    cfg: Config, rates: dict[str, float], n_val: int, n_train: int | None, chain: ChainLength
) -> ChainLength:
    """``chain`` with its checkpoints and its rule for ties: ``search.checkpoints`` when set; when
    null, on where the budget pays for ``checkpoints.NARROW.validations`` whole validations and the
    train split has ``checkpoints.TASKS`` tasks to score on (a chain of ``checkpoints.NARROW.steps``
    steps, its head scored every ``checkpoints.NARROW.every``; ``checkpoints.WIDE`` where the budget
    pays for its validations), else off. And ``search.ties_move`` when set; when null, on where a budget
    pays for fewer validations."""
    s = cfg.search
    paid = whole_validations(cfg, rates, n_val)
    short = paid is not None and paid < checkpoints.SWITCH_VALIDATIONS
    ties = s.ties_move if s.ties_move is not None else short
    tied = ""
    if ties and s.ties_move is None:
        tied = "; a step level with its base on the batch moves the chain too (search.ties_move: null)"
    chain = replace(chain, validations=paid, ties_move=ties)
    every = s.checkpoints
    if every is not None:
        tasks, margin = _tasks(checkpoints.tasks_of(s), n_train), checkpoints.margin_of(s)
        note = ""
        if every:
            note = (
                f", its head scored every {every} steps on {tasks} fixed train tasks (search.checkpoints: "
                f"{every})"
            )
        return replace(
            chain,
            checkpoints=every,
            checkpoint_tasks=tasks if every else 0,
            checkpoint_margin=margin,
            pick=note + tied,
        )
    need = f"{checkpoints.SWITCH_VALIDATIONS:g} switch them on"
    b = cfg.budget
    if paid is None and (b.max_calls, b.max_tokens, b.max_cost, b.max_hours) != (None,) * 4:
        off = "no price or count the run has turns its budget into target runs"
    elif paid is None:
        off = "a run without a budget validates each chain's end"
    elif short:
        off = f"the budget pays for {paid:,.1f} whole validations, {need}"
    elif n_train is not None and n_train < checkpoints.TASKS:
        off = f"the train split has {n_train} tasks to score on, not {checkpoints.TASKS}"
    else:
        rule = checkpoints.WIDE if paid >= checkpoints.WIDE.validations else checkpoints.NARROW
        tasks, margin = (
            _tasks(checkpoints.tasks_of(s, rule.tasks), n_train),
            checkpoints.margin_of(s, rule.margin),
        )
        why = f"{rule.validations:g} {'widen the pick' if rule is checkpoints.WIDE else 'switch them on'}"
        note = (
            f", its head scored every {rule.every} steps on {tasks} fixed train tasks and the best "
            f"scored state validated when more than {margin:g} above the end (search.checkpoints: null; "
            f"the budget pays for {paid:,.1f} whole validations, {why})"
        )
        return replace(
            chain,
            steps=rule.steps,
            checkpoints=rule.every,
            checkpoint_tasks=tasks,
            checkpoint_margin=margin,
            pick=note + tied,
        )
    return replace(chain, pick=f"; no checkpoints (search.checkpoints: null; {off}){tied}")


def _tasks(count: int, n_train: int | None) -> int:
    """A checkpoint's ``count`` fixed tasks, at most the train split's ``n_train`` (None: unknown)."""
    return count if n_train is None else min(count, n_train)


def screen_extra(turn: float, batch: int) -> int:
    """Train tasks a step screens on beyond its batch when an optimizer turn costs ``turn`` target
    runs: a screen of about sqrt(turn) tasks, never fewer than the batch, at most ``MAX_SCREEN``
    (docs/optimizer.md, "How long a chain, by default")."""
    return max(0, min(MAX_SCREEN, round(math.sqrt(turn))) - batch)


def chooses(cfg: Config) -> bool:
    """Does this config leave the chain's length to ``chain_length``? (``search.explore`` null where
    a chain can run: one candidate a round, the task objective.)"""
    return cfg.search.explore is None and cfg.explore_steps > 0


def with_chain(cfg: Config, chain: ChainLength) -> Config:
    """``cfg`` as a run that chose ``chain`` runs it: ``search.explore`` set to its steps, a null
    ``search.screen_tasks`` to its extra screening tasks, a null ``search.checkpoints`` to its and a
    null ``search.ties_move`` to its; and where its checkpoints are on, a null
    ``search.checkpoint_tasks`` and ``search.checkpoint_margin`` to its."""
    update: dict[str, int | bool | float] = {"explore": chain.steps}
    if cfg.search.screen_tasks is None:
        update["screen_tasks"] = chain.screen_tasks
    if cfg.search.checkpoints is None:
        update["checkpoints"] = chain.checkpoints
    if chain.checkpoints and cfg.search.checkpoint_tasks is None:
        update["checkpoint_tasks"] = chain.checkpoint_tasks
    if chain.checkpoints and cfg.search.checkpoint_margin is None:
        update["checkpoint_margin"] = chain.checkpoint_margin
    if cfg.search.ties_move is None:
        update["ties_move"] = chain.ties_move
    return cfg.model_copy(update={"search": cfg.search.model_copy(update=update)})
