"""What a run will spend before it spends it: model calls, tokens, dollars and wall time.

Per round, the task runs follow from the config: the train batch, the incumbent on val (only when
its scores are not cached, or every round with ``gate.rerun_incumbent``; twice when no noise
floor was measured yet under this environment: the A/A test), the incumbent's smoke rerun made
ahead (the *probe*), with several candidates a round (``search.candidates``) each one's optimizer
calls and its screening runs on train (plus the incumbent's on ``search.screen_tasks``), the smoke
test, the rest of val times ``gate.epochs``, the gate's reruns (flips, the second look) and the
confirmation of an accepted round (``gate.confirm``, both sides again) and its memorised-answer check
(``checks.memorised``: the fixed tasks' perturbed variants). What the config cannot say is measured on
the workspace's earlier rounds (the last ``HISTORY`` that kept per-phase counts): model calls per
task run, tokens per call, optimizer calls per round, the gate's reruns, the share of rounds that
reach the smoke test and the validation, dollars per call and seconds per run. Before any round
is measured, documented priors stand in (``PRIORS``); the projection says which it used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from harnessopt.config import Config, ModelConfig
from harnessopt.errors import UserError
from harnessopt.gate.confirmation import split_val
from harnessopt.gate.noise_floor import NoiseFloorStore
from harnessopt.gateway.models import ScriptedModel, optimizer_model_config
from harnessopt.gateway.server import price_of
from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.journal import STATE_DIR
from harnessopt.ledger.store import RoundManifest
from harnessopt.protocols import Usage
from harnessopt.rollout.val_cache import ValCache, digest, environment_key, key_parts
from harnessopt.search import budget, checkpoints
from harnessopt.search.length import ChainLength, chain_length, chooses, with_chain
from harnessopt.util.text import duration
from harnessopt.workspace.core import Workspace

HISTORY = 10
PRIORS: dict[str, float] = {
    "target_calls_per_run": 1.0,  # the chat template's one request; agents measure theirs in round 1
    "agent_calls_per_run": 5.0,  # an agent template (tool-agent, claude-code, command) before round 1
    "optimizer_turn_share": 0.5,  # of optimizer.max_turns used per round
    "flip_share": 0.25,  # of val tasks whose outcome flips and that the gate reruns on both sides
    "promising_share": 0.2,  # of validated rounds whose first look is promising: the second look
    "crash_share": 0.05,  # of val runs that crash and that the banked gate reruns once
    "accept_share": 0.3,  # of validated rounds accepted, then confirmed (gate.confirm)
    "fixed_share": 0.5,  # of val tasks an accepted round fixes: checks.memorised reruns them perturbed
    "target_output_per_call": 300.0,
    "optimizer_input_per_call": 8000.0,
    "optimizer_output_per_call": 400.0,
    "seconds_per_run": 15.0,  # one task run, before concurrency
    "seconds_per_optimizer_call": 20.0,
}
# With a scripted model (which answers at once, after its script's ``latency_s``), a run's and an
# optimizer call's seconds before any round is measured: the harness's or the tools' own time.
SCRIPTED_SECONDS = 0.5
# Templates that make one model request a task (workspace_templates/*/run.py); the others are agents.
ONE_CALL_TEMPLATES = ("chat", "chat-sdk", "openai-chat", "openai-chat-sdk")
PRIOR_BASIS = (
    "config priors, a rough guess (no measured round yet: calls, tokens and time may be off several-fold)"
)


@dataclass
class RoundCost:
    """One projected round."""

    target_runs: float = 0.0
    target_calls: float = 0.0
    optimizer_calls: float = 0.0
    tokens: float = 0.0
    cost_usd: float = 0.0
    wall_s: float = 0.0

    @property
    def calls(self) -> float:
        return self.target_calls + self.optimizer_calls

    def plus(self, other: RoundCost) -> RoundCost:
        return RoundCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def used(self) -> dict[str, float]:
        """What this spends of each ``budget`` limit, by the limit's name."""
        return {"max_calls": self.calls, "max_tokens": self.tokens, "max_cost": self.cost_usd,
                "max_hours": self.wall_s / 3600}  # fmt: skip


@dataclass
class Projection:
    """The rounds of a run as projected, and what the projection rests on."""

    rounds: list[RoundCost]
    basis: str  # PRIOR_BASIS or "N measured round(s)"
    rates: dict[str, float] = field(default_factory=dict)
    budget: dict[str, float] = field(default_factory=dict)  # the run's limits that are set
    round0: RoundCost | None = None  # harness/joint mode before an approved proposal: the diagnosis
    explore: int = 0  # proposals chained a round (search.explore), each an optimizer conversation
    chain: ChainLength | None = None  # search.explore null: the length chosen from these rates
    # the run's budget plan (search.budget, the task objective): can a round commit after this spend?
    plans: BudgetPlan | None = None

    @property
    def measured(self) -> bool:
        """Do its rates come from rounds this workspace measured (not the config's priors)?"""
        return self.basis != PRIOR_BASIS

    def total(self) -> RoundCost:
        out = RoundCost()
        for r in ([self.round0] if self.round0 else []) + self.rounds:
            out = out.plus(r)
        return out

    def summary(self) -> dict[str, Any]:
        """What the journal keeps at run start (``status`` compares it with what was spent)."""
        t = self.total()
        return {
            "rounds": len(self.rounds),
            "calls": round(t.calls),
            "target_calls": round(t.target_calls),
            "optimizer_calls": round(t.optimizer_calls),
            "tokens": round(t.tokens),
            "cost_usd": round(t.cost_usd, 4),
            "wall_s": round(t.wall_s),
            "basis": self.basis,
        }

    def line(self) -> str:
        """The one line a run prints before it spends anything."""
        t = self.total()
        n = len(self.rounds)
        return (
            f"projection for {n} round(s): ~{t.calls:,.0f} model calls ({t.target_calls:,.0f} target, "
            f"{t.optimizer_calls:,.0f} optimizer), ~{_tokens(t.tokens)} tokens, ~${t.cost_usd:,.2f}, "
            f"~{duration(t.wall_s)} (from {self.basis}){self.budget_note()}"
            + ("; round 0 (the diagnosis) first, the rounds only once it is approved" if self.round0 else "")
            + (
                f"; each round chains {self.explore} proposals, an optimizer conversation each "
                + (
                    "(search.explore; 0 for one a round)"
                    if self.chain is None
                    else f"(search.explore: null, chosen {self.chain.chosen_by()}: {self.chain.basis()}){self.chain.pick}"
                )
                if self.explore
                else ""
            )
        )

    def budget_note(self) -> str:
        """Where the run's budget would end it before its last round, if it would; and, where the
        run plans its budget (``plans``: the task objective), what it does there: the round the
        budget runs out in plans for what is left (``search.budget``), or, when what is left pays for
        no round that could commit (``search.budget.round_can_commit``), the run stops before it."""
        before = self.round0 or RoundCost()  # the diagnosis, when it comes first, spends from it too
        if self.plans is not None and self.measured and self.budget and not self.plans.fits(before):
            # round.driver asks this before a first round too when the rates are measured: it starts none
            limits = " and ".join(f"budget.{name}" for name in self.budget)
            pays = "pay" if len(self.budget) > 1 else "pays"
            return (
                f"; {limits} {pays} for no round that could commit at these rates: the run would start none"
            )
        for k, r in enumerate(self.rounds, start=1):
            after = before.plus(r)
            used = after.used()
            over = [name for name, limit in self.budget.items() if used[name] > limit]
            if not over:
                before = after
                continue
            if self.plans is None:
                return f"; budget.{over[0]} would stop it in this run's round {k}"
            if not self.plans.fits(before):
                if k > 1:
                    return (
                        f"; budget.{over[0]} would end it before this run's round {k}: what is left pays for "
                        "no round that could commit"
                    )
                return (  # a first round on priors starts (they may be several-fold off): the gateway stops it
                    f"; by this rough guess budget.{over[0]} would stop it in this run's round 1 (it pays "
                    "for no round that could commit); the round starts, and its measured rates decide"
                )
            does = [
                *(["its chain ends where its validation still fits"] if self.explore else []),
                *(["the gate takes one look if two do not fit"] if self.plans.looks else []),
            ]
            how = f" ({', and '.join(does)}: search.budget)" if does else ""
            return (
                f"; budget.{over[0]} would end it in this run's round {k}, which plans for what is left{how}"
            )
        return ""

    def table(self) -> list[str]:
        """``run --dry-run``: one line per round, the total, and the rates used."""
        lines = [f"{'round':>5}  {'task runs':>9}  {'calls':>7}  {'tokens':>8}  {'dollars':>8}  {'wall':>8}"]
        rows = ([("0", self.round0)] if self.round0 else []) + [
            (f"+{i}", r) for i, r in enumerate(self.rounds, start=1)
        ]
        # each count rounded as a running total, so the rows add up to the total row (QA: 76 a round,
        # three rounds, total 229)
        cum = {"runs": 0.0, "calls": 0.0, "tokens": 0.0}
        for label, r in rows:
            shown = {}
            for key, value in (("runs", r.target_runs), ("calls", r.calls), ("tokens", r.tokens)):
                shown[key] = round(cum[key] + value) - round(cum[key])
                cum[key] += value
            lines.append(_row(label, shown["runs"], shown["calls"], shown["tokens"], r))
        t = self.total()
        lines.append(_row("total", t.target_runs, t.calls, t.tokens, t))
        lines.append(f"basis: {self.basis}")
        lines.append("rates: " + ", ".join(f"{k} {v:.3g}" for k, v in self.rates.items()))
        if self.chain is not None:
            lines.append(f"chain: {self.chain.why()}")
        if note := self.budget_note():
            lines.append(f"limit: {note.removeprefix('; ')}")
        return lines


def _row(label: str, runs: float, calls: float, tokens: float, r: RoundCost) -> str:
    return (
        f"{label:>5}  {runs:>9.0f}  {calls:>7.0f}  {_tokens(tokens):>8}  "
        f"{'$' + format(r.cost_usd, ',.2f'):>8}  {duration(r.wall_s):>8}"
    )


def _tokens(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:.0f}"


def run_models(cfg: Config) -> dict[str, dict[str, Any]]:
    """The models a run's rounds call and their prices (per million tokens, None: none known), as a
    round records them: rates measured with other models or prices do not price this run."""
    o = cfg.optimizer

    def price(model: str) -> list[float] | None:
        found = price_of(model, cfg.price_table)
        return list(found) if found else None

    return {
        "target": {"provider": cfg.model.provider, "model": cfg.model.target, "price": price(cfg.model.target)},
        "optimizer": {
            "backend": o.backend, "provider": cfg.optimizer_provider, "model": o.model, "price": price(o.model),
        },
    }  # fmt: skip


def _history(ws: Workspace, cfg: Config) -> tuple[list[RoundManifest], int]:
    """The last ``HISTORY`` rounds that measured something with this run's models and prices (rounds
    recorded before models were, too), and how many measured rounds ran others. Failed rounds
    (crashed, stopped, over budget) ended early: their rates would understate a round."""
    done = [r.manifest for r in ledger.past_rounds(ws.repo) if r.manifest.phases and r.status != "failed"]
    models = run_models(cfg)
    same = [m for m in done if m.models is None or m.models == models]
    return same[-HISTORY:], len(done) - len(same)


def current_rates(ws: Workspace, cfg: Config | None = None) -> dict[str, float]:
    """The rates a projection of ``ws`` uses now: measured on its rounds, else its priors (what a
    run re-reads after each round, so that its budget's plan prices what rounds really cost)."""
    cfg = cfg or ws.cfg
    return _rates(ws, cfg, _history(ws, cfg)[0])[0]


OPTIMIZER_RATES = ("optimizer_calls", "optimizer_tokens_per_call", "optimizer_usd_per_call")
MODEL_OPTIMIZERS = ("anthropic", "claude-code", "codex")  # backends whose every turn is a gateway call


def _optimizer_calls(m: RoundManifest) -> int:
    u = m.tokens.get("optimizer")
    return u.calls if u else 0


def _rates(ws: Workspace, cfg: Config, history: list[RoundManifest]) -> tuple[dict[str, float], str]:
    """Measured rates, else the priors; the optimizer's as the backend this run uses makes calls:
    none with ``manual`` (a person edits), the priors' with a model backend where the rounds so far
    made none (they were manual, or resumed a proposal), which the second value says."""
    prior = None if history else prior_rates(ws, cfg)
    rates = dict(prior) if prior is not None else measured_rates(history, cfg)
    if cfg.optimizer.backend == "manual":
        rates |= dict.fromkeys(OPTIMIZER_RATES, 0.0)
    elif cfg.optimizer.backend in MODEL_OPTIMIZERS and not rates["optimizer_calls"]:
        prior = prior or prior_rates(ws, cfg)
        rates |= {k: prior[k] for k in (*OPTIMIZER_RATES, "seconds_per_optimizer_call")}
        if history:
            return rates, "; the optimizer's calls from config priors (no measured round made one)"
    return rates, ""


def project(ws: Workspace, rounds: int, cfg: Config | None = None) -> Projection:
    """Project the next ``rounds`` rounds of ``ws`` under ``cfg`` (default: the workspace's)."""
    cfg = cfg or ws.cfg
    history, others = _history(ws, cfg)
    n_train, n_val = len(ws.tasks("train")), len(split_val(ws.tasks("val"), cfg.gate)[0])
    cached, floor = _measured_state(ws, cfg)
    rates, optimizer_basis = _rates(ws, cfg, history)
    chain = chain_length(cfg, rates, n_val, n_train) if chooses(cfg) else None
    cfg = with_chain(cfg, chain) if chain else cfg  # as the run will set it
    per_round = []
    # The incumbent's val runs are measured when a candidate reaches smoke: every such round with
    # gate.rerun_incumbent, else once, by the first that does (none may: explore rounds screened out)
    reach = rates["reach_smoke"]
    for i in range(rounds):
        incumbent = cfg.gate.rerun_incumbent or (i == 0 and not cached)
        g, aa = cfg.gate, i == 0 and not floor  # the A/A test runs it again unless the bank has it
        banked = g.banked_epochs
        measured = banked + (g.epochs if aa and banked < 2 * g.epochs else 0) if incumbent else 0
        odds = reach if g.rerun_incumbent else 1 - (1 - reach) ** rounds
        per_round.append(_round(cfg, rates, n_train, n_val, incumbent_epochs=measured * odds))
    basis = f"{len(history)} measured round(s){optimizer_basis}" if history else PRIOR_BASIS
    if others:
        basis += f"; {others} round(s) measured with other models or prices left out"
    limits = {
        "max_calls": cfg.budget.max_calls,
        "max_tokens": cfg.budget.max_tokens,
        "max_cost": cfg.budget.max_cost,
        "max_hours": cfg.budget.max_hours,
    }
    r0 = _round0(cfg, rates, n_train) if _round0_pending(ws, cfg) else None
    budget = {k: float(v) for k, v in limits.items() if v is not None}
    plans = _plan(cfg, rates, n_val, n_train) if cfg.objective == "task" else None
    return Projection(per_round, basis, rates, budget, r0, cfg.explore_steps, chain, plans)


@dataclass(frozen=True)
class BudgetPlan:
    """How a run plans its budget's end (``search.budget``), as the projection says it."""

    fits: Callable[[RoundCost], bool]  # can a round still commit after the rounds before it spent this?
    looks: bool  # the gate has a second look, which a validation drops when only one fits


def _plan(cfg: Config, rates: dict[str, float], n_val: int, n_train: int) -> BudgetPlan:
    """``fits``: whether a round could still commit after the projected rounds before it (round 0
    included) spent this much: ``search.budget.round_can_commit``, the bound the run stops on
    (``round.driver``), with the bank the rounds before it measured (a validated or confirmed
    incumbent has the runs a one-look validation reads)."""

    def fits(before: RoundCost) -> bool:
        spent = Usage(calls=round(before.calls), input_tokens=round(before.tokens), cost_usd=before.cost_usd)
        hours = cfg.budget.max_hours
        left = None if hours is None else hours * 3600 - before.wall_s
        return budget.round_can_commit(cfg, rates, spent, n_val, n_train, lambda _n: 0, left)

    return BudgetPlan(fits, bool(cfg.gate.second_look and cfg.gate.confirm_flips))


def _round0_pending(ws: Workspace, cfg: Config) -> bool:
    """Harness and joint mode diagnose first while no proposal is approved (``round0``)."""
    if cfg.mode not in ("harness", "joint"):
        return False
    st = proposals.state(ws.repo)
    return st is None or st.status == "rejected"


def _round0(cfg: Config, rates: dict[str, float], n_train: int) -> RoundCost:
    """Round 0: every train task with the seed harness, then one diagnosis agent's calls."""
    return _priced(cfg, rates, n_train)


def _round(
    cfg: Config, rates: dict[str, float], n_train: int, n_val: int, *, incumbent_epochs: float
) -> RoundCost:
    """``incumbent_epochs``: runs of each val task of the incumbent expected this round (0 when cached)."""
    epochs, smoke = cfg.gate.epochs, min(cfg.gate.smoke, n_val)
    batch = min(cfg.rollout.batch_size, n_train)
    runs: float = batch + n_val * incumbent_epochs + _screening_runs(cfg, rates, n_train, batch)
    v = rates.get("validations", 1.0)  # search.winners > 1: a winner after a rejected one is validated too
    runs += rates["reach_smoke"] * smoke * v + rates.get("probe_runs", 1.0 if smoke else 0.0)
    runs += rates["reach_validation"] * (n_val * epochs - smoke + rates["reruns_per_val_task"] * n_val) * v
    runs += rates["reach_validation"] * rates.get("confirm_runs", 0.0)  # measured: among the reruns
    return _priced(cfg, rates, runs, proposals=cfg.explore_steps or cfg.search.candidates)


def _screening_runs(cfg: Config, rates: dict[str, float], n_train: int, batch: int) -> float:
    """Train runs that screen a round's candidates: each screened one on the batch and the extra
    screening tasks, and the incumbent on those extra tasks (none with one candidate and no floor);
    with ``search.explore``, each step on its batch and extra tasks, and its base on the extra tasks
    of the first and on every batch and its extra tasks after it, and the chain's checkpoints
    (``search.checkpoints``) on their fixed train tasks. A head a checkpoint already scored is not run
    again, so only a share of the checkpoints run: the share the measured rounds' chains ran
    (``checkpoint_share``), and all of them (an upper bound) before a round with checkpoints is
    measured."""
    s, steps = cfg.search, cfg.explore_steps
    extra = min(s.screening_only, n_train - batch)
    if steps:  # each step on its batch and extra tasks, its base on those (all of them after the first)
        tasks = batch + extra
        # the checkpoints, the end's included, at the share that ran
        scoring = (
            checkpoints.held(steps, s.checkpoint_every)
            * checkpoints.runs(s, n_train)
            * rates.get("checkpoint_share", 1.0)
        )
        return steps * tasks * rates.get("screened_share", 1.0) + (steps - 1) * tasks + extra + scoring
    if s.candidates == 1 and s.screen_floor is None:
        return 0.0
    screened = s.candidates * rates.get("screened_share", 1.0)
    return screened * (batch + extra) + extra


def _priced(cfg: Config, rates: dict[str, float], runs: float, proposals: int = 1) -> RoundCost:
    """A round of ``runs`` task runs and ``proposals`` optimizer conversations, in calls, tokens,
    dollars and time."""
    r = RoundCost(target_runs=runs)
    r.target_calls = runs * rates["target_calls_per_run"]
    r.optimizer_calls = rates["optimizer_calls"] * proposals
    r.tokens = (
        r.target_calls * rates["target_tokens_per_call"]
        + r.optimizer_calls * rates["optimizer_tokens_per_call"]
    )
    r.cost_usd = (
        r.target_calls * rates["target_usd_per_call"] + r.optimizer_calls * rates["optimizer_usd_per_call"]
    )
    r.wall_s = (
        runs * rates["seconds_per_run"] / cfg.rollout.concurrency
        + r.optimizer_calls * rates["seconds_per_optimizer_call"]
    )
    return r


def _measured_state(ws: Workspace, cfg: Config) -> tuple[bool, bool]:
    """(are the incumbent's val outcomes cached, is a noise floor stored for this environment, else
    the first measurement runs twice); the key parts (the sandbox's image id) are worked out once."""
    state = ws.root / STATE_DIR
    parts = key_parts(ws.repo, vcs.head_sha(ws.repo), cfg)
    cached = ValCache(state).get(digest(parts)) is not None
    return cached, NoiseFloorStore(state).get(environment_key(parts)) is not None


def prior_rates(ws: Workspace, cfg: Config) -> dict[str, float]:
    """Rates before any round was measured: PRIORS, the config, and the sizes of skill and tasks."""
    skill = (ws.root / "skill" / "SKILL.md").read_text(encoding="utf-8", errors="replace")
    inputs = [str(t.input) for t in ws.tasks("train")] or [""]
    target_in = (len(skill) + sum(map(len, inputs)) / len(inputs)) / 4 + 50  # ~4 characters a token
    target_out = min(PRIORS["target_output_per_call"], cfg.budget.target_max_output_tokens)
    per_run = PRIORS["target_calls_per_run" if cfg.template in ONE_CALL_TEMPLATES else "agent_calls_per_run"]
    opt_calls = cfg.optimizer.max_turns * PRIORS["optimizer_turn_share"]
    opt_in, opt_out = PRIORS["optimizer_input_per_call"], PRIORS["optimizer_output_per_call"]
    val, held = split_val(ws.tasks("val"), cfg.gate)
    reruns, confirm = _prior_reruns(cfg, len(val), len(held))
    latency = _scripted_latency(ws)
    return {
        "target_calls_per_run": per_run,
        "target_tokens_per_call": target_in + target_out,
        "target_usd_per_call": _usd(cfg, cfg.model.target, target_in, target_out),
        "optimizer_calls": opt_calls,
        "optimizer_tokens_per_call": opt_in + opt_out,
        "optimizer_usd_per_call": _usd(cfg, cfg.optimizer.model, opt_in, opt_out),
        "reruns_per_val_task": reruns,
        "confirm_runs": confirm,
        "reach_smoke": 1.0,
        "probe_runs": 1.0 if cfg.gate.smoke else 0.0,  # round.evaluate.probe_jobs: one a round that proposes
        "reach_validation": 1.0,
        "validations": prior_validations(cfg),
        "seconds_per_run": min(
            _seconds(latency(cfg.model), per_run, "seconds_per_run"), cfg.rollout.timeout_s
        ),
        "seconds_per_optimizer_call": _seconds(
            latency(optimizer_model_config(cfg)), 1.0, "seconds_per_optimizer_call"
        ),
    }


def prior_validations(cfg: Config) -> float:
    """Winners a round that validates is expected to validate: the first, and with
    ``search.winners`` > 1 each next one when every one before it was rejected (at the priors'
    accept share)."""
    w = min(cfg.search.winners, cfg.search.candidates) if not cfg.explore_steps else 1
    return sum((1.0 - PRIORS["accept_share"]) ** i for i in range(max(w, 1)))


def _validations(history: list[RoundManifest], cfg: Config) -> float:
    """Winners validated per round that validated, as the rounds recorded them (each winner the
    gate judged has a verdict on its candidate record); the prior where none had several."""
    judged = [
        sum(1 for c in m.search.candidates if c.chosen and c.verdict) if m.search else 0
        for m in history
        if "validation" in m.phases
    ]
    if cfg.search.winners > 1 and not any(n > 1 for n in judged):
        return prior_validations(cfg)
    return sum(max(n, 1) for n in judged) / len(judged) if judged else 1.0


def _scripted_latency(ws: Workspace) -> Callable[[ModelConfig], float | None]:
    """A model's script's ``latency_s`` (None when it is not a scripted model, or its script does
    not read: the run says what is wrong with it), each script read once."""
    read: dict[str, float | None] = {}

    def latency(model: ModelConfig) -> float | None:
        if model.provider != "scripted" or not model.script:
            return None
        if model.script not in read:
            try:
                read[model.script] = ScriptedModel.from_yaml(ws.root / model.script).script.latency_s
            except UserError:
                read[model.script] = None
        return read[model.script]

    return latency


def _seconds(latency: float | None, calls: float, prior: str) -> float:
    """The prior seconds of a run (``calls`` model calls) or an optimizer call: a scripted model
    answers after its script's ``latency_s``, not a hosted model's time (the demo's projection said
    half an hour for a run of seconds)."""
    return PRIORS[prior] if latency is None else SCRIPTED_SECONDS + calls * latency


def _prior_reruns(cfg: Config, n_val: int, n_held: int) -> tuple[float, float]:
    """Before any round is measured: (reruns per val task: the flips rerun on both sides and the
    second look, ``gate.second_look`` runs of every task on both sides (the incumbent's drawn from
    its banked runs while they last: ``gate.incumbent_epochs``), or with the banked gate its crash
    reruns and second look, the candidate's side only; the runs confirming an accepted round on
    both sides, on val or on the held-out tasks, or with the banked gate the winner's new bank)."""
    g = cfg.gate
    if not g.confirm_flips:
        per = 0.0
    elif g.judges_bank:  # no flip reruns; crash reruns and the second look, the candidate's side
        per = PRIORS["crash_share"] + PRIORS["promising_share"] * g.second_look
    else:  # one side when the bank covers the incumbent's reruns too
        sides = 1 if g.banked_epochs - g.epochs >= g.epochs + g.second_look else 2
        per = sides * (PRIORS["flip_share"] + PRIORS["promising_share"] * g.second_look)
    if g.judges_bank and g.confirm == "val":
        # evaluate.confirm_banked: confirm_epochs fresh runs of the winner, one side, and the top-up of
        # its bank to incumbent_epochs by the next round that validates (charged here, with the accept)
        confirm_runs = g.banked_epochs * n_val
    else:
        confirm_runs = 2 * g.epochs * {"val": n_val, "holdout": n_held}.get(g.confirm, 0)
    c = cfg.checks  # the memorised check: the fixed tasks' variants, both sides, once each
    memorised = 0.0 if c.memorised == "off" else 2 * c.memorised_variants * PRIORS["fixed_share"] * n_val
    return per, PRIORS["accept_share"] * (confirm_runs + memorised)


def _usd(cfg: Config, model: str, tokens_in: float, tokens_out: float) -> float:
    """Dollars of one call at ``prices:`` of harnessopt.yaml, else the built-in table, else $0."""
    price = price_of(model, {glob: (p[0], p[1]) for glob, p in cfg.prices.items()})
    return (tokens_in * price[0] + tokens_out * price[1]) / 1e6 if price else 0.0


def measured_rates(history: list[RoundManifest], cfg: Config) -> dict[str, float]:
    """Rates measured on earlier rounds (each with per-phase counts)."""
    runs = sum(s.runs for m in history for s in m.phases.values())
    calls = sum(s.calls for m in history for s in m.phases.values())
    target = [m.tokens.get("target") for m in history]
    optimizer = [m.tokens.get("optimizer") for m in history]
    t_calls = sum(u.calls for u in target if u) or 1
    o_calls = sum(u.calls for u in optimizer if u)
    # the conversations that made calls (a resumed round reused its proposals: none)
    proposed = [m for m in history if m.optimizer is not None and _optimizer_calls(m)] or history
    conversations = sum(len(m.search.candidates) if m.search else 1 for m in proposed)
    searched = [m.search for m in history if m.search]
    screened = sum(sum(c.n > 0 for c in s.candidates) for s in searched)
    held = sum(s.checkpoints for s in searched)  # checkpoints the chains held, and those that ran
    smoked = [m for m in history if "smoke" in m.phases or "validation" in m.phases]
    validated = [m for m in history if "validation" in m.phases]
    n_val = max((m.n or 0 for m in validated), default=0) or 1
    reruns = sum(m.phases["reruns"].runs for m in validated if "reruns" in m.phases)
    target_runs = max(runs, 1)
    wall = sum(m.wall_s or 0.0 for m in history)
    # the optimizer's time as the rounds measured it (optimizer_s); a round recorded without it at
    # the prior a call, and a workspace whose timed rounds made no call keeps the prior
    timed = [m for m in history if m.optimizer_s is not None]
    timed_calls = sum(u.calls for m in timed if (u := m.tokens.get("optimizer")))
    per_call = (
        sum(m.optimizer_s or 0.0 for m in timed) / timed_calls
        if timed_calls
        else PRIORS["seconds_per_optimizer_call"]
    )
    opt_wall = sum(m.optimizer_s or 0.0 for m in timed) + PRIORS["seconds_per_optimizer_call"] * (
        o_calls - timed_calls
    )
    return {
        "target_calls_per_run": calls / target_runs,
        "target_tokens_per_call": sum(u.input + u.output for u in target if u) / t_calls,
        "target_usd_per_call": sum(u.cost_usd or 0.0 for u in target if u) / t_calls,
        "optimizer_calls": o_calls / conversations,  # per candidate: search.candidates multiplies it
        "screened_share": screened / sum(len(s.candidates) for s in searched) if searched else 1.0,
        "checkpoint_share": sum(s.checkpoints_run for s in searched) / held if held else 1.0,
        "optimizer_tokens_per_call": sum(u.input + u.output for u in optimizer if u) / max(o_calls, 1),
        "optimizer_usd_per_call": sum(u.cost_usd or 0.0 for u in optimizer if u) / max(o_calls, 1),
        "reruns_per_val_task": reruns / len(validated) / n_val if validated else 0.0,
        "reach_smoke": len(smoked) / len(history),
        "probe_runs": sum(m.phases["probe"].runs for m in history if "probe" in m.phases) / len(history),
        "reach_validation": len(validated) / len(history),
        "validations": _validations(history, cfg),
        "seconds_per_run": max(wall - opt_wall, 0.0) * cfg.rollout.concurrency / target_runs,
        "seconds_per_optimizer_call": per_call,
    }
