"""What the run's budget still pays for, so that a budget's last chain ends where its validation fits.

A run with a budget (``budget.max_calls``, ``max_tokens``, ``max_cost``) is stopped by the gateway at
its limit, and a round the gateway stops fails: main stays where it was; a run with a wall-clock
budget (``budget.max_hours``) is stopped at the first batch of runs after its deadline, and the
round it stops is lost the same way. A chain whose steps spend
the budget down to less than a validation costs is thrown away whole. So a chain ends before a
step after which its validation would no longer fit (one that has not moved too: a step it could
not validate buys nothing), a run starts no round of a chain without room for its batch, a step
and that validation (``round_can_commit``), and a round whose validation
has room for one look of the gate and not two judges that one look at the whole alpha (the gate
plans its looks from the budget before it sees a run, so every accept path still spends from one
alpha). A validation planned for one look tops the incumbent's bank up to ``one_look_bank`` runs a
val task (the banked gate: ``gate.confirm_runs``, 3), not to the whole bank of 11 the second look
draws on, and the chain's reserve counts that smaller bank: against one run of the candidate a
task, a bank of 3 leaves a task's difference with 1 + 1/3 of one run's variance where a bank of 11
leaves 1 + 1/11 (its SD 10% wider) for 8 runs a task fewer, which buy the chain's steps instead
(the yield benchmark, docs/gate.md "The budget's last look"). Runs without a budget are unchanged.

Costs are in each unit a limit is set in, from the projection's rates (``reporting.projection``:
measured on the workspace's rounds, else its priors): a target run is ``target_calls_per_run``
calls and their tokens and dollars, an optimizer turn ``optimizer_calls`` calls and theirs; in
time, a target run ``seconds_per_run`` over ``rollout.concurrency`` (runs go that many at a time)
and an optimizer turn ``optimizer_calls`` times ``seconds_per_optimizer_call``, against the
seconds left to the run's deadline (``seconds_left``; None: not counted). The
yield benchmark (``benchmarks/run_yield.py``) runs its budgets through these functions.
"""

from __future__ import annotations

from collections.abc import Callable

from harnessopt.config import Config, GateConfig
from harnessopt.protocols import Usage
from harnessopt.search import checkpoints

RESERVE_MARGIN = 0.1  # a validation's reserve is 10% over its runs: crash reruns, the probe, flips

Lacks = Callable[[int], int]
"""Runs the incumbent's bank lacks on val before it holds ``n`` runs a task (the first
measurement's A/A test included): what topping it up to ``n`` costs (``round.evaluate.bank_lacks``)."""


def validation_runs(cfg: Config, n_val: int, bank_missing: int, looks: int) -> float:
    """Target runs that validating a candidate can take with ``looks`` looks of the gate (1 or 2):
    the incumbent's bank where it lacks runs (``bank_missing``), the candidate's first look and,
    with two, its second, the memorised-answer check (at most every task fixed) and the
    confirmation of an accept, with ``RESERVE_MARGIN`` over them."""
    return (n_val * _per_task(cfg, looks) + bank_missing) * (1 + RESERVE_MARGIN)


def _per_task(cfg: Config, looks: int) -> float:
    """A val task's runs in a validation with ``looks`` looks: the candidate's looks, the
    confirmation of an accept and the memorised-answer check as if it were fixed (it runs on the
    fixed tasks only)."""
    g = cfg.gate
    sides = 1 if g.judges_bank else 2  # the banked gate's looks and confirmation run the candidate only
    per_task = g.epochs + (sides * g.second_look if looks > 1 and g.confirm_flips else 0)
    if g.confirm == "val":
        per_task += g.confirm_runs if g.judges_bank else 2 * g.epochs
    if cfg.checks.memorised != "off":  # a fixed task's perturbed variants, on both sides
        per_task += 2 * cfg.checks.memorised_variants
    return per_task


def spend_of(rates: dict[str, float], runs: float, turns: float) -> tuple[float, float, float]:
    """What ``runs`` target runs and ``turns`` optimizer turns spend at the measured ``rates``:
    (model calls, tokens, dollars)."""
    target = runs * rates.get("target_calls_per_run", 0.0)
    optimizer = turns * rates.get("optimizer_calls", 0.0)
    return (
        target + optimizer,
        target * rates.get("target_tokens_per_call", 0.0)
        + optimizer * rates.get("optimizer_tokens_per_call", 0.0),
        target * rates.get("target_usd_per_call", 0.0) + optimizer * rates.get("optimizer_usd_per_call", 0.0),
    )


def _limits(
    cfg: Config, rates: dict[str, float], spent: Usage, seconds_left: float | None = None
) -> list[tuple[float, float, float, float]]:
    """Each limit set whose unit a target run's rate converts: (limit, used, a run, a turn); the
    wall-clock one as (the seconds left, 0, a run, a turn) when ``seconds_left`` is known."""
    b, run, turn = cfg.budget, spend_of(rates, 1, 0), spend_of(rates, 0, 1)
    used = (spent.calls, spent.input_tokens + spent.output_tokens, spent.cost_usd)
    rows: list[tuple[float | None, float, float, float]] = [
        (limit, u, r, t)
        for limit, u, r, t in zip((b.max_calls, b.max_tokens, b.max_cost), used, run, turn, strict=True)
    ]
    if b.max_hours is not None and seconds_left is not None:
        run_s = rates.get("seconds_per_run", 0.0) / max(cfg.rollout.concurrency, 1)
        turn_s = rates.get("optimizer_calls", 0.0) * rates.get("seconds_per_optimizer_call", 0.0)
        rows.append((max(seconds_left, 0.0), 0.0, run_s, turn_s))
    return [
        (float(limit), float(used), run, turn)
        for limit, used, run, turn in rows
        if limit is not None and run > 0
    ]


def fits(
    cfg: Config,
    rates: dict[str, float],
    spent: Usage,
    runs: float,
    turns: float = 0.0,
    seconds_left: float | None = None,
) -> bool:
    """Does the budget still pay for ``runs`` target runs and ``turns`` optimizer turns after
    ``spent`` (and in ``seconds_left``), at these rates, by every limit set? (True with no limit,
    or none a rate converts.)"""
    return all(
        used + runs * run + turns * turn <= limit
        for limit, used, run, turn in _limits(cfg, rates, spent, seconds_left)
    )


def runs_left(
    cfg: Config, rates: dict[str, float], spent: Usage, seconds_left: float | None = None
) -> float | None:
    """Target runs the budget's tightest limit still pays for after ``spent``; None without a limit
    a rate converts (for what a run says)."""
    left = [(limit - used) / run for limit, used, run, _ in _limits(cfg, rates, spent, seconds_left)]
    return max(0.0, min(left)) if left else None


def limited(cfg: Config, rates: dict[str, float], seconds_left: float | None = None) -> bool:
    """Is a limit set that these rates convert into runs? (Else there is nothing to plan.)"""
    return bool(_limits(cfg, rates, Usage(), seconds_left))


def room_for_step(
    cfg: Config,
    rates: dict[str, float],
    spent: Usage,
    tasks: int,
    n_val: int,
    lacks: Lacks,
    seconds_left: float | None = None,
    scoring: int = 0,
) -> bool:
    """Does the budget pay for one more explore step (an optimizer turn, the base's and the step's
    runs on ``tasks`` train tasks), a checkpoint's ``scoring`` runs (``search.checkpoints``: the
    end's, or the step's own) and then the chain's validation with one look (its bank topped up to
    ``one_look_bank``)?"""
    runs = 2 * tasks + scoring + validation_runs(cfg, n_val, lacks(one_look_bank(cfg.gate)), 1)
    return fits(cfg, rates, spent, runs, turns=1, seconds_left=seconds_left)


def round_can_commit(
    cfg: Config,
    rates: dict[str, float],
    spent: Usage,
    n_val: int,
    n_train: int,
    lacks: Lacks,
    seconds_left: float | None = None,
) -> bool:
    """Can one more round still commit? Only if the budget left pays for the round's train runs,
    its optimizer turns and a validation with one look (its bank topped up to ``one_look_bank``
    where it lacks runs, the memorised-answer check at most, the confirmation, 10% over): what a
    chain's every step is held to (``room_for_step``), so a round that starts can finish. The
    train runs: a chain's (``search.explore``) batch and step 1's runs on it (with
    ``search.screen_tasks``) and a checkpoint (``search.checkpoints``), a turn; one proposal's batch and a turn; K candidates'
    (``search.candidates``) batch and screening tasks, each candidate's runs on them, K turns."""
    batch = min(cfg.rollout.batch_size, n_train)
    tasks = min(batch + cfg.search.screening_only, n_train)
    if cfg.explore_steps:
        scoring = checkpoints.runs(cfg.search, n_train)
        return room_for_step(cfg, rates, spent, tasks, n_val, lacks, seconds_left, scoring)
    k = max(1, cfg.search.candidates)
    train = tasks + k * tasks if k > 1 else batch
    runs = train + validation_runs(cfg, n_val, lacks(one_look_bank(cfg.gate)), 1)
    return fits(cfg, rates, spent, runs, turns=k, seconds_left=seconds_left)


def looks(
    cfg: Config,
    rates: dict[str, float],
    spent: Usage,
    n_val: int,
    lacks: Lacks,
    seconds_left: float | None = None,
) -> int:
    """The gate's looks a validation plans for, before it runs: 2, or 1 when the budget pays for
    validating with the first look (its bank topped up to ``one_look_bank``) and the confirmation
    but not with the second (and the whole bank). Not even one fitting is 2: nothing to plan, the
    gateway will stop the round."""
    g = cfg.gate
    if not (g.second_look and g.confirm_flips):
        return 2
    two = validation_runs(cfg, n_val, lacks(g.banked_epochs), 2)
    if fits(cfg, rates, spent, two, seconds_left=seconds_left):
        return 2
    one = validation_runs(cfg, n_val, lacks(one_look_bank(g)), 1)
    return 1 if fits(cfg, rates, spent, one, seconds_left=seconds_left) else 2


def one_look_bank(g: GateConfig) -> int:
    """Runs a val task the incumbent's bank is topped up to for a validation planned for one look:
    for the banked gate ``gate.confirm_runs`` (what an accepted winner's fresh bank holds, so a
    validation after an accept tops up nothing), never fewer than ``epochs``; for a gate that does
    not judge the bank, the whole bank as configured (its reruns draw on it)."""
    if not g.judges_bank:
        return g.banked_epochs
    return min(g.banked_epochs, max(g.epochs, g.confirm_runs))


def one_look(g: GateConfig) -> GateConfig:
    """``g`` without its second look: the gate a validation planned for one look runs, whose first
    look then has the whole level (it reads the incumbent's bank as the validation found it)."""
    return g.model_copy(update={"second_look": 0, "incumbent_epochs": g.banked_epochs})
