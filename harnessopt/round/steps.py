"""The optimization round, one function a step.

rollout -> stage -> propose -> check -> smoke -> validate -> gate -> record. ``_steps`` reads as
the algorithm: each step returns what it produced, and ``_steps`` passes those values on and keeps
them in a ``Trail`` so that a round ending early (or failing) is still recorded with what it had.
The steps up to the candidate are here; the candidate against the incumbent (smoke, validate,
gate, confirm) is ``round.evaluate``; writing the outcome is ``round.record``; a run of rounds is
``round.driver``. Every outcome, a rejected, no-op or failed round included, is recorded data;
``main`` only moves in ``record`` through one atomic update-ref (``ledger.store.record_accepted``), with
Ctrl-C deferred for those milliseconds.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harnessopt.errors import HarnessoptError, UserError
from harnessopt.gate.confirmation import split_val
from harnessopt.ledger import vcs
from harnessopt.ledger.store import CheckoutUnfinished
from harnessopt.protocols import Announce, Task, TaskResult
from harnessopt.rollout.phase_stats import RoundRuns
from harnessopt.rollout.runner import Candidate
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.round import datalike, leakage, memorised, stop, tamper
from harnessopt.round.context import Ending, RoundContext, RoundResult, Trail
from harnessopt.round.evaluate import (
    IncumbentChanged,
    confirm_accepted,
    confirm_banked,
    final_ending,
    gate,
    incumbent_outcomes,
    looks_that_fit,
    probe,
    probe_jobs,
    smoke,
    validate,
)
from harnessopt.round.record import record
from harnessopt.round.round0 import incumbent_broken
from harnessopt.round.services import Services
from harnessopt.search import budget
from harnessopt.search import steps as search
from harnessopt.search.explore import Head, carried_head, drop_head, explore
from harnessopt.search.state import verdict_text
from harnessopt.util import interrupts
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace


def run_round(ws: Workspace, svc: Services, k: int, say: Announce) -> RoundResult:
    rc = start_round(ws, svc, k)
    svc.spend.begin(k)  # what it spends is kept in .harnessopt/spend-live.json meanwhile (a SIGKILL)
    trail = Trail(runs=RoundRuns())
    svc.runner.observers.append(trail.runs)
    try:
        with _view_dir(k) as view:
            return _steps(ws, svc, rc, trail, view, say)
    except (UserError, KeyboardInterrupt, CheckoutUnfinished):  # main holds the round: not failed
        raise
    except stop.StopRequested as why:  # the STOP file or the run's deadline, at a phase boundary
        return record(ws, svc, rc, trail, ("failed", str(why)), say)
    except Exception as e:  # an infrastructure failure is a recorded outcome, not a traceback
        ws.journal.write(k, "error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        # our own errors are written for the user; another's class name says what it is
        said = str(e) if isinstance(e, HarnessoptError) else f"{type(e).__name__}: {e}"
        return record(ws, svc, rc, trail, ("failed", said[:500]), say)
    finally:  # the optimizer's token dies with its round: nothing it left running can spend later
        svc.runner.drop_prefetched(wait=False)  # runs started ahead for a step that never came
        svc.gateway.release_round("optimizer", k)
        svc.write_spend(ws.journal, k)  # also when interrupted: `status` shows what the round cost
        svc.runner.observers.remove(trail.runs)


def _steps(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, view: Path, say: Announce
) -> RoundResult:
    sealed = tamper.seal_run(ws.root, svc)  # scorer, tasks, locked settings: checked before record
    head = carried_head(ws, rc, say) if svc.cfg.explore_steps else None  # a chain to go on with
    t.train = rollout_train(ws, svc, rc, say, head)  # 1
    if head is not None and incumbent_broken(t.train):
        drop_head(ws, rc.k, "most of its runs on the round's train batch crashed", say)
        head, t.train = None, rollout_train(ws, svc, rc, say)
    if broken := incumbent_broken(t.train):  # nothing to learn from: spend nothing on the optimizer
        return record(ws, svc, rc, t, ("failed", broken), say)
    stage(svc, rc, t.train, head)  # 2
    svc.runner.prefetch(
        rc.incumbent, probe_jobs(svc, rc), rc.k, phase="probe"
    )  # made while the optimizer works
    if steps := svc.cfg.explore_steps:  # 3, 4 chained: each step on the last that beat its base
        size, split = svc.cfg.rollout.batch_size + svc.cfg.search.screening_only, ws.tasks("train")
        batch_of = lambda j: train_batch(split, (rc.k - 1) * steps + j, size)  # noqa: E731  (+ screening-only)
        t.search = explore(ws, svc, rc, t.train, view, say, batch_of, head)
    else:
        t.search = search.propose_all(ws, svc, rc, t.train, view, say)  # 3, 4: one view per candidate
        search.screen_all(ws, svc, rc, t.train, t.search, say)  # several: the best on train goes on
    chosen, ending = t.search.outcome()
    t.proposal, t.snapshot, t.copied, t.candidate = chosen.parts()
    if stop.requested(ws.root):  # a boundary: STOP came while proposing (a person's turn ends at it)
        raise stop.StopRequested(stop.REASON)
    if t.candidate is None or ending is not None:
        return record(ws, svc, rc, t, ending or ("failed", "no candidate"), say)
    verdict: Ending = ("failed", "no screened winner")  # outcome() found one: never left so
    n = len(t.search.winners)
    # the screened winner(s), best first: the first accepted wins
    for i, winner in enumerate(t.search.in_turn(), 1):
        t.proposal, t.snapshot, t.copied, t.candidate = winner.parts()
        if n > 1:  # the smoke and validation lines that follow are this candidate's
            say(
                f"round {rc.k}: candidate {winner.name}, screened winner {i} of {n} (each tested at alpha/{n})"
            )
        verdict = evaluate(ws, search.alpha_share(svc, t.search), rc, t, say)  # 5-8
        winner.verdict = verdict  # each winner's, in its candidate record: the round's is the last's
        alpha = t.decision.details.get("alpha") if t.decision else None
        # 0.05, not 0.050000000000000044
        winner.gate_alpha = round(alpha, 12) if isinstance(alpha, float) else alpha
        if verdict[0] != "rejected":
            break
        if i < n:  # the round's own line says only the last winner's
            say(f"round {rc.k}: candidate {winner.name}: {verdict_text(*verdict)}")
    interrupts.check()
    if void := tamper.void_reason(sealed, ws.root, svc):  # a scorer or task changed: no evidence
        return record(ws, svc, rc, t, ("failed", void), say)
    return record(ws, svc, rc, t, verdict, say)


def evaluate(ws: Workspace, svc: Services, rc: RoundContext, t: Trail, say: Announce) -> Ending:
    """Steps 5-8 for ``t.candidate``: leakage check, smoke, validation, gate, confirmation."""
    assert t.candidate is not None
    t.cand_val, t.decision, t.confirmation, t.new_bank, t.judged = [], None, None, {}, False  # afresh
    tasks, cfg = [*ws.tasks("train"), *rc.val, *rc.held_out], svc.cfg.checks
    t.checks["leakage"], leak = leakage.screen(
        rc.k, tasks, cfg, rc.incumbent.root, t.candidate.root, EDITABLE_PATHS, say
    )
    if leak:
        return ("rejected", leak)
    t.checks.update(
        datalike.flag(rc.k, rc.incumbent.root, t.candidate.root, EDITABLE_PATHS, cfg.datalike, say)
    )
    looks = looks_that_fit(ws, svc, rc, say)  # before the bank is topped up: it counts what that costs
    bank = budget.one_look_bank(svc.cfg.gate) if looks == 1 else None  # one look: a smaller bank will do
    try:
        incumbent_val, floor = incumbent_outcomes(ws, svc, rc, say, bank)  # cached after the first winner
    except IncumbentChanged as e:  # a bar lowered by the incumbent's own code judges nothing
        return ("failed", str(e))
    t.incumbent_val = incumbent_val
    t.noise_floor = t.noise_floor or floor
    t.probe = t.probe or probe(svc, rc)  # made ahead: counted here
    t.cand_val, crash = smoke(ws, svc, rc, t.candidate, incumbent_val, say, t.probe)  # 5
    if crash is not None:
        return ("rejected", crash)
    t.cand_val = validate(ws, svc, rc, t.candidate, t.cand_val, incumbent_val, say)  # 6
    t.decision = gate(ws, svc, rc, t.candidate, t.cand_val, incumbent_val, one_look=looks == 1)  # 7
    if memo := memorised.screen(ws, svc, rc, t, incumbent_val, say):  # a gain on inputs it never saw
        return ("rejected", memo)
    if svc.gate.bank_first_look and svc.cfg.gate.confirm == "val":  # 8: the winner's bank, fresh
        t.confirmation, t.new_bank = confirm_banked(ws, svc, rc, t.candidate, t.decision, incumbent_val, say)
    else:
        t.confirmation = confirm_accepted(ws, svc, rc, t.candidate, t.decision, say)  # 8
    t.judged = True  # the ending is the gate's and its confirmation's, not a check's
    return final_ending(t.decision, t.confirmation, svc.cfg.gate.confirm_moves_main)


def start_round(ws: Workspace, svc: Services, k: int) -> RoundContext:
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} changed during the run; commit or stash your edits, then run again")
    if where := ws.off_main():  # its rounds would start from that branch and could never be applied
        raise UserError(
            f"{ws.root}: HEAD moved during the run ({where}); the run stops before round {k}: "
            f"{vcs.git_in(ws.root)} checkout main, then run again"
        )
    scratch = svc.scratch / f"round-{k}"
    # The rounds before this one (and an interrupted run of this one): git and the journal hold what
    # they found, so their task outputs and candidate copies go; only the last round's stay on disk,
    # for a look at the raw outputs, and a long run's disk use is one round's.
    for old in svc.scratch.glob("round-*"):
        shutil.rmtree(old, ignore_errors=True)
    (scratch / "incumbent").mkdir(parents=True)
    parent = vcs.head_sha(ws.repo)
    for p in EDITABLE_PATHS:  # a private copy: edits to the workspace mid-round cannot leak in
        shutil.copytree(ws.root / p, scratch / "incumbent" / p, ignore=shutil.ignore_patterns("__pycache__"))
    ws.journal.write(k, "start", parent=parent)
    val, held_out = split_val(ws.tasks("val"), svc.cfg.gate)
    return RoundContext(
        k, scratch, Candidate(scratch / "incumbent", "incumbent", parent), parent, val, held_out
    )


@contextmanager
def _view_dir(k: int) -> Iterator[Path]:
    """The optimizer's view, outside the workspace (a shell there finds no tasks/ up its tree),
    in a directory only we can enter (0700): the optimizer's container may set any mode in it."""
    private = Path(tempfile.mkdtemp(prefix=f"ho-view-r{k}-"))
    try:
        yield private / "view"
    finally:
        shutil.rmtree(private, ignore_errors=True)


def rollout_train(
    ws: Workspace, svc: Services, rc: RoundContext, say: Announce, head: Head | None = None
) -> list[TaskResult]:
    """The round's train batch, run by the incumbent (or by the kept explore head the round starts from)."""
    batch = train_batch(ws.tasks("train"), rc.k, svc.cfg.rollout.batch_size)
    who, named = (f"the kept head {head.name}", {"candidate": "head"}) if head else ("the incumbent", {})
    say(f"round {rc.k}: rollout of {who} on {len(batch)} train tasks")
    train = svc.runner.run(head.candidate if head else rc.incumbent, batch, rc.k, phase="rollout")
    passed = sum(r.passed for r in train)
    ws.journal.write(rc.k, "rollout", tasks=[r.task_id for r in train], passed=passed, **named)
    return train


def train_batch(train: Sequence[Task], k: int, size: int) -> list[Task]:
    """Round k reads the k-th window of a fixed shuffle of the train split (wrapping around)."""
    order = sorted(train, key=lambda t: t.id)
    random.Random(0).shuffle(order)
    if not order:
        raise UserError(
            "the workspace has no train tasks; re-create it with a --split that gives train tasks"
        )
    size = min(size, len(order))
    start = ((k - 1) * size) % len(order)
    return [order[(start + i) % len(order)] for i in range(size)]


def stage(svc: Services, rc: RoundContext, train: list[TaskResult], head: Head | None = None) -> None:
    """One flat Markdown file per train trajectory, beside the incumbent copy the view is made from
    (and the kept head's, when the round starts there: its runs, and the round's record, read them)."""
    target, ran = svc.cfg.model.target, head.candidate if head else rc.incumbent
    for root in {rc.incumbent.root, ran.root}:
        write_trajectories(root / "trajectories", train, harness_commit=ran.commit, target_model=target)
