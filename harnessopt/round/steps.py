"""The optimization round, one function a step (DESIGN.md "What it does").

rollout -> stage -> propose -> check -> smoke -> validate -> gate -> record. Each step returns
what it produced; ``_steps`` passes those values on and keeps them in a ``Trail`` so that a
round ending early (or failing) is still recorded with what it had. Every outcome, a rejected,
no-op or failed round included, is recorded data; ``main`` only moves in ``record`` through one
atomic update-ref (``ledger.record_accepted``), with Ctrl-C deferred for those milliseconds.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.gate.bank import IncumbentBank, first_look
from harnessopt.gate.noise_floor import NoiseFloorStore, measure
from harnessopt.gate.noise_floor import lines as noise_lines
from harnessopt.gate.policy import futile_decision, make_gate
from harnessopt.gate.stats import mean, run_alpha_for, task_means
from harnessopt.gate.verdicts import confirmation_record, smoke_verdict, spent_decision, split_val
from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.store import OptimizerRecord, RoleUsage, RoundManifest, Status
from harnessopt.optimizer.brief import render_brief, render_history
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot, build_view, copy_back
from harnessopt.protocols import GateDecision, GatePolicy, Outcomes, Proposal, Task, TaskResult
from harnessopt.reporting.progress import RunProgress, round_lines
from harnessopt.reporting.projection import project
from harnessopt.rollout.phase_stats import PROBE_EPOCH, RoundRuns
from harnessopt.rollout.runner import Candidate, RunObserver, outcomes
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.rollout.val_cache import ValCache, digest, environment_key, key_parts
from harnessopt.round import leakage, stop, tamper
from harnessopt.round.checks import import_check, static_check
from harnessopt.round.round0 import BROKEN_PREFIX, Decide, incumbent_broken, ready
from harnessopt.round.services import Services, open_services
from harnessopt.util import interrupts
from harnessopt.util.text import visible
from harnessopt.workspace.core import EDITABLE_PATHS, RECORD_PATHS, Workspace

Announce = Callable[[str], None]
SMOKE_RERUN_EPOCH = 10**6  # the rerun of a crashed smoke task (after the gate's reruns' epochs)
FUTILITY_EVERY = 5  # validation checks for futility every this many tasks (or `concurrency`)
CONFIRM_EPOCH = 2 * 10**6  # the confirmation runs of an accepted round
Ending = tuple[Status, str]  # (status, reason) of a round that ends before the gate
SUMMARY_CAP = 20_000  # characters of the optimizer's summary kept in the commit message


@dataclass
class RoundResult:
    """What one round decided and where git keeps it."""

    round: int
    status: Status
    reason: str
    commit: str
    manifest: RoundManifest


@dataclass(frozen=True)
class RoundContext:
    """What every step of round k reads: fixed when the round starts."""

    k: int
    scratch: Path
    incumbent: Candidate
    parent: str
    val: list[Task]  # loaded once per round
    held_out: list[Task] = field(default_factory=list)  # gate.confirm holdout: val tasks the gate never sees


@dataclass
class Trail:
    """What the round produced so far (written by ``_steps`` only, read by ``record``)."""

    train: list[TaskResult] = field(default_factory=list)
    proposal: Proposal | None = None
    snapshot: ViewSnapshot | None = None
    copied: CopyBackResult | None = None
    candidate: Candidate | None = None
    cand_val: list[TaskResult] = field(default_factory=list)
    decision: GateDecision | None = None
    noise_floor: dict[str, Any] | None = None  # the A/A test, when this round measured one
    confirmation: dict[str, Any] | None = None  # an accepted candidate on runs that did not select it
    runs: RoundRuns = field(default_factory=lambda: RoundRuns(0))  # every run of the round, by phase
    checks: dict[str, Any] = field(default_factory=dict)  # what the leakage check found (leakage.screen)
    probe: list[TaskResult] = field(default_factory=list)  # the incumbent's smoke rerun made ahead
    started: float = field(default_factory=time.monotonic)


def run_round(ws: Workspace, svc: Services, k: int, say: Announce) -> RoundResult:
    rc = start_round(ws, svc, k)
    trail = Trail(runs=RoundRuns(svc.cfg.gate.smoke))
    svc.runner.observers.append(trail.runs)
    try:
        with _view_dir(k) as view:
            return _steps(ws, svc, rc, trail, view, say)
    except (UserError, KeyboardInterrupt):
        raise
    except stop.StopRequested as why:  # the STOP file or the run's deadline, at a phase boundary
        return record(ws, svc, rc, trail, ("failed", str(why)), say)
    except Exception as e:  # an infrastructure failure is a recorded outcome, not a traceback
        ws.journal.write(k, "error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        return record(ws, svc, rc, trail, ("failed", f"{type(e).__name__}: {e}"[:500]), say)
    finally:  # the optimizer's token dies with its round: nothing it left running can spend later
        svc.runner.drop_prefetched(wait=False)  # runs started ahead for a step that never came
        svc.gateway.release_round("optimizer", k)
        spent = svc.usage_of_round(k)  # also when interrupted: `status` shows what the round cost
        ws.journal.write(k, "spend", cost_usd=spent.cost_usd, tokens=spent.tokens)
        svc.runner.observers.remove(trail.runs)


def _steps(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, view: Path, say: Announce
) -> RoundResult:
    sealed = tamper.seal_run(ws.root, svc)  # scorer, tasks, locked settings: checked before record
    t.train = rollout_train(ws, svc, rc, say)  # 1
    if broken := incumbent_broken(t.train):  # nothing to learn from: spend nothing on the optimizer
        return record(ws, svc, rc, t, ("failed", broken), say)
    stage(svc, rc, t.train)  # 2
    svc.runner.prefetch(rc.incumbent, probe_jobs(svc, rc), rc.k)  # made while the optimizer works
    t.proposal, t.snapshot = propose(ws, svc, rc, view, len(t.train), say)  # 3
    interrupts.check()
    t.copied, t.candidate, ending = check(ws, svc, rc, t.proposal, t.snapshot)  # 4
    if t.candidate is None or ending is not None:
        return record(ws, svc, rc, t, ending or ("failed", "no candidate"), say)
    tasks, cfg = [*ws.tasks("train"), *rc.val, *rc.held_out], svc.cfg.checks
    t.checks["leakage"], leak = leakage.screen(
        rc.k, tasks, cfg, rc.incumbent.root, t.candidate.root, EDITABLE_PATHS, say
    )
    if leak:
        return record(ws, svc, rc, t, ("rejected", leak), say)
    incumbent_val, t.noise_floor = incumbent_outcomes(ws, svc, rc, say)
    t.probe = probe(svc, rc)  # made ahead: counted here
    t.cand_val, crash = smoke(ws, svc, rc, t.candidate, incumbent_val, say, t.probe)  # 5
    if crash is not None:
        return record(ws, svc, rc, t, ("rejected", crash), say)
    t.cand_val = validate(ws, svc, rc, t.candidate, t.cand_val, incumbent_val, say)  # 6
    t.decision = gate(ws, svc, rc, t.candidate, t.cand_val, incumbent_val)  # 7
    t.confirmation = confirm_accepted(ws, svc, rc, t.candidate, t.decision, say)  # 8
    interrupts.check()
    if void := tamper.void_reason(sealed, ws.root, svc):  # a scorer or task changed: no evidence
        return record(ws, svc, rc, t, ("failed", void), say)
    return record(ws, svc, rc, t, ("accepted" if t.decision.accept else "rejected", t.decision.reason), say)


def start_round(ws: Workspace, svc: Services, k: int) -> RoundContext:
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} changed during the run; commit or stash your edits, then run again")
    scratch = svc.scratch / f"round-{k}"
    shutil.rmtree(scratch, ignore_errors=True)
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


def rollout_train(ws: Workspace, svc: Services, rc: RoundContext, say: Announce) -> list[TaskResult]:
    batch = train_batch(ws.tasks("train"), rc.k, svc.cfg.rollout.batch_size)
    say(f"round {rc.k}: rollout of the incumbent on {len(batch)} train tasks")
    train = svc.runner.run(rc.incumbent, batch, rc.k)
    ws.journal.write(rc.k, "rollout", tasks=[r.task_id for r in train], passed=sum(r.passed for r in train))
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


def stage(svc: Services, rc: RoundContext, train: list[TaskResult]) -> None:
    """One flat Markdown file per train trajectory, beside the incumbent copy the view is made from."""
    target = svc.cfg.model.target
    write_trajectories(
        rc.incumbent.root / "trajectories", train, harness_commit=rc.parent, target_model=target
    )


def propose(
    ws: Workspace, svc: Services, rc: RoundContext, view: Path, n_train: int, say: Announce
) -> tuple[Proposal, ViewSnapshot | None]:
    """The optimizer's proposal (edits are in the view); None for the snapshot when it was kept
    from an interrupted run of this round, whose candidate ``check`` then restores."""
    if (saved := svc.store.load_candidate(rc.k, rc.parent)) is not None:
        say(f"round {rc.k}: reusing the optimizer's proposal of the interrupted run (no optimizer call)")
        return saved[0], None
    history = render_history(ledger.past_rounds(ws.repo))
    cfg = svc.cfg
    plan = proposals.plan_to_implement(ws.repo) if cfg.mode in ("harness", "joint") else None
    brief = render_brief(
        rc.k, cfg.mode, cfg.allowed_globs(), cfg.optimizer, n_trajectories=n_train, plan_md=plan
    )
    snapshot = build_view(rc.incumbent.root, view, history_md=history, brief_md=brief)
    say(f"round {rc.k}: optimizer '{cfg.optimizer.backend}' is reading {n_train} trajectories")
    ws.journal.write(rc.k, "propose", view=str(view))
    proposal = svc.propose(view, brief, rc.k)
    # Untrusted text: controls made visible before it reaches git, the journal or a terminal.
    proposal.summary = visible(proposal.summary, SUMMARY_CAP).strip() or "(no summary)"
    ws.journal.write(
        rc.k, "proposed", summary=proposal.summary[:500], turns=proposal.turns, stopped_by=proposal.stopped_by
    )
    return proposal, snapshot


def check(
    ws: Workspace, svc: Services, rc: RoundContext, proposal: Proposal, snapshot: ViewSnapshot | None
) -> tuple[CopyBackResult, Candidate | None, Ending | None]:
    """Copy back only whitelisted edits into a candidate; an ``Ending`` when the round ends here."""
    cand_root = rc.scratch / "candidate"
    shutil.copytree(rc.incumbent.root, cand_root)
    if snapshot is None:
        copied = _restore_candidate(svc, rc, cand_root)
    else:
        cfg = svc.cfg
        copied = copy_back(
            snapshot.view, cand_root, cfg.allowed_globs(), snapshot=snapshot, read_only=cfg.read_only_globs()
        )
        svc.store.save_candidate(rc.k, rc.parent, proposal, dataclasses.asdict(copied), cand_root)
    ws.journal.write(rc.k, "check", changed=copied.changed, violations=copied.violations)
    if proposal.stopped_by == "error":
        return copied, None, ("failed", f"optimizer error: {proposal.summary.splitlines()[0][:300]}")
    if not copied.changed:
        why = "no whitelisted edit" + (f" ({len(copied.violations)} discarded)" if copied.violations else "")
        return copied, None, ("noop", why)
    candidate = Candidate(cand_root, "candidate", f"candidate-of-{rc.parent[:12]}")
    problem = static_check(cand_root)
    if problem is None and any(p.startswith("harness/") for p in copied.changed):  # before any rollout
        problem = import_check(svc.sandbox, cand_root, svc.cfg)
    return copied, candidate, ("rejected", problem) if problem else None


def _restore_candidate(svc: Services, rc: RoundContext, cand_root: Path) -> CopyBackResult:
    saved = svc.store.load_candidate(rc.k, rc.parent)
    assert saved is not None, "propose() found it a moment ago"
    _, copied, tree = saved
    for part in EDITABLE_PATHS:
        shutil.rmtree(cand_root / part, ignore_errors=True)
        if (tree / part).exists():
            shutil.copytree(tree / part, cand_root / part, symlinks=True)
    return CopyBackResult(**copied)


def incumbent_outcomes(
    ws: Workspace, svc: Services, rc: RoundContext, say: Announce
) -> tuple[Outcomes, dict[str, Any] | None]:
    """The incumbent's val outcomes: cached under everything that changes a rollout or a score
    (``valcache.key_parts``) unless re-running is asked. The first measurement under an environment
    (round 1, or after a scorer, task, model, sandbox or limit change) runs it twice: an A/A test
    whose noise floor (``noisefloor.measure``) is printed, stored and returned."""
    cache, floors = ValCache(svc.state_dir), NoiseFloorStore(svc.state_dir)
    parts = key_parts(ws.repo, rc.parent, svc.cfg, svc.sandbox)
    g = svc.cfg.gate
    epochs, banked = g.epochs, g.incumbent_epochs or g.epochs
    cached = None if g.rerun_incumbent else cache.get(digest(parts))
    short = [t for t in rc.val if len((cached or {}).get(t.id, ())) < banked]
    if cached is not None and not short:
        return cached, None
    aa = cached is None and floors.get(environment_key(parts)) is None
    twice = ", twice (an A/A test: the noise floor)" if aa and banked < 2 * epochs else ""
    have = {t.id: len((cached or {}).get(t.id, ())) for t in short}
    say(
        f"round {rc.k}: measuring the incumbent on {len(short)} val tasks x {banked - min(have.values())} "
        f"epoch(s){twice}" + (f" ({epochs} for the first look, the rest banked)" if banked > epochs else "")
    )
    got = {t: list(runs) for t, runs in (cached or {}).items()}
    for n in sorted(set(have.values())):  # a top-up runs only the epochs a task lacks
        tasks = [t for t in short if have[t.id] == n]
        for t, runs in outcomes(svc.runner.run(rc.incumbent, tasks, rc.k, epochs=range(n, banked))).items():
            got.setdefault(t, []).extend(runs)
    cache.put(digest(parts), got)
    ws.journal.write(rc.k, "incumbent_val", n=len(got), score=_mean_score(got))
    if not aa:
        return got, None
    if banked >= 2 * epochs:  # the A/A test on the banked runs: no extra run
        again = {t: runs[epochs : 2 * epochs] for t, runs in got.items()}
    else:
        again = outcomes(svc.runner.run(rc.incumbent, rc.val, rc.k, epochs=range(epochs, 2 * epochs)))
    nf = {**measure(first_look(got, epochs), again, svc.cfg.gate), "measured_round": rc.k}
    floors.put(environment_key(parts), nf)
    for line in noise_lines(nf):
        say(f"round {rc.k}: {line}")
    ws.journal.write(rc.k, "noise_floor", **nf)
    return got, nf


def probe_jobs(svc: Services, rc: RoundContext) -> list[tuple[Task, int]]:
    """The incumbent's rerun of the first smoke task, made while the optimizer works: when a
    candidate crashes there twice, the smoke test has the incumbent's side at once (one run a round)."""
    return [(t, PROBE_EPOCH) for t in smoke_tasks(rc.val, svc.cfg.gate.smoke)[:1]]


def probe(svc: Services, rc: RoundContext) -> list[TaskResult]:
    """The probe's result (``probe_jobs``): its own phase of the round (``roundstats.phase_of``)."""
    jobs = probe_jobs(svc, rc)
    return svc.runner.run(rc.incumbent, [t for t, _ in jobs], rc.k, epochs=[PROBE_EPOCH]) if jobs else []


def smoke(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    cand: Candidate,
    inc: Outcomes,
    say: Announce,
    probe: Sequence[TaskResult] = (),
) -> tuple[list[TaskResult], str | None]:
    """Run the candidate on the first val tasks. A crashed task is rerun once, and where it crashed
    again on the incumbent too (``incumbent_reruns``); only a crash that reproduces and that the
    incumbent does not have rejects (``verdicts.smoke_verdict``).

    Validation's first runs start in the slots the smoke test leaves free (``Runner.prefetch``);
    a rejection drops them."""
    tasks = smoke_tasks(rc.val, svc.cfg.gate.smoke)
    if not tasks:
        return [], None
    say(f"round {rc.k}: smoke test of the candidate on {len(tasks)} val tasks")
    ahead = _SmokeAhead(svc, rc, cand, validation_jobs(svc, rc, tasks)[: svc.cfg.rollout.concurrency])
    svc.runner.observers.append(ahead)
    try:
        results = svc.runner.run(cand, tasks, rc.k)
    finally:
        svc.runner.observers.remove(ahead)
    crashed = [t for t in tasks if any(r.crashed for r in results if r.task_id == t.id)]
    again: tuple[Outcomes, Outcomes] = ({}, {})
    if crashed:  # a flake must not reject: the same tasks once more, on both sides
        say(f"round {rc.k}: smoke test: {len(crashed)} crashed; rerunning them once on both sides")
        cand_again = outcomes(svc.runner.run(cand, crashed, rc.k, epochs=[SMOKE_RERUN_EPOCH]))
        twice = [t for t in crashed if any(o.crashed for o in cand_again.get(t.id, ()))]
        again = (cand_again, incumbent_reruns(svc, rc, twice, probe))
    v = smoke_verdict(outcomes(results), again[0], again[1], inc)
    ws.journal.write(
        rc.k,
        "smoke",
        n=len(tasks),
        crashed=v.crashed,
        flaky=v.flaky,
        shared=v.shared,
        reproduced=v.reproduced,
        incumbent_reruns=sorted(again[1]),
    )
    if not v.reject:
        return results, None
    ws.journal.write(rc.k, "prefetch_dropped", runs=len(svc.runner.drop_prefetched()))
    kinds = {r.task_id: r.error_class for r in results if r.crashed}
    named = ", ".join(f"{t} ({kinds.get(t)})" for t in v.reproduced[:5])
    return results, (
        f"smoke test: {len(v.reproduced)}/{len(tasks)} crashed twice where the incumbent did not: {named}"
    )


class _SmokeAhead:
    """Runs the smoke test starts ahead as its results come (a ``RunObserver``): a crashed task's
    rerun at once, and validation's first runs once a task ran clean, in the slots the smoke test
    leaves free. A candidate that crashes everywhere starts no validation run."""

    def __init__(self, svc: Services, rc: RoundContext, cand: Candidate, first: list[tuple[Task, int]]):
        self.svc, self.rc, self.cand, self.first = svc, rc, cand, first
        self.by_id = {t.id: t for t in rc.val}

    def started(self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int]) -> None:
        return None

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        if label != self.cand.label or result.epoch != 0:
            return
        if result.crashed:
            self.svc.runner.prefetch(self.cand, [(self.by_id[result.task_id], SMOKE_RERUN_EPOCH)], self.rc.k)
        elif self.first:
            self.svc.runner.prefetch(self.cand, self.first, self.rc.k)
            self.first = []


def incumbent_reruns(
    svc: Services, rc: RoundContext, twice: Sequence[Task], probe: Sequence[TaskResult]
) -> Outcomes:
    """The incumbent's side of the smoke reruns, for the tasks the candidate crashed on twice. The
    probe counts as its rerun of that task; once one of them runs clean the rejection is settled
    (``SmokeVerdict.reject`` needs one reproduced crash), so no other is run."""
    ids = {t.id for t in twice}
    got = {t: o for t, o in outcomes(probe).items() if t in ids}
    if any(not o.crashed for runs in got.values() for o in runs):
        return got
    rest = [t for t in twice if t.id not in got]
    return (
        {**got, **outcomes(svc.runner.run(rc.incumbent, rest, rc.k, epochs=[SMOKE_RERUN_EPOCH]))}
        if rest
        else got
    )


def smoke_tasks(val: Sequence[Task], n: int) -> list[Task]:
    return sorted(val, key=lambda t: t.id)[:n]


def validate(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    cand: Candidate,
    smoked: list[TaskResult],
    inc: Outcomes,
    say: Announce,
) -> list[TaskResult]:
    """The rest of val (and the remaining epochs of the smoke tasks); smoke results are reused.

    In chunks, each checked first: validation stops as soon as even all remaining tasks in the
    candidate's favour could not make it accept (the gate's ``futile``; docs/gate.md). The next
    chunk's first runs start in the slots a chunk's tail leaves free, so no slot waits for the
    check; a stop drops them (at most ``concurrency`` runs)."""
    epochs, conc = svc.cfg.gate.epochs, svc.cfg.rollout.concurrency
    done = {r.task_id for r in smoked}
    again = [t for t in rc.val if t.id in done]
    rest = [t for t in rc.val if t.id not in done]
    say(f"round {rc.k}: validating the candidate on {len(rest)} more val tasks x {epochs} epoch(s)")
    plan, used = validation_jobs(svc, rc, again), 0
    results = list(smoked)
    if epochs > 1 and again:
        used += len(again) * (epochs - 1)
        svc.runner.prefetch(cand, plan[used : used + conc], rc.k)
        results += svc.runner.run(cand, again, rc.k, epochs=range(1, epochs))
    futile = getattr(svc.gate, "futile", None)
    chunk = _chunk(svc, len(rest))
    first = first_look(inc, epochs)
    for i in range(0, len(rest), chunk):
        if futile and futile(outcomes(results), first, [t.id for t in rest[i:]], svc.cfg.gate.confirm_flips):
            say(f"round {rc.k}: validation stopped for futility; {len(rest) - i} val tasks not run")
            ws.journal.write(rc.k, "prefetch_dropped", runs=len(svc.runner.drop_prefetched()))
            break
        used += len(rest[i : i + chunk]) * epochs
        svc.runner.prefetch(cand, plan[used : used + conc], rc.k)
        results += svc.runner.run(cand, rest[i : i + chunk], rc.k, epochs=range(epochs))
    ws.journal.write(rc.k, "validate", n=len(results), score=_mean_score(outcomes(results)))
    return results


def validation_jobs(svc: Services, rc: RoundContext, smoked: Sequence[Task]) -> list[tuple[Task, int]]:
    """Validation's runs in the order ``validate`` asks for them: the smoke tasks' other epochs,
    then the rest of val chunk by chunk (what ``Runner.prefetch`` may start ahead)."""
    epochs = svc.cfg.gate.epochs
    ids = {t.id for t in smoked}
    rest = [t for t in rc.val if t.id not in ids]
    chunk = _chunk(svc, len(rest))
    jobs = [(t, e) for e in range(1, epochs) for t in smoked]
    for i in range(0, len(rest), chunk):
        jobs += [(t, e) for e in range(epochs) for t in rest[i : i + chunk]]
    return jobs


def _chunk(svc: Services, n_rest: int) -> int:
    """Validation's chunk: a futility check every ``FUTILITY_EVERY`` tasks (at least ``concurrency``)."""
    if getattr(svc.gate, "futile", None) is None:
        return max(1, n_rest)
    return max(FUTILITY_EVERY, svc.cfg.rollout.concurrency)


def gate(
    ws: Workspace, svc: Services, rc: RoundContext, cand: Candidate, cand_val: list[TaskResult], inc: Outcomes
) -> GateDecision:
    by_id = {t.id: t for t in rc.val}
    rerun_epoch = iter(range(1000, 10**6))
    bank = IncumbentBank(inc, svc.cfg.gate.epochs)  # the incumbent's runs past the first look
    inc = bank.first

    def confirm(ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        epoch = next(rerun_epoch)
        again = svc.runner.run(cand, [by_id[i] for i in ids], rc.k, epochs=[epoch])
        base = bank.draw(
            ids,
            lambda miss: outcomes(
                svc.runner.run(rc.incumbent, [by_id[i] for i in miss], rc.k, epochs=[epoch])
            ),
        )
        return outcomes(again), base

    cand_out = outcomes(cand_val)
    left = [t.id for t in rc.val if t.id not in cand_out]  # validation stopped for futility
    futile = getattr(svc.gate, "futile", None)
    if left and futile and futile(cand_out, inc, left, svc.cfg.gate.confirm_flips):
        d = futile_decision(cand_out, inc, left, svc.cfg.gate.epochs)
    elif (policy := _round_policy(ws, svc)) is None:
        d = spent_decision(svc.cfg.gate)
    else:
        d = policy.decide(cand_out, inc, confirm if svc.cfg.gate.confirm_flips else None)
    d.details.update(incumbent_banked_runs=bank.drawn)
    ws.journal.write(rc.k, "gate", accept=d.accept, reason=d.reason, delta=d.delta, dead_zone=d.dead_zone)
    return d


def _round_policy(ws: Workspace, svc: Services) -> GatePolicy | None:
    """The gate of this round: with ``gate.run_alpha`` its level is this decision's share of the
    run's budget (``stats.run_alpha_for``); None once that budget is spent."""
    g = svc.cfg.gate
    if g.run_alpha is None:
        return svc.gate
    decided = sum("alpha" in r.manifest.gate for r in ledger.past_rounds(ws.repo))
    alpha = min(1.0 - g.confidence, run_alpha_for(g.run_alpha, g.run_rounds, decided + 1))
    return make_gate(g.model_copy(update={"confidence": 1.0 - alpha})) if alpha > 0 else None


def confirm_accepted(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    cand: Candidate | None,
    d: GateDecision | None,
    say: Announce,
) -> dict[str, Any] | None:
    """After an accept, both sides again on runs that did not select the candidate: fresh runs on val
    (``gate.confirm: val``) or on the held-out val tasks (``holdout``). ``ho/best`` moves only when
    the gain they measure is positive (docs/gate.md, "Selection-corrected reporting")."""
    mode = svc.cfg.gate.confirm
    tasks = rc.held_out if mode == "holdout" else rc.val
    if cand is None or d is None or not d.accept or mode == "none" or not tasks:
        return None
    epochs = range(CONFIRM_EPOCH, CONFIRM_EPOCH + svc.cfg.gate.epochs)
    say(f"round {rc.k}: confirming on {len(tasks)} {mode} tasks, with runs that did not select it")
    svc.runner.prefetch(rc.incumbent, [(t, e) for e in epochs for t in tasks], rc.k)  # in free slots
    got = outcomes(svc.runner.run(cand, tasks, rc.k, epochs=epochs))
    base = outcomes(svc.runner.run(rc.incumbent, tasks, rc.k, epochs=epochs))
    rec = confirmation_record(got, base, mode)
    say(f"round {rc.k}: {rec['summary']}")
    ws.journal.write(rc.k, "confirm", **rec)
    return rec


def count_unclaimed(svc: Services, rc: RoundContext, t: Trail) -> None:
    """Runs started ahead that no step asked for (the probe of a round that ended before its smoke
    test) were spent all the same: the round's counts take them, by their own phase."""
    by_id = {task.id: task for task in [*rc.val, *rc.held_out]}
    for label, r in svc.runner.drop_prefetched():
        if (task := by_id.get(r.task_id)) is not None:
            t.runs.started(label, [task], rc.k, [r.epoch])
            t.runs.finished(label, r, 1, 1)


def record(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, ending: Ending, say: Announce
) -> RoundResult:
    """Accept: one atomic commit on main + tags. Otherwise: the candidate on a ref, main untouched."""
    status, reason = ending[0], visible(ending[1], 2000)
    count_unclaimed(svc, rc, t)
    m = manifest(svc, rc, t, status, reason)
    ws.journal.write(rc.k, "record", status=status, reason=reason)
    overlay = (t.candidate or rc.incumbent).root  # skill/, harness/ and this round's trajectories/
    if status == "accepted":
        new_best = ledger.is_new_best(ws.repo, m)
        paths = list(RECORD_PATHS[:3])
        if new_best:  # best_skill.md only moves with ho/best
            shutil.copy2(overlay / "skill" / "SKILL.md", overlay / "best_skill.md")
            paths.append("best_skill.md")
        sha = ledger.record_accepted(ws.repo, ws.journal, rc.parent, overlay, paths, m, new_best=new_best)
        cache = ValCache(svc.state_dir)
        cache.put(cache.key(ws.repo, sha, svc.cfg, svc.sandbox), outcomes(t.cand_val))
    else:
        paths = [p for p in RECORD_PATHS[:3] if (overlay / p).exists()]
        sha = ledger.record_other(ws.repo, rc.parent, overlay, paths, m)
    ws.journal.write(rc.k, "recorded", status=status, commit=sha)
    svc.store.clear(rc.k)  # git holds the round now
    if svc.store.reused:
        say(f"round {rc.k}: reused {svc.store.reused} finished rollout(s) of an interrupted run")
    say(f"round {rc.k}: {reason}" if reason.startswith(status) else f"round {rc.k}: {status}: {reason}")
    return RoundResult(rc.k, status, reason, sha, m)


def manifest(svc: Services, rc: RoundContext, t: Trail, status: Status, reason: str) -> RoundManifest:
    d, p, snap = t.decision, t.proposal, t.snapshot
    usage = svc.usage_of_round(rc.k)
    optimizer = None
    if p is not None:
        optimizer = OptimizerRecord(
            turns=p.turns,
            stopped_by=p.stopped_by,
            input_tokens=p.input_tokens,
            output_tokens=p.output_tokens,
            transcript=str(p.transcript_path) if p.transcript_path else None,
            view_skipped=snap.skipped if snap else [],
        )
    return RoundManifest(
        round=rc.k,
        status=status,
        reason=reason,
        summary=p.summary if p else "",
        parent=rc.parent,
        val_score=d.candidate_score if d else None,
        incumbent_score=d.incumbent_score if d else None,
        delta=d.delta if d else None,
        dead_zone=d.dead_zone if d else None,
        n=d.n if d else None,
        fixed=d.fixed if d else [],
        broken=d.broken if d else [],
        gate=d.details if d else {},
        train_passed=sum(r.passed for r in t.train),
        train_tasks=len(t.train),
        changed=t.copied.changed if t.copied else [],
        violations=t.copied.violations if t.copied else [],
        optimizer=optimizer,
        tokens={
            role: RoleUsage(**u, cost_usd=_role_cost(svc, rc.k, role)) for role, u in usage.tokens.items()
        },
        cost_usd=usage.cost_usd,
        notes=[*svc.gateway.notes, *svc.runner.notes],
        noise_floor=t.noise_floor,
        confirmation=t.confirmation,
        phases=t.runs.phases(),
        repeats=t.runs.repeats(),
        wall_s=round(time.monotonic() - t.started, 3),
        checks=t.checks,
    )


def _role_cost(svc: Services, k: int, role: str) -> float:
    u = svc.gateway.usage().get((role, k))
    return round(u.cost_usd, 6) if u else 0.0


def _mean_score(got: Outcomes) -> float | None:
    per_task = list(task_means(got).values())
    return round(mean(per_task), 4) if per_task else None


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
    ledger.recover(ws.repo, ws.journal, say)
    if not (ws.root / "harness" / "run.py").is_file():
        raise UserError(
            f"{ws.root}/harness/run.py is missing; restore it (git checkout -- harness) or add one"
        )
    if stop.requested(ws.root):  # left from before this run: it does not stop this one
        say(f"removed a STOP file left from before this run ({stop.stop_path(ws.root)})")
        stop.stop_path(ws.root).unlink()
    start = ledger.next_round(ws.repo)
    projected = project(ws, rounds)
    say(projected.line())
    results: list[RoundResult] = []
    told: list[str] = []
    failed_in_a_row = 0
    hours = ws.cfg.budget.max_hours
    deadline = time.monotonic() + hours * 3600 if hours else None
    with open_services(ws.root, ws.cfg, say) as svc, _watched(ws, svc, progress, deadline) as watch:
        ws.journal.write(start, "run_start", rounds=rounds, projected=projected.summary())
        for k in range(start, start + rounds if ready(ws, svc, say, decide) else start):
            interrupts.check()
            if stop.requested(ws.root):
                say(stop.honour(ws.root))
                break
            if results and watch.out_of_time():  # (a first round always starts)
                say(f"not starting round {k}: {stop.OUT_OF_TIME}")
                break
            result = run_round(ws, svc, k, say)
            results.append(result)
            for line in round_lines(result.manifest):
                say(line)
            if on_round is not None:
                on_round(result)
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


def _why_stop(svc: Services, result: RoundResult, failed_in_a_row: int, spent: str | None) -> str | None:
    """Why the run ends after this round: a spent budget, a refused key, an incumbent whose runs
    crash (every later round would too), or too many failed rounds in a row."""
    if spent or svc.gateway.key_refused:
        return spent or svc.gateway.key_refused
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
