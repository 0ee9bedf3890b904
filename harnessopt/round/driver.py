"""A run: rounds one after another until the count, the budget, the deadline or the STOP file ends it."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harnessopt.config import Config
from harnessopt.errors import RunCutShort, UserError
from harnessopt.gate.confirmation import split_val
from harnessopt.gateway.policy import unpriced_budget
from harnessopt.ledger import live_spend, vcs
from harnessopt.ledger import store as ledger
from harnessopt.ledger.lock import check_held
from harnessopt.protocols import Announce, Usage
from harnessopt.reporting.progress import RunProgress, round_lines
from harnessopt.reporting.projection import Projection, current_rates, project
from harnessopt.rollout.runner import RunObserver
from harnessopt.round import stop
from harnessopt.round.context import RoundResult
from harnessopt.round.evaluate import bank_lacks_of
from harnessopt.round.round0 import BROKEN_PREFIX, Decide, ready
from harnessopt.round.services import Services, open_services
from harnessopt.round.steps import run_round
from harnessopt.search import budget
from harnessopt.search.length import with_chain
from harnessopt.util import interrupts
from harnessopt.workspace.core import Workspace


def run(
    ws: Workspace,
    rounds: int,
    say: Announce,
    *,
    progress: RunProgress | None = None,
    on_round: Callable[[RoundResult], None] | None = None,
    decide: Decide | None = None,
) -> list[RoundResult]:
    """Run ``rounds`` rounds after the last recorded one. Stops early when the budget is spent,
    a round fails, or the STOP file appears (``stop``). Harness and joint mode first need an
    approved round 0 (``round0.ready``; ``decide`` asks a person): without one, no round runs."""
    if unpriced := unpriced_budget(ws.cfg):  # before anything changes
        raise UserError(unpriced)
    ledger.recover(ws.repo, ws.journal, say)
    if killed := live_spend.fold(ws.root, ws.journal):  # what a run killed outright had spent
        say(killed)
    if stop.requested(ws.root):  # left from before this run: it does not stop this one
        if (problem := stop.remove(ws.root)) is not None:
            raise UserError(f"a STOP request is left from before this run: {problem}, then run again")
        say(f"removed a STOP file left from before this run ({stop.stop_path(ws.root)})")
    start = ledger.next_round(ws.repo)
    projected = project(ws, rounds)
    cfg = ws.cfg  # search.explore null: the chain's length the projection chose from its prices
    if projected.chain is not None:
        cfg = with_chain(cfg, projected.chain)
    results: list[RoundResult] = []
    told: list[str] = []
    failed_in_a_row = 0
    journaled = 0  # the runner's retries written to the journal so far
    hours = ws.cfg.budget.max_hours
    deadline = time.monotonic() + hours * 3600 if hours else None
    with open_services(ws.root, cfg, say) as svc, _watched(ws, svc, progress, deadline) as watch:
        # said once the services stand: a missing key or script is then the run's only line
        say(projected.line())
        if projected.chain is not None:
            say(f"this run chains {projected.chain.why()}")
        svc.rates = projected.rates  # a budget's last chain and look are planned at these prices
        svc.deadline = deadline  # and in the time budget.max_hours leaves
        used = run_parts(ws, svc)  # what this run actually uses: status and the report name it
        say("this run: " + ", ".join(f"{k} {v}" for k, v in used.items()))
        settings = run_settings(ws.cfg)  # with -c, not in harnessopt.yaml: the report's header reads them
        ws.journal.write(
            start,
            "run_start",
            rounds=rounds,
            projected=projected.summary(),
            used=used,
            settings=settings,
            overrides=list(ws.overrides),  # the command that resumes this run repeats them
        )
        for k in range(start, start + rounds if ready(ws, svc, say, decide) else start):
            try:
                result = _next_round(ws, svc, k, results, projected, watch, say)
            except UserError as e:  # after recorded rounds: the summary still reports them
                if not results or isinstance(e, RunCutShort):
                    raise
                raise RunCutShort(str(e), results) from e
            if result is None:
                break
            results.append(result)
            svc.rates = current_rates(ws)  # the budget's plan prices what the rounds so far cost
            for line in round_lines(result.manifest):
                say(line)
            if on_round is not None:
                on_round(result)
            for lost in svc.runner.retried[journaled:]:  # a dead Ray worker or node, and the rerun
                ws.journal.write(
                    lost["round"], "worker_lost", **{k: v for k, v in lost.items() if k != "round"}
                )
            journaled = len(svc.runner.retried)
            for note in [*svc.gateway.notes, *svc.runner.notes]:  # e.g. a model without a price
                if note not in told:  # each once per run
                    say(f"note: {note}")
                    told.append(note)
            spent = svc.gateway.exhausted()
            if result.reason == stop.REASON:
                say(stop.honour(ws.root))
                break
            failed_in_a_row = failed_in_a_row + 1 if result.status == "failed" else 0
            if why := _why_stop(svc, result, failed_in_a_row, spent):
                say(f"stopping after round {k}: {why}")
                break
        ws.journal.write(results[-1].round if results else start, "run_end")
    return results


def _next_round(
    ws: Workspace,
    svc: Services,
    k: int,
    results: list[RoundResult],
    projected: Projection,
    watch: stop.StopWatch,
    say: Announce,
) -> RoundResult | None:
    """Round ``k``, or None when the run ends before it: a STOP request, the time budget, or a
    budget that pays for no round that could commit."""
    interrupts.check()
    check_held(ws.root)
    if stop.requested(ws.root):
        say(stop.honour(ws.root))
        return None
    if results and watch.out_of_time():  # (a first round always starts)
        say(f"not starting round {k}: {stop.OUT_OF_TIME}")
        return None
    # a first round starts on the priors' rough guess, not at rates measured rounds give
    if (results or projected.measured) and (short := _cannot_hold(ws, svc) or _budget_short(ws, svc)):
        say(f"not starting round {k}: {short}")
        return None
    return run_round(ws, svc, k, say)


# how much larger a round's largest call's input may be than the run's largest so far: an
# optimizer's brief grows with the trajectories it quotes (14,206 tokens reserved, then 14,497: QA)
CALL_GROWTH = 1.1


def _cannot_hold(ws: Workspace, svc: Services) -> str | None:
    """Why the budget left would refuse the round's largest call after what the round spends
    before it, or None: its train rollout and its optimizer conversations (each candidate's) at the
    measured rates, then a call 10% larger than the run's largest. Room for the largest call at
    round start alone let the rollout and the turns before it spend that room: the call was
    refused, the round failed and the run exited 3 (QA, twice)."""
    runs = min(svc.cfg.rollout.batch_size, len(ws.tasks("train")))
    calls, tokens, usd = budget.spend_of(svc.rates, runs, max(1, svc.cfg.search.candidates))
    before = Usage(math.ceil(calls), math.ceil(tokens), 0, usd)
    if (short := svc.gateway.cannot_hold(ahead=before, growth=CALL_GROWTH)) is None:
        return None
    return (
        f"after the round's rollout and optimizer turns at the measured rates (about {before.calls} calls, "
        f"{before.input_tokens:,} tokens, ${usd:.4f}), {short}, with its input {CALL_GROWTH - 1:.0%} larger"
    )


def _budget_short(ws: Workspace, svc: Services) -> str | None:
    """Why the run's budget (calls, tokens, dollars, hours) pays for no more round that could commit
    (``search.budget.round_can_commit``, main's bank as the round would find it), or None; only for
    the task objective, whose validation the plan is for."""
    cfg, left = svc.cfg, svc.seconds_left()
    if cfg.objective != "task" or not budget.limited(cfg, svc.rates, left):
        return None
    spent, n_train = svc.gateway.total(), len(ws.tasks("train"))
    val = split_val(ws.tasks("val"), cfg.gate)[0]
    lacks = bank_lacks_of(ws, svc, vcs.head_sha(ws.repo), val)
    if budget.round_can_commit(cfg, svc.rates, spent, len(val), n_train, lacks, left):
        return None
    what = (
        "its batch, a step and the chain's validation with one look"
        if cfg.explore_steps
        else "its batch, its optimizer turns and screening, and a validation with one look"
    )
    runs = budget.runs_left(cfg, svc.rates, spent, left) or 0.0
    return (
        f"the budget left (about {runs:,.0f} target runs) does not pay for a round that could commit ({what})"
    )


def _why_stop(svc: Services, result: RoundResult, failed_in_a_row: int, spent: str | None) -> str | None:
    """Why the run ends after this round: a spent budget, a refused key, an incumbent whose runs
    crash (every later round would too), or too many failed rounds in a row."""
    if stop := spent or svc.gateway.key_refused or svc.gateway.upstream_down():
        return stop
    if result.status != "failed":
        return None
    if BROKEN_PREFIX in result.reason or failed_in_a_row >= svc.cfg.budget.max_failed_rounds:
        return (
            result.reason
            if failed_in_a_row < 2
            else f"{failed_in_a_row} failed rounds in a row: {result.reason}"
        )
    return None


@contextmanager
def _watched(
    ws: Workspace, svc: Services, progress: RunProgress | None, deadline: float | None
) -> Iterator[stop.StopWatch]:
    """The run's observers of task runs: the STOP file and the deadline, and the live progress."""
    watch = stop.StopWatch(ws.root, deadline)
    watchers: list[RunObserver] = [watch]
    if progress is not None:
        progress.bind(svc.gateway.total, svc.state_dir / "optimizer")
        watchers.append(progress)
    svc.runner.observers.extend(watchers)
    try:
        yield watch
    finally:
        for w in watchers:
            svc.runner.observers.remove(w)
        if progress is not None:
            progress.unbind()


def run_settings(cfg: Config) -> dict[str, Any]:
    """The settings of a run the report's header shows (``-c`` included): mode, template, the
    train batch and the gate's epochs."""
    return {
        "mode": cfg.mode,
        "template": cfg.template,
        "batch_size": cfg.rollout.batch_size,
        "epochs": cfg.gate.epochs,
    }


def run_parts(ws: Workspace, svc: Services) -> dict[str, str]:
    """The parts a run uses, by the names users set them with: sandbox (auto resolved), executor,
    target and optimizer backend."""
    cfg = ws.cfg
    sandbox = type(svc.sandbox).__name__.removesuffix("Sandbox").lower() or cfg.rollout.sandbox
    executor: str = cfg.rollout.executor
    if executor == "ray":
        executor += f" ({cfg.ray.address or os.environ.get('RAY_ADDRESS') or 'a local one-node cluster'})"
    return {
        "sandbox": sandbox,
        "executor": executor,
        "target": f"{cfg.model.provider}:{cfg.model.target}",
        "optimizer": cfg.optimizer.label + (" (a scripted model)" if _scripted_optimizer(cfg) else ""),
    }


def _scripted_optimizer(cfg: Config) -> bool:
    """Whether the optimizer's calls are answered by the scripted model: its backend's name (say
    anthropic) would otherwise read as that API being called."""
    return cfg.optimizer.backend not in ("manual", "command") and cfg.optimizer_provider == "scripted"
