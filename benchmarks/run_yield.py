"""Yield: the true gain a whole optimization run buys for a budget of rollouts, strategy by strategy.

Each simulated run starts from one skill on a population of tasks with heterogeneous difficulty
(``gate_simulation.population``: most tasks near 0 or 1, 30% in between) and spends a budget of
rollouts (2,000 and 5,000) on rounds. Every round the optimizer proposes an edit whose true effect
is drawn from ``MIX`` (stated, not tuned: mostly no effect or churn, some gains, some harm; the
kinds of ``gate_simulation.propose``, each an exact change of the population's mean pass rate).
Noise as real runs show it: every rollout is a fresh pass/fail draw (A/A flip rate and paired SD
are printed, about 0.21 and 0.45 at m = 50), 3% of rollouts crash at random and, in a fifth of
the batches, an outage crashes a further 10% of the batch's tasks (correlated crashes; about 5%
in all). Tasks split into train (screening), val (m = 50, the gate's) and a held-out rest: the
*true* quality of a skill is its mean pass probability on the held-out rest, with no sampling
noise, so "true gain" is exact.

Every decision calls the shipped code: the gate is ``harnessopt.gate.policy.make_gate`` (its
``PairedGate``) with the smoke verdict, flip confirmation, second look and incumbent bank as the
loop runs them (``gate_simulation.decide``); the baselines' rules are ``benchmarks/baselines.py``;
the screen of several candidates on train is ``harnessopt.search.screen.screen``.

Strategies (the same worlds and proposal streams for all):

* today: the loop with the gate as configured by default before issue 21 (one incumbent run per
  val task, second look 2, first-look share 0.2) and ``confirm: val`` (2m more rollouts after an
  accept; main keeps the commit whatever they say).
* default: the loop as a new workspace runs it (``Config()``): ``search.explore`` null, so a round
  chains as many steps as ``search.length.chain_length`` chooses at the table's price of an
  optimizer turn (50 with turns free, 31 at 20 rollouts, 3 at 600; explore E below), each step
  screened on its batch plus the train tasks ``search.screen_tasks`` null chooses with it (none
  with turns free or at 20, 16 at 600: a screen of about sqrt(turn) tasks), through
  ``GateConfig()`` as shipped now (docs/gate.md): the incumbent's bank (epochs +
  second_look runs a task), second look 10, first-look share 0.05, and main moves only when the
  confirmation finds the gain again (``confirm_moves_main``): ``gate.confirm_epochs`` fresh runs
  of the winner a val task, which start its bank; the next round that validates tops that up.
  With the budget planned as the loop plans it (``harnessopt.search.budget``, the table's budget
  as ``budget.max_cost`` at a unit a rollout): a chain ends before a step after which its
  one-look validation would not fit (moved or not: a step it could not validate is not taken), a
  round of a chain starts only with room for its batch, a step and that validation
  (``round.driver``), and a validation with room for one look and not two is judged on one look
  at the whole alpha, against the incumbent's bank topped up to ``one_look_bank`` (3) runs a task
  instead of 11. Where the budget pays for ``checkpoints.SWITCH_VALIDATIONS`` whole validations
  (``search.length.chain_length`` with the table's budget; none in a run of counted rounds), the
  chain is ``checkpoints.LONG_STEPS`` steps and its pick is validated (``search.checkpoints`` null,
  ``harnessopt.search.checkpoints``): every ``checkpoints.EVERY`` steps the head runs once on
  ``checkpoints.TASKS`` fixed train tasks (the chain's start not scored; a head scored this round
  is not run again, a later round scores afresh), and so does the end; the best scored state is
  validated instead of the end when it scored more than ``checkpoints.MARGIN`` above it
  (``checkpoints.Marks.pick``), and the plan reserves a checkpoint's runs with each step. Where it
  pays for ``checkpoints.WIDE.validations`` (10,000 rollouts and more here), the pick is wider
  (``checkpoints.WIDE``): chains of 300 steps, checkpoints on all TRAIN train tasks, a margin of
  0.03 (``search.checkpoint_tasks`` and ``search.checkpoint_margin`` null). Below
  that switch (``search.ties_move`` null) a step level with its base on its screen moves the chain
  too (``explore.step_floor``); above it, and in a run of counted rounds, only a strictly better one.
* default, a step moves the chain only when strictly better [the default before ties moved]: the
  same with ``search.ties_move: false`` (the last row of the main tables).
* default before checkpoints: that one with ``search.checkpoints: 0`` too (the chain's end
  validated, the rule's length at every budget). The rows below marked by stops, and the
  ``--tried`` rows, are this one with one rule changed (but the ``--tried`` row of ties at every
  budget and the last one, which change the default and the default before ties moved).
* default, a chain that has not moved steps past its validation's room [the stop before]: the
  same plan, but only a chain that has moved is held to it, and a round starts whenever a
  proposal's rollouts fit (the driver's lower bound of the stop before is not modelled): its steps
  may spend the budget down to where a step they keep can no longer be validated, and that
  validation is refused. The other loop rows start a round as ``round.driver`` does now
  (``search.budget.round_can_commit``: its train runs, turns and a one-look validation fit).
* default, its one-look validation against the whole bank [two stops ago]: that plan, but a
  validation planned for one look tops the bank up to all 11 runs a task, and the chain's reserve
  counts them.
* default, no plan for the budget's last chain and look [three stops ago]: the same without
  that plan (a chain runs its length whatever the budget left, and a validation the budget cannot
  finish is refused). Every loop row but today's plans; the per-run table has no budget, so no
  plan.
* default, each step screened on its batch only: the same with ``search.screen_tasks: 0`` (the
  default four stops ago; the same run as the default where the rule adds no task).
* one proposal a round: the same gate, ``search.explore: 0`` (the default before explore).
* fixed band 0.05 [SkillOpt-Lite]: accept when the val mean rose by more than 0.05, 1 run a task.
* minibatch [GEPA-style]: a candidate and its parent on 3 random train tasks; if the candidate's
  sum is higher it enters the pool and is scored on val; the final skill is the pool's best on val.
* best-of-N: N proposals from the start, each scored on val, the best on val (or the start) wins.
* explore E: the loop with ``search.explore: E`` (``harnessopt.search.explore``): each round
  chains E proposals, each built on the last one that beat its base on a train batch of
  ``rollout.batch_size`` tasks (the shipped ``screen`` with ``STEP_FLOOR``: strictly better); the
  chain's end, if it moved since the gate last judged it, goes through the default gate and its
  confirmation against main's bank. A chain end the gate rejects is kept and the next round goes on
  from it (``refs/harnessopt/explore/head``). A round's first step reads the round's batch (the
  start's runs on it, paid as in every loop row); each later step's base runs a fresh batch, also
  paid. A round of the per-run table is a gate test (E proposals).
  The fixed rows chain 3, 10 (the default before the length was chosen by price) and 30.
* explore 10, each round from main [before the kept head]: the same, but every round's chain
  starts from main (how ``search.explore`` ran before the kept head).
* explore 10, confirmed by a whole fresh bank [five stops ago]: with ``confirm_epochs`` at the
  bank's size (11): every accept measures the winner's whole bank before main moves.
* K screened: the loop with ``search.candidates: K`` and ``search.screen_tasks: SCREEN_EXTRA``:
  K proposals a round, each run once on the round's train batch (``rollout.batch_size`` tasks,
  drawn afresh each round) plus ``SCREEN_EXTRA`` more train tasks; ``screen`` keeps one, which goes
  through the default loop. As in the loop, the incumbent runs the batch (the optimizer reads
  those runs) and the extra tasks, every round, paid.

Counted: every rollout of a candidate or an incumbent on train (screening, minibatch, and in the
loop's rows the round's batch, whose runs the optimizer reads, as GEPA-style's parent runs its
minibatch), val, the gate's reruns and confirmation. The loop's rows measure the incumbent's bank
when a round first validates, as the loop does (``round.evaluate.incumbent_outcomes``); until
this stop they paid the whole bank before the first round. (Until this stop the loop's rows had the round's
batch free: 8 rollouts a round.) A budget is a budget: whatever would take a run past it (a step, a
validation, a confirmation, a candidate's score on val) is refused and changes nothing, as the
gateway refuses a call past ``budget.max_calls`` and the round it was in fails (the yield tables
count the runs whose budget ran out so, mid-round). Optimizer turns
(printed as "proposals") are free in the first yield tables; the next ones price each at
``TURN_PRICE`` rollouts, a stated assumption, not a measurement (an optimizer turn reads a batch of
trajectories with a stronger model than the target's), so that strategies that propose more pay for
it; the last ones at ``PRIORS_TURN_PRICE``, what the projection's priors make of a conversation
against a target run (default models, the demo's skill), for budgets of as many rollouts as a
user's dollars buy there.

"Where the gain goes" sets, for the default and GEPA-style in each yield table, the true gain of
the best state a run built and kept (a head a step moved to; a proposal GEPA-style accepted),
of its last state (the chain's end) and of what it returns (main; GEPA-style's best on val):
neither strategy knows the first two.

"The default against each baseline" sets the default's true gain against each baseline's (every
row that is not a chain of the loop's) run by run: every strategy runs the same seeds, so each
pair shares its world and proposal stream, and the mean of the paired differences and its standard
error say whether the default is above, below or level with it (beyond two standard errors or not)
more sharply than the two rows' own standard errors, which carry the spread between worlds too.
"--paired" runs the default and GEPA-style alone, the one baseline the default is close to, for as
many runs as "--runs" says (its first 200 are the full benchmark's), and prints the same comparison;
with "--larger", at 10,000 and 20,000 rollouts with turns free and 20,000 with turns at 20 instead,
budgets where both come near the most the simulated population gives.

"--tried" prints, beside the default, the default before checkpoints and GEPA-style, the default
before checkpoints with one rule changed, each a rule tried to commit more of the chain's best state
(the last of them shipped, as the default's checkpoints): a kept step rechecked on the next
step's fresh batch, which the head it replaced runs too (the step is undone when the new head does
worse there); a chain end the gate finds no better than main (a smoke reject, a futility stop, an
estimate at or below zero) or whose confirmation fails dropped, so the next round's chain starts
from main; the chain's end and its middle kept state both validated, each at half the alpha
(``search.steps.alpha_share`` with two winners), the larger accepted estimate kept; the chain's
end and its middle state run on ``PICK_TASKS`` fresh train tasks and the better there validated
at the whole alpha (train is not val: the pick costs the gate nothing); a dropped step's batch
and its base's runs serving the next step once (its base runs nothing fresh; what the optimizer
would lose by reading the same trajectories again is not modelled: proposals here are drawn alike
whatever they read); chains of 50 (the rule's cap) and ``LONG`` steps at every price, the screen
still the rule's; and those long chains with checkpoints, GEPA-style's pick moved to train: every
``CHECKPOINTS[1]`` steps the head runs once on ``CHECKPOINTS[0]`` fixed train tasks, and the
chain's best scored state (its start included) is the one validated; and a sparser pick that
switches on by budget: where the budget pays for ``SWITCH_VALIDATIONS`` whole validations
(``search.budget.validation_runs`` with both looks and the whole bank to measure), chains of
``LONG`` steps with checkpoints every ``SPARSE[1]`` steps, the chain's start not scored, and the
best scored state validated only when it scored more than ``MARGIN`` above the chain's end (else
the end); below that budget, and in a run without one, the default before checkpoints. That row
scored a state once a run; the default's checkpoints score it once a round, as the loop's per-round
run cache does. The plan counts each rule's
extra runs (a recheck's; a second state's one-look validation; the pick's; a checkpoint's). The
last row is the default itself with one rule added: at each checkpoint the chain goes on from its
pick (the best scored state, where it scored more than ``MARGIN`` above the head), as GEPA builds
on its best candidates, rather than from a head that has drifted below it; no run is added.

"--first-seed" moves the seeds of "--paired" and "--tried" (0 by default: the full benchmark's),
to judge a rule, or the gap, on worlds and proposal streams the printed tables never saw.

    python benchmarks/run_yield.py            # the figures of docs/gate.md, "Yield" (about 30 minutes on 2 cores)
    python benchmarks/run_yield.py --quick    # a fast look
    python benchmarks/run_yield.py --tried    # the rules tried against the GEPA gap (6-30 minutes on 2 cores, by the load)
    python benchmarks/run_yield.py --paired --runs 800   # the default against GEPA-style alone, paired
    python benchmarks/run_yield.py --paired --runs 2000 --first-seed 200000   # ... on other seeds
    python benchmarks/run_yield.py --paired --larger --runs 800   # ... past the full run's budgets
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import gate_simulation as sim  # noqa: E402
from benchmarks.baselines import FixedDeadBand, MinibatchImproved  # noqa: E402
from harnessopt.config import Config, GateConfig, RolloutConfig, SearchConfig  # noqa: E402
from harnessopt.gate.confirmation import confirmation_record, split_val  # noqa: E402
from harnessopt.gate.noise_floor import measure  # noqa: E402
from harnessopt.gate.policy import make_gate  # noqa: E402
from harnessopt.protocols import GatePolicy, Outcome, Outcomes, Task, Usage  # noqa: E402
from harnessopt.search import checkpoints  # noqa: E402
from harnessopt.search.budget import (  # noqa: E402
    Lacks,
    looks,
    one_look,
    one_look_bank,
    room_for_step,
    round_can_commit,
    validation_runs,
)
from harnessopt.search.explore import STEP_FLOOR, step_floor  # noqa: E402
from harnessopt.search.length import MAX_STEPS, chain_length  # noqa: E402
from harnessopt.search.screen import screen  # noqa: E402

M = 50  # val tasks
TRAIN = 100  # train tasks (screening, minibatches)
BATCH = RolloutConfig().batch_size  # the round's train batch: the optimizer's runs of the incumbent
SCREEN_EXTRA = 12  # search.screen_tasks for "K screened": train tasks added for screening only
K = 4  # search.candidates for "K screened"
PICK_TASKS = 16  # --tried: the fresh train tasks the chain's end and its middle state run for the pick
LONG = 150  # --tried: the steps of a long chain
CHECKPOINTS = (M, 3)  # --tried: a long chain's checkpoints, scored on M fixed train tasks every 3 steps
SPARSE = (M, 10)  # --tried, the pick switched on by budget: checkpoints on M fixed train tasks every 10 steps
MARGIN = 0.04  # ... where the best scored state is validated only when it scored this much above the end
SWITCH_VALIDATIONS = 2  # ... switched on where the budget pays for this many whole validations
FIXED_CHAINS = (3, 10, 30)  # search.explore of the fixed-length rows (10: the default before the rule)
TURN_PRICE = 20  # rollouts an optimizer turn is priced at in the middle tables: an assumption
MINIBATCH = 3  # GEPA's default minibatch
CRASH, BURST_P, BURST = 0.03, 0.2, 0.1  # random crashes; an outage in 20% of batches crashes 10% more
BUDGETS = (2000, 5000)
# An optimizer conversation as the projection's priors price it for the demo's skill and tasks with
# the default models (`harnessopt run --dry-run` prints the rates: optimizer_calls 20 at
# optimizer_usd_per_call 0.15, against target_usd_per_call 0.00489 a run): about 610 target runs.
PRIORS_TURN_PRICE = 600
PRIORS_BUDGETS = (20_000, 50_000)  # at the priors' target price, about $98 and $245
YIELDS = {  # the yield tables: (what an optimizer turn costs in rollouts, the budgets)
    "yield": (0, BUDGETS),
    "priced": (TURN_PRICE, BUDGETS),
    "priors": (PRIORS_TURN_PRICE, PRIORS_BUDGETS),
}
TABLES = [(y, b) for y, (_, budgets) in YIELDS.items() for b in budgets]  # every yield table, in order
# --paired --larger: budgets past the full run's where turns are free or at 20, at which both the
# default and GEPA-style reach near the population's ceiling (docs/gate.md, "Yield")
LARGER = [("yield", 10000), ("yield", 20000), ("priced", 20000)]
ROUNDS = 20  # the per-run targets: 20-round runs
WHOLE_BANK = GateConfig().banked_epochs  # confirm_epochs of the previous stop's rows: the winner's whole bank
# val tasks confirm: holdout sets aside, of M (split_val's own rule)
HELD = len(split_val([Task(f"t{t}", "", None, "val") for t in range(M)], GateConfig(confirm="holdout"))[1])
MIX = {
    "null": 0.35,
    "churn": 0.2,
    "cheap-harm": 0.05,
    "-0.10": 0.1,
    "+0.02": 0.1,
    "+0.05": 0.12,
    "+0.10": 0.08,
}
TODAY: dict[str, Any] = {  # the gate's defaults before issue 21
    "policy": "paired",
    "incumbent_epochs": 1,
    "second_look": 2,
    "first_look_share": 0.2,
    "confirm_moves_main": False,
}
NULL_KINDS = ("null", "churn", "cheap-harm")
CHAIN_KINDS = ("explore", "explore-main")  # the loop's chains: the default and its variants, no baseline
LOOP_KINDS = ("gate", "screen", *CHAIN_KINDS)  # run as rounds of a loop: the per-run table


def crashy(
    s: sim.State, ids: np.ndarray, rng: np.random.Generator, runs: int = 1, detail: str = "", **_: object
) -> Outcomes:
    """``gate_simulation.rollout`` at a 3% random crash rate, plus correlated crashes: in a fifth of
    the batches an outage crashes a further 10% of the batch's tasks (all their runs)."""
    out = sim.rollout(s, ids, rng, runs, detail, crash=CRASH)
    if rng.random() < BURST_P:
        out = dict(out)  # the outage's crashes written over a copy
        down = rng.random(len(ids)) < BURST
        for t, hit in zip(ids.tolist(), down.tolist(), strict=True):
            if hit:
                out[f"t{t}"] = [Outcome(0.0, None, max(1, o.tokens // 10), True) for o in out[f"t{t}"]]
    return out


def loop_policy(gc: GateConfig) -> sim.Policy:
    """The loop as it runs with this gate config: smoke, futility stop, reruns, the bank."""
    return sim.Policy(
        "", lambda: make_gate(gc), smoke=True, confirm=True, futility=True, inc_epochs=gc.banked_epochs
    )


def halve(g: GateConfig) -> GateConfig:
    """``g`` at half its false-accept level, as ``search.steps.alpha_share`` tests each of two winners."""
    return g.model_copy(update={"confidence": 1.0 - (1.0 - g.confidence) / 2})


@dataclass
class Strategy:
    label: str
    kind: str  # "gate", "minibatch", "best-of-n", "screen", "explore", "explore-main"
    policy: sim.Policy | None = None
    gate: GateConfig | None = None  # the loop's: its confirmation after an accept (2m rollouts)
    search: SearchConfig = field(default_factory=SearchConfig)  # the loop's (kind "screen")
    plans: bool = True  # the loop plans its budget's last chain and look (search.budget); rows of before: no
    whole_bank_look: bool = False  # the plan's one look against the whole bank, as two stops ago ran it
    moved_only: bool = (
        False  # the plan holds only a chain that moved to its validation's room (the stop before)
    )
    # Tried against the GEPA gap and not shipped (``--tried``):
    recheck: bool = False  # a kept step is rechecked on the next step's batch, reverted when worse there
    restart: bool = False  # a chain end the gate or its confirmation turns down is dropped for main
    two_states: bool = False  # the chain's end and its middle kept state, each gated at half the alpha
    pick_tasks: int = (
        0  # the chain's end and its middle state run these fresh train tasks; the better is gated
    )
    reuse_once: bool = False  # a dropped step's batch and its base's runs serve the next step too, once
    steps: int = 0  # a chain this long whatever the price (past search.explore's bound of 50); 0: the rule's
    checkpoints: tuple[int, int] = (0, 0)  # (S, E): the head every E steps scored once on S fixed train
    # tasks; the best scored of a round's chain is the state gated
    score_start: bool = True  # a round's start is scored and may be the pick
    margin: float | None = None  # the best scored replaces the chain's end only when above it by more
    switch: float = 0.0  # checkpoints and ``steps`` only where the budget pays this many whole validations
    backtrack: bool = False  # at each checkpoint the chain goes on from its pick (tried on the default)

    @classmethod
    def loop(
        cls, label: str, kind: str = "gate", search: SearchConfig | None = None, **cfg: object
    ) -> Strategy:
        gc = GateConfig.model_validate(cfg)
        return cls(label, kind, loop_policy(gc), gc, search or SearchConfig())

    def chain(self, turn: int) -> int:
        """The steps a round chains: ``search.explore``, or when it is null the shipped rule
        (``search.length.chain_length``) at this price of an optimizer turn, in rollouts, and m = M."""
        return self.length(turn)[0]

    def length(self, turn: int, budget: int | None = None) -> Chain:
        """The chain a round runs: ``search.explore``, ``search.screen_tasks``,
        ``search.checkpoints``, ``search.ties_move``, ``search.checkpoint_tasks`` and
        ``search.checkpoint_margin`` (null: none, off, the checkpoints' own), or where explore is
        null the shipped rule (``search.length.chain_length``, with TRAIN train tasks) at this price
        of a turn and with this budget (None: a run without one)."""
        s = self.search
        if s.explore is not None:
            tasks = checkpoints.runs(s, TRAIN)
            every, ties = s.checkpoint_every, bool(s.ties_move)
            return Chain(s.explore, s.screening_only, every, ties, tasks, checkpoints.margin_of(s))
        limit = {"max_cost": float(budget)} if budget else {}
        cfg = Config(search=s, gate=self.gate or GateConfig(), budget=limit)
        got = chain_length(cfg, prices(turn), M, TRAIN)
        return Chain(
            self.steps or got.steps,
            got.screen_tasks,
            got.checkpoints,
            got.ties_move,
            got.checkpoint_tasks,
            got.checkpoint_margin,
        )


class Chain(NamedTuple):
    """What ``Strategy.length`` says a round chains (``search.length.ChainLength``'s fields)."""

    steps: int  # steps a round chains
    extra: int  # train tasks a step screens on beyond the batch
    every: int  # steps between its checkpoints (0: none)
    ties: bool  # a step level with its base on its screen moves the chain
    tasks: int = 0  # fixed train tasks a checkpoint runs (0: none)
    margin: float = checkpoints.MARGIN  # how far above the end the pick must score


FREE_TURN = 1e-9  # what the rule is told a free turn costs, in rollouts (it weighs no unpriced call)


def prices(turn: int) -> dict[str, float]:
    """The projection's rates (``reporting.projection``) of a world where a rollout is one call at
    one unit and an optimizer turn one call at ``turn`` units (``FREE_TURN`` when free)."""
    unit = float(turn) or FREE_TURN
    return {
        "target_calls_per_run": 1.0,
        "target_usd_per_call": 1.0,
        "target_tokens_per_call": 1.0,
        "optimizer_calls": 1.0,
        "optimizer_usd_per_call": unit,
        "optimizer_tokens_per_call": unit,
    }


def round_strategies() -> list[Strategy]:
    """The per-round table's rows: today, the default gate, the default gate with a shorter second
    look (what a user who wants fewer rollouts a round gives up in power), with one look at the
    whole alpha against the whole bank and against a bank of ``one_look_bank`` runs a task (what a
    validation the budget plans for one look runs: ``search.budget``), with the whole-bank
    confirmation of the previous stop (what ``confirm_epochs`` changes per round), and with
    ``confirm: holdout`` (the gate on the rest of val; main moves when the held-out tasks find the
    gain again: what that confirmation costs in power)."""
    shorter = [Strategy.loop(f"default gate, second look {n}", second_look=n) for n in (4, 6)]
    g = GateConfig()
    return [
        strategies()[0],
        Strategy.loop("default gate (GateConfig() now)"),
        *shorter,
        *(  # what search.budget plans when the budget pays for one look only, and with the whole bank
            Strategy.loop(
                f"default gate, one look at the whole alpha against a bank of {n} runs a task"
                + (" (a budget's one-look validation: search.budget)" if n == one_look_bank(g) else ""),
                **one_look(g).model_copy(update={"incumbent_epochs": n}).model_dump(),
            )
            for n in (g.banked_epochs, one_look_bank(g))
        ),
        Strategy.loop(
            f"default gate, confirmed by a whole fresh bank ({WHOLE_BANK} runs a task)",
            confirm_epochs=WHOLE_BANK,
        ),
        Strategy.loop(
            f"default gate, confirm: holdout (the gate on {M - HELD} val tasks, {HELD} held out for the "
            "confirmation)",
            confirm="holdout",
        ),
    ]


def strategies() -> list[Strategy]:
    new = Config().search  # what a new workspace runs: search.explore, checkpoints and ties_move null
    strict = new.model_copy(update={"ties_move": False})  # the default before ties move
    default = strict.model_copy(
        update={"checkpoints": 0}
    )  # the default before checkpoints, and the rows after it
    before = SearchConfig(explore=10)  # the default's chain before the rule
    return [
        dataclasses.replace(Strategy.loop("today (gate defaults before issue 21)", **TODAY), plans=False),
        Strategy.loop(
            "default (Config() now: search.explore, search.screen_tasks, search.checkpoints and "
            "search.ties_move null, chosen by price and budget)",
            "explore",
            new,
        ),
        Strategy.loop(
            "default before checkpoints (search.checkpoints: 0) [the stop before]",
            "explore",
            default,
        ),
        dataclasses.replace(
            Strategy.loop(
                "default, no plan for the budget's last chain and look (search.budget) [three stops ago]",
                "explore",
                default,
            ),
            plans=False,
        ),
        dataclasses.replace(
            Strategy.loop(
                "default, a chain that has not moved steps past its validation's room [the stop before]",
                "explore",
                default,
            ),
            moved_only=True,
        ),
        dataclasses.replace(
            Strategy.loop(
                "default, its one-look validation against the whole bank (11 runs a task) [two stops ago]",
                "explore",
                default,
            ),
            whole_bank_look=True,
            moved_only=True,
        ),
        Strategy.loop(
            "default, each step screened on its batch only (search.screen_tasks: 0; the default four stops ago "
            "had it, without checkpoints)",
            "explore",
            SearchConfig(screen_tasks=0),
        ),
        Strategy.loop("one proposal a round (search.explore: 0, the default gate)", "gate"),
        Strategy("fixed band 0.05 [SkillOpt-Lite]", "gate", sim.Policy("", lambda: FixedDeadBand(0.05))),
        Strategy("minibatch of 3 [GEPA-style]", "minibatch"),
        Strategy("best-of-N on val", "best-of-n"),
        Strategy.loop(
            f"{K} screened on train, then the default gate",
            "screen",
            SearchConfig(candidates=K, screen_tasks=SCREEN_EXTRA),
        ),
        *(
            Strategy.loop(
                f"explore {e} (search.explore: {e})" + (" [the default before the rule]" if e == 10 else ""),
                "explore",
                SearchConfig(explore=e),
            )
            for e in FIXED_CHAINS
        ),
        Strategy.loop("explore 10, each round from main [before the kept head]", "explore-main", before),
        Strategy.loop(
            f"explore 10, confirmed by a whole fresh bank (confirm_epochs {WHOLE_BANK}) [five stops ago]",
            "explore",
            before,
            confirm_epochs=WHOLE_BANK,
        ),
        Strategy.loop(
            "default, a step moves the chain only when strictly better on its batch (search.ties_move: "
            "false) [the default before ties moved]",
            "explore",
            strict,
        ),
    ]


def tried_strategies() -> list[Strategy]:
    """``--tried``: the default, GEPA-style, and what was tried to close the gap between them at
    5,000 rollouts (the default returns main, 0.05-0.07 below the best state its chain built) and
    not shipped, each on the default's plan: it is the default with one rule changed."""
    shipped = strategies()
    default = shipped[2]  # the default before checkpoints: each row below changes one rule of it
    return [
        shipped[1],
        default,
        next(st for st in shipped if st.kind == "minibatch"),
        dataclasses.replace(
            shipped[1],
            search=shipped[1].search.model_copy(update={"ties_move": True}),
            label="the default, a step level with its base on the batch moving the chain at every budget "
            "(search.ties_move: true; null turns it on only where checkpoints are off for the budget)",
        ),
        dataclasses.replace(
            default,
            label="a kept step rechecked on the next step's batch (the head it replaced runs it too), undone "
            "when worse there",
            recheck=True,
        ),
        dataclasses.replace(
            default,
            label="a chain end the gate finds no better than main (or its confirmation fails) dropped: "
            "the next chain starts from main",
            restart=True,
        ),
        dataclasses.replace(
            default,
            label="the chain's end and its middle kept state validated, each at half the alpha "
            "(as search.winners: 2), the larger accepted estimate kept",
            two_states=True,
        ),
        dataclasses.replace(
            default,
            label=f"the chain's end and its middle kept state run {PICK_TASKS} fresh train tasks; the middle "
            "is validated instead when it beats the end there",
            pick_tasks=PICK_TASKS,
        ),
        dataclasses.replace(
            default,
            label="a dropped step's batch and its base's runs serve the next step too, once (no fresh "
            "base runs for it)",
            reuse_once=True,
        ),
        *(
            dataclasses.replace(default, label=f"chains of {n} steps at every price", steps=n)
            for n in (MAX_STEPS, LONG)
        ),
        dataclasses.replace(
            default,
            label=f"chains of {LONG} steps; the head scored once on {CHECKPOINTS[0]} fixed train tasks every "
            f"{CHECKPOINTS[1]} steps, and the chain's best scored state validated",
            steps=LONG,
            checkpoints=CHECKPOINTS,
        ),
        dataclasses.replace(
            default,
            label=f"where the budget pays for {SWITCH_VALIDATIONS} whole validations: chains of {LONG} steps, "
            f"the head scored on {SPARSE[0]} fixed train tasks every {SPARSE[1]} steps (the start not scored), "
            f"the best scored validated when {MARGIN} above the end, a state scored once a run; elsewhere the "
            "default before checkpoints [the stop before; the default's checkpoints score once a round]",
            steps=LONG,
            checkpoints=SPARSE,
            score_start=False,
            margin=MARGIN,
            switch=SWITCH_VALIDATIONS,
        ),
        dataclasses.replace(
            shipped[-1],
            label=f"the default before ties move, and at each checkpoint the chain goes on from its pick (the "
            f"best scored state, where more than {MARGIN} above the head) [not shipped]",
            backtrack=True,
        ),
    ]


@dataclass
class Result:
    gain: list[float] = field(default_factory=list)  # true gain of the final skill (held-out)
    commits: int = 0
    bad_commits: int = 0  # commits whose true effect <= 0
    spent: list[int] = field(default_factory=list)
    proposals: list[int] = field(default_factory=list)
    asked_gain: int = 0  # +0.10 proposals judged (per-run power)
    took_gain: int = 0
    stopped: int = 0  # runs whose budget ran out mid-round: the gateway refused a call, and that round failed
    # the chains' rows and GEPA-style: the true gain of the best state the run built and kept (a head
    # a step moved to, an accepted proposal) and of its last one (the chain's end), both unknown to it
    best: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)

    def merge(self, o: Result) -> None:
        self.gain += o.gain
        self.best += o.best
        self.last += o.last
        self.spent += o.spent
        self.proposals += o.proposals
        self.commits += o.commits
        self.bad_commits += o.bad_commits
        self.asked_gain += o.asked_gain
        self.took_gain += o.took_gain
        self.stopped += o.stopped


@dataclass
class World:
    s0: sim.State
    train: np.ndarray
    val: np.ndarray
    held: np.ndarray

    def true(self, s: sim.State) -> float:
        return float(s.p[self.held].mean())


def world(seed: int) -> World:
    rng = np.random.default_rng([seed, 21, 1])
    s0 = sim.population(rng)
    perm = rng.permutation(sim.POPULATION)
    return World(s0, perm[:TRAIN], perm[TRAIN : TRAIN + M], perm[TRAIN + M :])


def proposal(w: World, s: sim.State, seed: int, r: int, j: int = 0) -> tuple[str, sim.State]:
    """The j-th proposal of round r from ``s``: its kind from MIX, the same for every strategy."""
    kinds = list(MIX)
    kind = kinds[int(np.random.default_rng([seed, 21, 2, r, j]).choice(len(kinds), p=list(MIX.values())))]
    return kind, sim.propose(s, kind, np.random.default_rng([seed, 21, 3, r, j]))


def refused(spent: int, budget: int, rounds: int | None = None) -> bool:
    """Has the run gone past its budget of rollouts? What would take it there is refused and changes
    nothing, as the gateway refuses a call past ``budget.max_calls`` and the round it was in fails
    (main stays where it was). Runs of ``rounds`` rounds (the per-run table) have no budget."""
    return rounds is None and spent > budget


def banked(
    pol: sim.Policy,
    gate: GatePolicy,
    s: sim.State,
    bank: Outcomes,
    rng: np.random.Generator,
    val: np.ndarray,
    runs: int | None = None,
) -> tuple[Outcomes, int]:
    """The incumbent's runs as a round that validates finds them (``round.evaluate.incumbent_outcomes``,
    before smoke): measured on ``val`` when the run first validates, then topped up to ``runs`` (by
    default ``incumbent_epochs``; a validation the budget plans for one look: ``one_look_bank``), only
    the runs each task lacks (a confirmation's or a validation's runs after an accept; nothing when
    the bank is whole), crashes rerun when the gate judges the bank; and the rollouts that took."""
    want, retry = runs or pol.inc_epochs or pol.epochs, gate.bank_first_look
    if not bank:
        return sim.measure_incumbent(s, val, rng, want, pol.detail, crashy, retry)
    return sim.top_up(s, bank, want, rng, pol.detail, crashy, retry)


def _mean_score(out: Outcomes) -> float:
    return statistics.fmean(statistics.fmean(o.score for o in runs) for runs in out.values())


def run_gate(st: Strategy, w: World, seed: int, budget: int, rounds: int | None, turn: int = 0) -> Result:
    """The loop: one candidate a round (or the screened one of K) through smoke, validation, gate."""
    assert st.policy is not None
    pol, res = st.policy, Result()
    gate, rng = pol.make(), np.random.default_rng([seed, 21, 4])
    plan = Planner(st, w, budget, turn) if rounds is None and st.plans and st.gate is not None else None
    retry = gate.bank_first_look
    s = w.s0
    inc_out: Outcomes = {}  # the incumbent's bank: measured when a round first validates, as the loop does
    r, asked, sc, spent = 0, 0, st.search, 0
    while (rounds is None and budget - spent >= M) or (rounds is not None and r < rounds):
        if plan is not None and r > 0 and not plan.round_can_commit(spent, inc_out):
            break  # round.driver starts no round the budget left cannot commit in
        if st.kind == "screen":
            # The round's batch (the incumbent's runs the optimizer reads) and the extra screening
            # tasks (the incumbent runs them too), as ``search.steps``: all paid.
            tasks = rng.permutation(w.train)[: BATCH + sc.screening_only]
            inc_train = crashy(s, tasks, rng)
            props = [proposal(w, s, seed, r, j) for j in range(sc.candidates)]
            runs = {f"c{j}": crashy(c, tasks, rng) for j, (_, c) in enumerate(props)}
            spent += sc.candidates * (len(tasks) + turn) + len(tasks)
            chosen = [x for x in screen(runs, inc_train, keep=sc.winners, floor=sc.screen_floor) if x.chosen]
            asked += sc.candidates
            if not chosen:
                r += 1
                continue
            kind, cand = props[int(chosen[0].name[1:])]
        else:
            kind, cand = proposal(w, s, seed, r)
            asked += 1
            spent += turn + BATCH  # the optimizer's turn and the incumbent's runs on the batch it reads
        judge, bank = plan.gate(spent, inc_out, gate) if plan is not None else (gate, None)
        inc_out, n = banked(pol, judge, s, inc_out, rng, w.val, bank)
        spent += n
        dec, cand_out = sim.decide(pol, judge, s, cand, w.val, inc_out, rng, rollout=crashy)
        spent += dec.rollouts
        r += 1
        res.asked_gain += kind == "+0.10"
        if not dec.accept:
            continue
        fresh = None
        if st.gate is not None and st.gate.confirm == "val" and retry:
            # the banked gate (round.evaluate.confirm_banked): the winner's bank, measured fresh, confirms
            ok, fresh, n = confirm_banked(st, w, cand, inc_out, rng)
            spent += n
            if st.gate.confirm_moves_main and not ok:
                continue
        elif st.gate is not None and st.gate.confirm == "val":  # fresh runs on val, both sides
            spent += 2 * M * pol.epochs
            if not confirmed(st, w, cand, s, rng):
                continue  # main does not move
        if refused(spent, budget, rounds):
            break  # the round ran out of budget before main could move
        res.took_gain += kind == "+0.10"
        res.commits += 1
        res.bad_commits += w.true(cand) - w.true(s) <= 0
        s, inc_out = cand, fresh if fresh is not None else cand_out  # the next round tops it up
    res.gain.append(w.true(s) - w.true(w.s0))
    res.spent.append(spent if rounds is not None else min(spent, budget))
    res.stopped += refused(spent, budget, rounds)  # the gateway refused a call: that round failed
    res.proposals.append(asked)
    return res


def run_explore(st: Strategy, w: World, seed: int, budget: int, rounds: int | None, turn: int = 0) -> Result:
    """Proposals chained on a head that each replaces only when better on a train batch; the head
    gated every ``search.explore`` proposals when it moved since the gate last judged it (the base's
    runs on each fresh batch after a round's first are paid). Kind "explore" is the loop's: a head
    the gate rejects is where the next round goes on; kind "explore-main" starts every round from
    main (the previous stop's). ``rounds``: gate tests (each ``search.explore`` proposals). With a
    budget, as the loop plans it (``search.budget``): a chain ends before a step after which its
    validation would not fit (with ``moved_only``, as the stop before: only one that moved), a round
    after the first starts only with room for its batch, a step and that validation
    (``round.driver``), and a validation with room for one look of the gate and not two judges
    that one at the whole alpha."""
    if st.switch and (
        rounds is not None or budget < st.switch * Planner(st, w, budget, turn).whole_validation()
    ):
        st = dataclasses.replace(st, steps=0, checkpoints=(0, 0))  # below the switch: the default
    assert st.policy is not None and st.gate is not None
    steps, extra, every, ties, tasks_s, margin_s = st.length(turn, budget if rounds is None else None)
    floor = step_floor(ties)  # the shipped step's rule (search.ties_move)
    pol, res, carry = st.policy, Result(), st.kind == "explore"
    gate, rng = pol.make(), np.random.default_rng([seed, 21, 4])
    plan = Planner(st, w, budget, turn) if rounds is None and st.plans else None
    s = head = tested = w.s0
    inc_out: Outcomes = {}  # the incumbent's bank: measured when a round first validates, as the loop does
    r = k = spent = 0  # proposals in all, steps this round, rollouts
    best = w.true(w.s0)
    prev: sim.State | None = None  # recheck: the base of the last kept step, until a batch rechecks it
    reuse: tuple[np.ndarray, Outcomes] | None = None  # reuse_once: a dropped step's batch and base runs
    kept: list[sim.State] = []  # the heads this round's steps moved to
    # two_states: its gates at half the alpha, with both looks and with one
    halves = [make_gate(halve(st.gate)), make_gate(one_look(halve(st.gate)))] if st.two_states else []
    # checkpoints: a tried row's, or the shipped ones (search.checkpoints), scored once a round
    margin: float | None = margin_s
    score_start = False
    if st.checkpoints != (0, 0):
        (tasks_s, every), margin, score_start = st.checkpoints, st.margin, st.score_start
    marks = Checkpoints(w.train[-tasks_s:], per_round=not st.checkpoints[0]) if tasks_s else None
    while (rounds is None and budget - spent >= M) or (rounds is not None and r < rounds * steps):
        if k == 0:
            start = head = head if carry else s  # a round's chain starts from main, or the kept head
            kept = []
            if marks is not None:
                spent += marks.begin(head, rng, score=score_start)
        # the batch, then the screening-only tasks
        tasks = reuse[0] if reuse is not None else rng.permutation(w.train)[: BATCH + extra]
        held = plan is not None and not st.moved_only
        # a recheck's runs, a second state's one-look validation, the pick's runs: planned
        second = plan.second_state() if plan is not None and st.two_states and len(kept) >= 1 else 0
        more = len(tasks) * (prev is not None) + second + 2 * st.pick_tasks * (len(kept) >= 1) + tasks_s
        if (
            held
            and plan is not None
            and k == 0
            and r > 0
            and not plan.room_for_step(spent + more, len(tasks), inc_out)
        ):
            break  # round.driver starts no round of a chain without room for a step and its validation
        ends = (
            plan is not None
            and (k > 0 if held else head is not start)
            and not plan.room_for_step(spent + more, len(tasks), inc_out)
        )
        if not ends:
            base_runs = None
            if prev is not None:  # recheck: the last kept step against its base on this batch
                base_runs, prev_runs = crashy(head, tasks, rng), crashy(prev, tasks, rng)
                spent += len(tasks)
                if screen({"h": base_runs}, prev_runs)[0].mean_delta < 0:
                    head, base_runs = prev, prev_runs
                prev = None
            kind, cand = proposal(w, head, seed, r)
            # the base's runs on the batch and its extra tasks: the round's (the start's runs the
            # optimizer reads) at the first step, a fresh one after it
            spent += len(tasks) * (reuse is None)
            r, k = r + 1, k + 1
            runs = {"s": crashy(cand, tasks, rng)}
            spent += len(tasks) + turn
            if reuse is not None:
                base_runs = reuse[1]
            base_runs = base_runs if base_runs is not None else crashy(head, tasks, rng)
            moved = any(x.chosen for x in screen(runs, base_runs, floor=floor))
            reuse = (tasks, base_runs) if st.reuse_once and not moved and reuse is None else None
            if moved:
                prev = head if st.recheck else None
                head, best = cand, max(best, w.true(cand))
                kept.append(cand)
            if marks is not None and k % every == 0:
                spent += marks.score(head, rng)
                if st.backtrack:
                    head = marks.best(margin)
            if k < steps:
                continue
        k, prev, reuse = 0, None, None
        if marks is not None:  # the chain's end scored too; the best scored state is gated
            spent += marks.score(head, rng)
            head = marks.best(margin)
        if head is tested:
            continue  # a head the gate has judged is not judged again until a step moves it
        if st.pick_tasks and len(kept) >= 2:  # the end against the middle state on fresh train tasks
            ids = rng.permutation(w.train)[: st.pick_tasks]
            ends_runs, mid_runs = crashy(head, ids, rng), crashy(middle(kept), ids, rng)
            spent += 2 * st.pick_tasks
            if screen({"m": mid_runs}, ends_runs, floor=STEP_FLOOR)[0].chosen:
                head = middle(kept)
        tested = head
        second = plan.second_state() if plan is not None and st.two_states and len(kept) >= 2 else 0
        judge, bank = plan.gate(spent + second, inc_out, gate) if plan is not None else (gate, None)
        inc_out, n = banked(pol, judge, s, inc_out, rng, w.val, bank)
        spent += n
        if st.two_states and len(kept) >= 2:  # the end and the middle state, each at half the alpha
            half = halves[plan is not None and judge is plan.one]
            tried = [(*sim.decide(pol, half, s, c, w.val, inc_out, rng, rollout=crashy), c)
                     for c in (head, middle(kept))]  # fmt: skip
            spent += sum(d.rollouts for d, _, _ in tried)
            accepted = [x for x in tried if x[0].accept]
            dec, cand_out, head = max(accepted, key=lambda x: x[0].delta) if accepted else tried[0]
            tested = head
        else:
            dec, cand_out = sim.decide(pol, judge, s, head, w.val, inc_out, rng, rollout=crashy)
            spent += dec.rollouts
        if not dec.accept:
            if st.restart and (dec.smoke_reject or dec.saved > 0 or dec.delta <= 0):
                head = tested = s  # the next round's chain starts from main
            continue
        ok, fresh, n = confirm_banked(st, w, head, inc_out, rng)
        spent += n
        if not ok:
            if st.restart:
                head = tested = s
            continue
        if refused(spent, budget, rounds):
            break  # the round ran out of budget before main could move
        res.commits += 1
        res.bad_commits += w.true(head) - w.true(s) <= 0
        s, inc_out = head, fresh
        tested = s
    res.best.append(best - w.true(w.s0))
    res.last.append(w.true(head) - w.true(w.s0))
    res.gain.append(w.true(s) - w.true(w.s0))
    res.spent.append(spent if rounds is not None else min(spent, budget))
    res.stopped += refused(spent, budget, rounds)  # the gateway refused a call: that round failed
    res.proposals.append(r)
    return res


@dataclass
class Checkpoints:
    """A chain's checkpoints (the default's ``search.checkpoints``, and the ``--tried`` rows'): states
    of a chain scored once each, one run a task on ``tasks`` (fixed train tasks, the same all run,
    as GEPA-style scores each state on val)."""

    tasks: np.ndarray
    per_round: bool = False  # a state is scored once a round (the loop's run cache), else once a run
    scores: dict[int, tuple[sim.State, float]] = field(default_factory=dict)  # by id; holds the state
    chain: list[sim.State] = field(default_factory=list)  # this round's chain's scored states

    def begin(self, s: sim.State, rng: np.random.Generator, score: bool = True) -> int:
        """A round's chain, from ``s`` (scored unless it was this run, or round; with ``score``
        false neither scored nor a pick); the rollouts that took."""
        self.chain = []
        if self.per_round:
            self.scores = {}
        return self.score(s, rng) if score else 0

    def score(self, s: sim.State, rng: np.random.Generator) -> int:
        """Score ``s`` (once a run); the rollouts that took."""
        self.chain.append(s)
        if id(s) in self.scores:
            return 0
        self.scores[id(s)] = (s, _mean_score(crashy(s, self.tasks, rng)))
        return len(self.tasks)

    def best(self, margin: float | None = None) -> sim.State:
        """The chain's state with the highest score (the earliest of equals); with ``margin``, only
        when it scored more than that above the chain's end (the last scored), else the end."""
        top = max(self.chain, key=lambda s: self.scores[id(s)][1])
        if margin is None:
            return top
        end = self.chain[-1]
        return top if checkpoints.above(self.scores[id(top)][1], self.scores[id(end)][1], margin) else end


def middle(kept: list[sim.State]) -> sim.State:
    """The middle of a chain's kept states (the earlier of two): ``two_states`` and ``pick_tasks``."""
    return kept[(len(kept) - 1) // 2]


@dataclass
class Planner:
    """What the loop plans from its budget (``harnessopt.search.budget``), in a world where a rollout
    costs one unit and an optimizer turn ``turn``: ``budget.max_cost`` is the run's budget."""

    st: Strategy
    w: World
    budget: int
    turn: int

    def __post_init__(self) -> None:
        assert self.st.gate is not None
        self.cfg = Config(search=self.st.search, gate=self.st.gate, budget={"max_cost": float(self.budget)})
        self.rates = prices(self.turn)
        self.one = make_gate(one_look(self.st.gate))

    def _lacks(self, inc_out: Outcomes) -> Lacks:
        """``round.evaluate.bank_lacks``: runs the bank lacks on val to hold ``n`` a task (with
        ``whole_bank_look``, the whole bank's for any ``n``: the plan of two stops ago)."""
        have = [len(inc_out.get(f"t{t}", ())) for t in self.w.val.tolist()]
        whole = self.cfg.gate.banked_epochs if self.st.whole_bank_look else None
        return lambda n: sum(max(0, (whole or n) - h) for h in have)

    def room_for_step(self, spent: int, tasks: int, inc_out: Outcomes) -> bool:
        """``search.explore._room_for_step``: a step on ``tasks`` and then a one-look validation."""
        return room_for_step(
            self.cfg, self.rates, Usage(cost_usd=float(spent)), tasks, M, self._lacks(inc_out)
        )

    def whole_validation(self) -> float:
        """A validation with both looks and the whole bank to measure: ``search.budget``'s reserve."""
        return validation_runs(self.cfg, M, self.cfg.gate.banked_epochs * M, 2)

    def second_state(self) -> int:
        """``two_states`` (tried, not shipped): a second state's one-look validation, the bank whole."""
        return int(validation_runs(self.cfg, M, 0, 1)) + 1

    def round_can_commit(self, spent: int, inc_out: Outcomes) -> bool:
        """``round.driver._budget_short``: does the budget left pay for a round that could commit
        (``search.budget.round_can_commit``)?"""
        return round_can_commit(
            self.cfg, self.rates, Usage(cost_usd=float(spent)), M, TRAIN, self._lacks(inc_out)
        )

    def gate(self, spent: int, inc_out: Outcomes, two: GatePolicy) -> tuple[GatePolicy, int | None]:
        """``round.evaluate.looks_that_fit`` and the bank ``round.steps.evaluate`` tops up for it: the
        one-look gate and ``one_look_bank`` when the plan has one look, else ``two`` (the round's
        gate with both looks) and the whole bank."""
        planned = looks(self.cfg, self.rates, Usage(cost_usd=float(spent)), M, self._lacks(inc_out))
        if planned == 2:
            return two, None
        return self.one, None if self.st.whole_bank_look else one_look_bank(self.cfg.gate)


def run_minibatch(w: World, seed: int, budget: int, turn: int = 0) -> Result:
    """GEPA-style: accept on a minibatch of 3 train tasks, score the accepted on val, return the best."""
    res, rng = Result(), np.random.default_rng([seed, 21, 5])
    gate = MinibatchImproved(MINIBATCH, seed)
    s = w.s0
    pool = [(_mean_score(crashy(w.s0, w.val, rng)), w.s0)]
    spent, r = M, 0
    while budget - spent >= M + 2 * MINIBATCH:
        kind, cand = proposal(w, s, seed, r)
        r += 1
        ids = rng.choice(w.train, MINIBATCH, replace=False)
        d = gate.decide(crashy(cand, ids, rng), crashy(s, ids, rng))
        spent += 2 * MINIBATCH + turn
        if refused(spent, budget):
            break
        res.asked_gain += kind == "+0.10"
        if not d.accept:
            continue
        spent += M  # its score on val
        if refused(spent, budget):
            break
        res.took_gain += kind == "+0.10"
        res.commits += 1
        res.bad_commits += w.true(cand) - w.true(s) <= 0
        pool.append((_mean_score(crashy(cand, w.val, rng)), cand))
        s = cand
    best = max(pool, key=lambda x: x[0])[1]
    res.best.append(max(w.true(c) for _, c in pool) - w.true(w.s0))
    res.last.append(w.true(s) - w.true(w.s0))
    res.gain.append(w.true(best) - w.true(w.s0))
    res.spent.append(min(spent, budget))
    res.stopped += refused(spent, budget)
    res.proposals.append(r)
    return res


def run_best_of_n(w: World, seed: int, budget: int, turn: int = 0) -> Result:
    """N proposals from the start, each scored once on val; the best on val (the start included)."""
    res, rng = Result(), np.random.default_rng([seed, 21, 6])
    best_score, best = _mean_score(crashy(w.s0, w.val, rng)), w.s0
    spent, n = M, 0
    while budget - spent >= M:
        _, cand = proposal(w, w.s0, seed, n)
        n += 1
        spent += M + turn
        if refused(spent, budget):
            break
        score = _mean_score(crashy(cand, w.val, rng))
        if score > best_score:
            best_score, best = score, cand
    if best is not w.s0:
        res.commits += 1
        res.bad_commits += w.true(best) <= w.true(w.s0)
    res.gain.append(w.true(best) - w.true(w.s0))
    res.spent.append(min(spent, budget))
    res.stopped += refused(spent, budget)
    res.proposals.append(n)
    return res


def run_one(
    st: Strategy, w: World, seed: int, budget: int, rounds: int | None = None, turn: int = 0
) -> Result:
    """One run of ``st``; ``turn``: what an optimizer turn (a proposal) costs, in rollouts."""
    if st.kind == "minibatch":
        return run_minibatch(w, seed, budget, turn)
    if st.kind == "best-of-n":
        return run_best_of_n(w, seed, budget, turn)
    if st.kind in CHAIN_KINDS:
        return run_explore(st, w, seed, budget, rounds, turn)
    return run_gate(st, w, seed, budget, rounds, turn)


def per_round(st: Strategy, seed: int) -> dict[str, int]:
    """Each null kind and +0.10 once against a freshly measured incumbent (m = 50)."""
    assert st.policy is not None
    w, pol, out = world(seed), st.policy, {}
    val, held = split(st, w)
    for ki, kind in enumerate((*NULL_KINDS, "+0.10")):
        cand = sim.propose(w.s0, kind, np.random.default_rng([seed, 21, 7, ki]))
        rng = np.random.default_rng([seed, 21, 8, ki])
        gate = pol.make()
        inc_out, _ = sim.measure_incumbent(
            w.s0, val, rng, pol.inc_epochs or pol.epochs, pol.detail, crashy, gate.bank_first_look
        )
        dec, _ = sim.decide(pol, gate, w.s0, cand, val, inc_out, rng, rollout=crashy)
        bank = inc_out if gate.bank_first_look else None
        out[kind] = int(dec.accept and confirmed(st, w, cand, w.s0, rng, bank, held))
        out["rollouts"] = out.get("rollouts", 0) + dec.rollouts
    return out


def split(st: Strategy, w: World) -> tuple[np.ndarray, np.ndarray]:
    """(the val tasks the gate sees, the held-out ones): ``gate.confirmation.split_val`` on the
    world's val, which sets ``holdout_share`` of it aside with ``confirm: holdout`` and nothing
    otherwise."""
    tasks = [Task(f"t{t}", "", None, "val") for t in w.val.tolist()]
    seen, held = split_val(tasks, st.gate or GateConfig())
    return tuple(np.array([int(t.id[1:]) for t in part], dtype=w.val.dtype) for part in (seen, held))  # type: ignore[return-value]


def confirm_banked(
    st: Strategy, w: World, cand: sim.State, bank: Outcomes, rng: np.random.Generator
) -> tuple[bool, Outcomes, int]:
    """The banked gate's confirmation (``round.evaluate.confirm_banked``): ``gate.confirm_epochs``
    fresh runs of the winner on val against the incumbent's bank; (confirmed, the runs: the new
    incumbent's bank until ``banked`` tops it up, the rollouts they took)."""
    assert st.gate is not None and st.policy is not None
    fresh, n = sim.measure_incumbent(cand, w.val, rng, st.gate.confirm_runs, "", crashy, True)
    return bool(confirmation_record(fresh, bank, "val")["confirmed"]), fresh, n


def confirmed(
    st: Strategy,
    w: World,
    cand: sim.State,
    s: sim.State,
    rng: np.random.Generator,
    bank: Outcomes | None = None,
    held: np.ndarray | None = None,
) -> bool:
    """Does main move after the gate accepted? Not when the loop waits for its confirmation and it
    fails: fresh runs on val, both sides (``confirm_accepted``); with the banked gate, the winner's
    fresh bank against the incumbent's (``bank``); with ``confirm: holdout``, fresh runs of both
    sides on the ``held`` val tasks the gate never saw (``confirm_accepted``)."""
    if st.gate is None or st.gate.confirm == "none" or not st.gate.confirm_moves_main:
        return True
    if st.gate.confirm == "val" and bank is not None:
        return confirm_banked(st, w, cand, bank, rng)[0]
    tasks = held if st.gate.confirm == "holdout" else w.val
    assert tasks is not None and len(tasks)
    again = (crashy(cand, tasks, rng, st.gate.epochs), crashy(s, tasks, rng, st.gate.epochs))
    return bool(confirmation_record(*again, st.gate.confirm)["confirmed"])


def work(job: tuple[str, int, list[int]]) -> tuple[str, int, list[object]]:
    what, budget, seeds = job
    mode, _, rest = what.partition(" ")
    what = rest if mode in ("tried", "paired") else what
    sts = {"tried": tried_strategies, "paired": paired_strategies}.get(mode, strategies)()
    if what == "round":
        rows = round_strategies()
        tallies: list[object] = [dict.fromkeys((*NULL_KINDS, "+0.10", "rollouts"), 0) for _ in rows]
        for seed in seeds:
            for st, t in zip(rows, tallies, strict=True):
                for k, v in per_round(st, seed).items():
                    t[k] += v  # type: ignore[index]
        return what, budget, tallies
    if what == "noise":
        pairs: list[object] = []
        for seed in seeds:
            w, rng = world(seed), np.random.default_rng([seed, 21, 9])
            nf = measure(crashy(w.s0, w.val, rng), crashy(w.s0, w.val, rng), GateConfig())
            pairs.append((nf["flip_rate"], nf["paired_sd"]))
        return what, budget, pairs
    results: list[object] = [Result() for _ in sts]
    for seed in seeds:
        w = world(seed)
        for st, res in zip(sts, results, strict=True):
            if what == "runs" and st.kind not in LOOP_KINDS:
                continue
            turn = YIELDS[what][0] if what in YIELDS else 0
            res.merge(run_one(st, w, seed, budget, ROUNDS if what == "runs" else None, turn))  # type: ignore[attr-defined]
    return what, budget, results


def _mean_se(xs: list[float]) -> str:
    """The mean and its standard error, as the yield tables print them."""
    return f"{statistics.fmean(xs):+.4f} ±{statistics.stdev(xs) / len(xs) ** 0.5:.4f}"


def _paired(a: list[float], b: list[float]) -> str:
    """``a`` against ``b`` run by run (the same seeds: the same world and proposal stream): the mean of
    their differences, its standard error, and what it says at two standard errors."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    mean, se = statistics.fmean(d), statistics.stdev(d) / len(d) ** 0.5
    verdict = "above" if mean > 2 * se else "below" if mean < -2 * se else "level"
    return f"{mean:+.4f} ±{se:.4f} {verdict}"


def _table(y: str, b: int) -> str:
    return f"{b}" + (f", turns at {YIELDS[y][0]}" if YIELDS[y][0] else ", turns free")


def _yield_tables(
    mode: str,
    strategies: int,
    runs: int,
    workers: int,
    first: int = 0,
    tables: list[tuple[str, int]] = TABLES,
) -> dict[tuple[str, int], list[Result]]:
    """The yield ``tables`` of ``mode``'s strategies (``work``'s "tried" or "paired"), ``runs`` seeds
    a table from ``first`` on, split among ``workers`` processes: a table's results, one a strategy
    in ``mode``'s order."""
    chunks = 4 * workers
    jobs = [
        (f"{mode} {y}", b, list(range(first + w, first + runs, chunks)))
        for y, b in tables
        for w in range(chunks)
    ]
    res = {key: [Result() for _ in range(strategies)] for key in tables}
    with mp.Pool(workers) as pool:
        for what, budget, got in pool.map(work, jobs):
            for r, g in zip(res[(what, budget)], got, strict=True):
                r.merge(g)  # type: ignore[arg-type]
    return res


def paired_strategies() -> list[Strategy]:
    """``--paired``: the default and GEPA-style only, the one baseline it is level with in some tables."""
    shipped = strategies()
    return [shipped[1], next(st for st in shipped if st.kind == "minibatch")]


def paired_main(runs: int, workers: int, first: int = 0, tables: list[tuple[str, int]] = TABLES) -> int:
    """``--paired``: the default against GEPA-style run by run, at as many runs as asked (the full run's
    paired table has 200 a table, whose standard errors leave some tables level), in the full run's
    tables or ``tables`` (``--larger``)."""
    started = time.monotonic()
    res = _yield_tables("paired", 2, runs, workers, first, tables)
    print(f"the default against GEPA-style, run by run: {runs} runs a table (seeds {first:,} to "
          f"{first + runs - 1:,}), each seed the same world and "
          "proposal stream for both; E[true gain] ±SE of each, then mean of (default - GEPA-style) ±SE of "
          "that difference (above or below: beyond two standard errors, else level)")  # fmt: skip
    print("| table | default | GEPA-style | default - GEPA-style |\n|---|---|---|---|")
    for key in tables:
        default, gepa = res[key]
        print(
            f"| {_table(*key)} | {_mean_se(default.gain)} | {_mean_se(gepa.gain)} | {_paired(default.gain, gepa.gain)} |"
        )
    print(f"\nwall time {time.monotonic() - started:.1f}s")
    return 0


def tried_main(runs: int, workers: int, first: int = 0) -> int:
    """``--tried``: the rules tried against the GEPA gap, beside the default and GEPA-style."""
    started, sts = time.monotonic(), tried_strategies()
    res = _yield_tables("tried", len(sts), runs, workers, first)
    print(f"tried against the GEPA gap: E[true gain] ±SE, {runs} runs a strategy and table (seeds {first:,} "
          f"to {first + runs - 1:,}; best state / "
          "last state / runs the budget cut mid-round)")  # fmt: skip
    print("| strategy | " + " | ".join(_table(y, b) for y, b in TABLES) + " |")
    print("|---" * (len(TABLES) + 1) + "|")
    for i, st in enumerate(sts):
        cells = []
        for key in TABLES:
            r = res[key][i]
            best = f"{statistics.fmean(r.best):+.3f}" if r.best else "-"
            last = f"{statistics.fmean(r.last):+.3f}" if r.last else "-"
            cells.append(f"{_mean_se(r.gain)} ({best} / {last} / {r.stopped / runs:.3f})")
        print(f"| {st.label} | " + " | ".join(cells) + " |")
    switched = next(st for st in sts if st.switch)
    whole = Planner(switched, world(0), BUDGETS[0], 0).whole_validation()  # the same at any budget
    print(f"\nthe switch (the default's, search.length.chain_length; the last row's): a whole validation (search.budget.validation_runs, both looks, the whole bank) is "
          f"{whole:,.0f} runs at m={M}; {switched.switch:g} of them {switched.switch * whole:,.0f}; "
          + ", ".join(f"{b:,} rollouts pay for {b / whole:.2f}" for b in sorted({b for _, b in TABLES})))  # fmt: skip
    print(f"\nwall time {time.monotonic() - started:.1f}s")
    return 0


def _q(xs: list[float], q: float) -> float:
    return float(np.quantile(np.array(xs), q)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200, help="simulated runs per strategy and budget")
    ap.add_argument("--trials", type=int, default=2000, help="per-round trials per proposal kind")
    ap.add_argument("--quick", action="store_true", help="30 runs and 200 trials: a fast look")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--tried", action="store_true", help="only the rules tried against the GEPA gap (not shipped)"
    )
    ap.add_argument("--paired", action="store_true", help="only the default against GEPA-style, run by run")
    ap.add_argument(
        "--first-seed", type=int, default=0, help="--paired and --tried: the first seed (0: the full run's)"
    )
    ap.add_argument(
        "--larger",
        action="store_true",
        help="--paired: at 10,000 and 20,000 rollouts with turns free and 20,000 with turns at 20 instead",
    )
    a = ap.parse_args(argv)
    runs, trials = (30, 200) if a.quick else (a.runs, a.trials)
    if a.first_seed and not (a.tried or a.paired):
        ap.error("--first-seed moves the seeds of --paired and --tried only")
    if a.tried:
        return tried_main(runs, a.workers, a.first_seed)
    if a.larger and not a.paired:
        ap.error("--larger gives --paired its tables; add --paired")
    if a.paired:
        return paired_main(runs, a.workers, a.first_seed, LARGER if a.larger else TABLES)
    started = time.monotonic()
    sts = strategies()
    chunks = 4 * a.workers
    jobs = [("round", 0, list(range(w, trials, chunks))) for w in range(chunks)]
    jobs += [("noise", 0, list(range(w, 100, chunks))) for w in range(chunks)]
    jobs += [("runs", 0, list(range(w, runs, chunks))) for w in range(chunks)]
    jobs += [(y, b, list(range(w, runs, chunks))) for y, b in TABLES for w in range(chunks)]
    with mp.Pool(a.workers) as pool:
        parts = pool.map(work, jobs)
    rows = round_strategies()
    rounds = [dict.fromkeys((*NULL_KINDS, "+0.10", "rollouts"), 0) for _ in rows]
    noise: list[tuple[float, float]] = []
    res = {key: [Result() for _ in sts] for key in [("runs", 0), *TABLES]}
    for what, budget, got in parts:
        if what == "round":
            for t, g in zip(rounds, got, strict=True):
                for k in t:
                    t[k] += g[k]  # type: ignore[index]
        elif what == "noise":
            noise += got  # type: ignore[arg-type]
        else:
            for r, g in zip(res[(what, budget)], got, strict=True):
                r.merge(g)  # type: ignore[arg-type]
    flip, sd = (statistics.fmean(x) for x in zip(*noise, strict=True))
    print(
        f"world: m={M} val, {TRAIN} train, held-out rest of {sim.POPULATION}; A/A at m={M} (mean of "
        f"{len(noise)}): flip rate {flip:.3f}, paired SD {sd:.3f}; crashes {CRASH:.0%} random + outages "
        f"({BURST_P:.0%} of batches, {BURST:.0%} of their tasks); proposal mix {MIX}, mean effect a "
        f"proposal {sum(p * sim.EFFECT[k] for k, p in MIX.items()):+.4f}"
    )
    print(
        f"\nper round at m={M} ({trials} trials a kind, fresh unselected incumbent; a commit: the gate "
        "accepts and, where main waits for it, the confirmation confirms)"
    )
    print("| strategy | FA null | FA churn | FA cheap-harm | power +0.10 | rollouts/round (candidate side "
          "and reruns; the incumbent's bank is paid once an accept) |\n|---|---|---|---|---|---|")  # fmt: skip
    for st, t in zip(rows, rounds, strict=True):
        cells = " | ".join(f"{t[k] / trials:.3f}" for k in (*NULL_KINDS, "+0.10"))
        print(f"| {st.label} | {cells} | {t['rollouts'] / (4 * trials):.1f} |")
    print(f"\nper run: {runs} runs x {ROUNDS} rounds, mixed proposals")
    print("| strategy | commits/run | share of commits with true effect <= 0 | P(final below start) "
          "| power +0.10 in runs | mean true gain |\n|---|---|---|---|---|---|")  # fmt: skip
    for st, r in zip(sts, res[("runs", 0)], strict=True):
        if st.kind not in LOOP_KINDS:
            continue
        power = f"{r.took_gain / r.asked_gain:.3f}" if r.asked_gain else "- (gates heads)"
        print(
            f"| {st.label} | {r.commits / runs:.2f} | {r.bad_commits / max(1, r.commits):.3f} "
            f"| {statistics.fmean(g < 0 for g in r.gain):.3f} | {power} "
            f"| {statistics.fmean(r.gain):+.4f} |"
        )
    for y, b in TABLES:
        turn = YIELDS[y][0]
        cost = f"{b} rollouts" if not turn else f"a cost of {b} rollouts, an optimizer turn at {turn}"
        print(f"\nyield at {cost} ({runs} runs a strategy, true gain on the held-out population)")
        print("| strategy | E[true gain] | 10th pct | P(final below start) | share of commits <= 0 "
              "| rollouts per true point | proposals | x today | runs the budget cut mid-round |"
              "\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
        today = statistics.fmean(res[(y, b)][0].gain)
        for st, r in zip(sts, res[(y, b)], strict=True):
            g = statistics.fmean(r.gain)
            per_point = f"{statistics.fmean(r.spent) / (100 * g):.0f}" if g > 0 else "-"
            ratio = f"{g / today:.2f}" if today > 0 else "-"
            print(
                f"| {st.label} | {_mean_se(r.gain)} "
                f"| {_q(r.gain, 0.1):+.4f} | {statistics.fmean(x < 0 for x in r.gain):.3f} "
                f"| {r.bad_commits / max(1, r.commits):.3f} | {per_point} "
                f"| {statistics.fmean(r.proposals):.1f} | {ratio} | {r.stopped / runs:.3f} |"
            )
    baselines = [i for i, st in enumerate(sts) if st.kind not in CHAIN_KINDS]
    print(
        f"\nthe default against each baseline, run by run ({runs} runs a table, each seed the same world and "
        "proposal stream for both): mean of (default - baseline) true gain ±SE of that difference; above or "
        "below: beyond two standard errors, else level"
    )
    print("| baseline | " + " | ".join(_table(y, b) for y, b in TABLES) + " |")
    print("|---" * (len(TABLES) + 1) + "|")
    for i in baselines:
        cells = " | ".join(_paired(res[key][1].gain, res[key][i].gain) for key in TABLES)  # 1: the default
        print(f"| {sts[i].label} | {cells} |")
    print(
        "\nwhere the gain goes (E[true gain] of the best state a run built and kept: a head a step "
        "moved to, a proposal GEPA-style accepted; of its last state, the chain's end; and of what it "
        "returns: main, GEPA-style's best on val)"
    )
    print(
        "| strategy | table | best state | last state | returned | returned - best |\n|---|---|---|---|---|---|"
    )
    for y, b in TABLES:
        for st, r in zip(sts, res[(y, b)], strict=True):
            if st is not sts[1] and st.kind != "minibatch":  # the default and GEPA-style
                continue
            g, top = statistics.fmean(r.gain), statistics.fmean(r.best)
            table = _table(y, b)
            print(
                f"| {'GEPA-style' if st.kind == 'minibatch' else 'default'} | {table} | {top:+.4f} "
                f"| {statistics.fmean(r.last):+.4f} "
                f"| {g:+.4f} | {g - top:+.4f} |"
            )
    print(f"\nwall time {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
