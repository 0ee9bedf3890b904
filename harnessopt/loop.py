"""The optimization round, one function a step (DESIGN.md "What it does").

rollout -> stage -> propose -> check -> smoke -> validate -> gate -> record. Every outcome,
including a rejected, no-op or failed round, is recorded data; the main branch only moves in
``record`` through one atomic update-ref, with Ctrl-C deferred for those few milliseconds.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt import interrupts, vcs
from harnessopt.errors import UserError
from harnessopt.optimizer.brief import render_brief, render_history
from harnessopt.optimizer.view import build_view, copy_back
from harnessopt.protocols import GateDecision, Outcomes, Task, TaskResult
from harnessopt.rollout import Candidate, outcomes
from harnessopt.services import Services, open_services
from harnessopt.skillspec import read_skill
from harnessopt.stats import mean, task_means
from harnessopt.trajectory import write_trajectories
from harnessopt.valcache import ValCache
from harnessopt.workspace import EDITABLE_PATHS, RECORD_PATHS, Workspace

Announce = Callable[[str], None]


@dataclass
class RoundResult:
    """What one round decided and where git keeps it."""

    round: int
    status: str  # accepted | rejected | noop | failed
    reason: str
    commit: str
    manifest: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundState:
    """What the steps of one round hand to each other."""

    k: int
    scratch: Path
    incumbent: Candidate
    parent: str
    train: list[TaskResult] = field(default_factory=list)
    summary: str = ""
    proposal: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    candidate: Candidate | None = None
    decision: GateDecision | None = None
    cand_val: list[TaskResult] = field(default_factory=list)
    view: Path | None = None  # the optimizer's copy, in a temp dir outside the workspace
    snapshot: Any = None  # the view's pristine state, kept outside the view (see optimizer.view)


def next_round(ws: Workspace) -> int:
    return max((r.round for r in vcs.round_records(ws.repo)), default=0) + 1


def run_round(ws: Workspace, svc: Services, k: int, say: Announce) -> RoundResult:
    st = start_round(ws, svc, k)
    try:
        return _steps(ws, svc, st, say)
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as e:  # an infrastructure failure is a recorded outcome, not a traceback
        ws.journal.write(k, "error", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        return record(ws, svc, st, "failed", f"{type(e).__name__}: {e}"[:500], say=say)
    finally:
        if st.view is not None:
            shutil.rmtree(st.view, ignore_errors=True)


def _steps(ws: Workspace, svc: Services, st: RoundState, say: Announce) -> RoundResult:
    rollout_train(ws, svc, st, say)  # 1
    stage(svc, st)  # 2
    propose(ws, svc, st, say)  # 3
    interrupts.check()
    problem = check(ws, svc, st)  # 4
    if problem is not None:
        return record(ws, svc, st, *problem, say=say)
    incumbent_val = incumbent_outcomes(ws, svc, st, say)
    crash = smoke(ws, svc, st, incumbent_val, say)  # 5
    if crash is not None:
        return record(ws, svc, st, "rejected", crash, say=say)
    validate(ws, svc, st, say)  # 6
    gate(ws, svc, st, incumbent_val)  # 7
    interrupts.check()
    assert st.decision is not None
    return record(ws, svc, st, "accepted" if st.decision.accept else "rejected", st.decision.reason, say=say)


def start_round(ws: Workspace, svc: Services, k: int) -> RoundState:
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} changed during the run; commit or stash your edits, then run again")
    scratch = svc.scratch / f"round-{k}"
    shutil.rmtree(scratch, ignore_errors=True)
    (scratch / "incumbent").mkdir(parents=True)
    parent = vcs.head_sha(ws.repo)
    for p in EDITABLE_PATHS:  # a private copy: edits to the workspace mid-round cannot leak in
        shutil.copytree(ws.root / p, scratch / "incumbent" / p, ignore=shutil.ignore_patterns("__pycache__"))
    ws.journal.write(k, "start", parent=parent)
    return RoundState(k, scratch, Candidate(scratch / "incumbent", "incumbent", parent), parent)


def rollout_train(ws: Workspace, svc: Services, st: RoundState, say: Announce) -> None:
    batch = train_batch(ws.tasks("train"), st.k, ws.cfg.rollout.batch_size)
    say(f"round {st.k}: rollout of the incumbent on {len(batch)} train tasks")
    st.train = svc.runner.run(st.incumbent, batch, st.k)
    passed = sum(r.passed for r in st.train)
    ws.journal.write(st.k, "rollout", tasks=[r.task_id for r in st.train], passed=passed)


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


def stage(svc: Services, st: RoundState) -> None:
    """One flat Markdown file per train trajectory, beside the incumbent copy the view is made from."""
    write_trajectories(
        st.incumbent.root / "trajectories",
        st.train,
        harness_commit=st.parent,
        target_model=svc.cfg.model.target,
    )


def propose(ws: Workspace, svc: Services, st: RoundState, say: Announce) -> None:
    # Outside the workspace: a shell in the view finds no tasks/ or scorer.py up its own tree.
    view = Path(tempfile.mkdtemp(prefix=f"ho-view-r{st.k}-"))
    st.view = view
    history = render_history([r.manifest | {"round": r.round, "status": r.status} for r in _past(ws)])
    cfg = svc.cfg
    brief = render_brief(st.k, cfg.mode, cfg.allowed_globs(), cfg.optimizer, n_trajectories=len(st.train))
    st.snapshot = build_view(st.incumbent.root, view, history_md=history, brief_md=brief)
    say(f"round {st.k}: optimizer '{svc.cfg.optimizer.backend}' is reading {len(st.train)} trajectories")
    ws.journal.write(st.k, "propose", view=str(view))
    proposal = svc.propose(view, brief, st.k)
    st.summary = proposal.summary.strip() or "(no summary)"
    st.proposal = {
        "turns": proposal.turns,
        "stopped_by": proposal.stopped_by,
        "input_tokens": proposal.input_tokens,
        "output_tokens": proposal.output_tokens,
    }
    ws.journal.write(st.k, "proposed", summary=st.summary[:500], **st.proposal)


def check(ws: Workspace, svc: Services, st: RoundState) -> tuple[str, str] | None:
    """Copy back only whitelisted edits into a candidate; (status, reason) when the round ends here."""
    assert st.view is not None, "check() follows propose()"
    cand_root = st.scratch / "candidate"
    shutil.copytree(st.incumbent.root, cand_root)
    result = copy_back(st.view, cand_root, svc.cfg.allowed_globs(), snapshot=st.snapshot)
    st.check = {"changed": result.changed, "violations": result.violations}
    ws.journal.write(st.k, "check", **st.check)
    if st.proposal.get("stopped_by") == "error":
        return "failed", f"optimizer error: {st.summary.splitlines()[0][:300]}"
    if not result.changed:
        why = "no whitelisted edit" + (f" ({len(result.violations)} discarded)" if result.violations else "")
        return "noop", why
    st.candidate = Candidate(cand_root, "candidate", f"candidate-of-{st.parent[:12]}")
    try:
        read_skill(cand_root / "skill")
        _compile_harness(cand_root / "harness")
    except UserError as e:
        return "rejected", f"candidate fails its static check: {e}"
    except SyntaxError as e:
        return "rejected", f"candidate harness does not compile: {e.filename}:{e.lineno}: {e.msg}"
    return None


def _compile_harness(harness: Path) -> None:
    """Compile (never run) every harness module on the host: a syntax error rejects early."""
    for path in sorted(harness.rglob("*.py")):
        compile(path.read_text(encoding="utf-8", errors="replace"), str(path), "exec")


def incumbent_outcomes(ws: Workspace, svc: Services, st: RoundState, say: Announce) -> Outcomes:
    """The incumbent's val outcomes: cached per skill+harness content unless re-running is asked."""
    cache = ValCache(svc.state_dir)
    key = cache.key(ws.repo, st.parent, svc.cfg)
    cached = None if svc.cfg.gate.rerun_incumbent else cache.get(key)
    if cached is not None:
        return cached
    val = ws.tasks("val")
    say(f"round {st.k}: measuring the incumbent on {len(val)} val tasks x {svc.cfg.gate.epochs} epoch(s)")
    results = svc.runner.run(st.incumbent, val, st.k, epochs=range(svc.cfg.gate.epochs))
    got = outcomes(results)
    cache.put(key, got)
    ws.journal.write(st.k, "incumbent_val", n=len(got), score=_mean_score(got))
    return got


def smoke(ws: Workspace, svc: Services, st: RoundState, inc: Outcomes, say: Announce) -> str | None:
    """Run the candidate on the first val tasks; a crash the incumbent does not have rejects it."""
    assert st.candidate is not None
    tasks = smoke_tasks(ws.tasks("val"), svc.cfg.gate.smoke)
    if not tasks:
        return None
    say(f"round {st.k}: smoke test of the candidate on {len(tasks)} val tasks")
    st.cand_val = svc.runner.run(st.candidate, tasks, st.k)
    crashes = [
        f"{r.task_id} ({r.error_class})"
        for r in st.cand_val
        if r.crashed and not all(o.crashed for o in inc.get(r.task_id, []))
    ]
    ws.journal.write(st.k, "smoke", n=len(tasks), crashes=crashes)
    if crashes:
        return f"smoke test: {len(crashes)}/{len(tasks)} crashed: {', '.join(crashes[:5])}"
    return None


def smoke_tasks(val: Sequence[Task], n: int) -> list[Task]:
    return sorted(val, key=lambda t: t.id)[:n]


def validate(ws: Workspace, svc: Services, st: RoundState, say: Announce) -> None:
    """The rest of val (and the remaining epochs of the smoke tasks); smoke results are reused."""
    assert st.candidate is not None
    epochs = svc.cfg.gate.epochs
    smoked = {r.task_id for r in st.cand_val}
    rest = [t for t in ws.tasks("val") if t.id not in smoked]
    say(f"round {st.k}: validating the candidate on {len(rest)} more val tasks x {epochs} epoch(s)")
    st.cand_val += svc.runner.run(st.candidate, rest, st.k, epochs=range(epochs))
    if epochs > 1:
        again = [t for t in ws.tasks("val") if t.id in smoked]
        st.cand_val += svc.runner.run(st.candidate, again, st.k, epochs=range(1, epochs))
    ws.journal.write(st.k, "validate", n=len(st.cand_val), score=_mean_score(outcomes(st.cand_val)))


def gate(ws: Workspace, svc: Services, st: RoundState, inc: Outcomes) -> None:
    assert st.candidate is not None
    candidate = st.candidate
    by_id = {t.id: t for t in ws.tasks("val")}
    rerun_epoch = iter(range(1000, 10**6))

    def confirm(ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        tasks = [by_id[i] for i in ids]
        epoch = next(rerun_epoch)
        cand = svc.runner.run(candidate, tasks, st.k, epochs=[epoch])
        base = svc.runner.run(st.incumbent, tasks, st.k, epochs=[epoch])
        return outcomes(cand), outcomes(base)

    st.decision = svc.gate.decide(outcomes(st.cand_val), inc, confirm if svc.cfg.gate.confirm_flips else None)
    d = st.decision
    ws.journal.write(st.k, "gate", accept=d.accept, reason=d.reason, delta=d.delta, dead_zone=d.dead_zone)


def record(
    ws: Workspace, svc: Services, st: RoundState, status: str, reason: str, *, say: Announce
) -> RoundResult:
    """Accept: one atomic commit on main + tags. Otherwise: the candidate on a ref, main untouched."""
    manifest = _manifest(svc, st, status, reason)
    title = st.summary.splitlines()[0][:72] if st.summary else reason[:72]
    message = vcs.manifest_message(
        f"harnessopt round {st.k}: {status}: {title}", f"{reason}\n\n{st.summary}", manifest
    )
    ws.journal.write(st.k, "record", status=status, reason=reason)
    if status == "accepted":
        sha = _commit_accepted(ws, svc, st, message, new_best=_is_new_best(ws, manifest))
    else:
        overlay = (st.candidate or st.incumbent).root  # skill/, harness/ and this round's trajectories/
        paths = [p for p in RECORD_PATHS[:3] if (overlay / p).exists()]
        sha = vcs.build_commit(ws.repo, st.parent, overlay, paths, message)
        vcs.set_ref(ws.repo, vcs.RECORD_REF.format(status=status, k=st.k), sha)
        if not vcs.dirty_paths(ws.repo):  # never wipe edits a user made mid-run; start_round reports them
            vcs.reset_hard(ws.repo)
    ws.journal.write(st.k, "recorded", status=status, commit=sha)
    say(f"round {st.k}: {reason}" if reason.startswith(status) else f"round {st.k}: {status}: {reason}")
    return RoundResult(st.k, status, reason, sha, manifest)


def _commit_accepted(ws: Workspace, svc: Services, st: RoundState, message: str, *, new_best: bool) -> str:
    assert st.candidate is not None
    overlay = st.candidate.root
    paths: list[str] = list(RECORD_PATHS[:3])
    if new_best:  # best_skill.md only moves with ho/best
        shutil.copy2(overlay / "skill" / "SKILL.md", overlay / "best_skill.md")
        paths.append("best_skill.md")
    sha = vcs.build_commit(ws.repo, st.parent, overlay, paths, message)
    with interrupts.deferred():
        ws.journal.write(st.k, "applying", commit=sha)
        vcs.advance_main(ws.repo, sha, st.parent)
        vcs.tag(ws.repo, vcs.ROUND_TAG.format(k=st.k), sha)
        if new_best:
            vcs.tag(ws.repo, vcs.BEST_TAG, sha, move=True)
    cache = ValCache(svc.state_dir)
    cache.put(cache.key(ws.repo, sha, svc.cfg), outcomes(st.cand_val))
    return sha


def _manifest(svc: Services, st: RoundState, status: str, reason: str) -> dict[str, Any]:
    d = st.decision
    usage = svc.usage_of_round(st.k)
    return {
        "round": st.k,
        "status": status,
        "reason": reason,
        "summary": st.summary,
        "parent": st.parent,
        "val_score": d.candidate_score if d else None,
        "incumbent_score": d.incumbent_score if d else None,
        "delta": d.delta if d else None,
        "dead_zone": d.dead_zone if d else None,
        "n": d.n if d else None,
        "fixed": d.fixed if d else [],
        "broken": d.broken if d else [],
        "gate": d.details if d else {},
        "train_passed": sum(r.passed for r in st.train),
        "train_tasks": len(st.train),
        "changed": st.check.get("changed", []),
        "violations": st.check.get("violations", []),
        "optimizer": st.proposal,
        "tokens": usage["tokens"],
        "cost_usd": usage["cost_usd"],
    }


def _is_new_best(ws: Workspace, manifest: dict[str, Any]) -> bool:
    best = ws.repo.commit(vcs.BEST_TAG)
    if best.hexsha == manifest["parent"]:
        return True
    best_score = vcs.parse_manifest(str(best.message)).get("val_score")
    return best_score is None or (manifest["val_score"] or 0.0) > best_score


def _past(ws: Workspace) -> list[vcs.RoundRecord]:
    return [r for r in vcs.round_records(ws.repo) if r.round > 0]


def _mean_score(got: Outcomes) -> float | None:
    per_task = list(task_means(got).values())
    return round(mean(per_task), 4) if per_task else None


def run(ws: Workspace, rounds: int, say: Announce, *, progress: Any = None) -> list[RoundResult]:
    """Run ``rounds`` rounds after the last recorded one. Stops early when the budget is spent."""
    recover(ws, say)
    start = next_round(ws)
    results: list[RoundResult] = []
    with open_services(ws.root, ws.cfg, say, progress=progress) as svc:
        ws.journal.write(start, "run_start", rounds=rounds)
        for k in range(start, start + rounds):
            interrupts.check()
            result = run_round(ws, svc, k, say)
            results.append(result)
            spent = svc.gateway.exhausted()
            if result.status == "failed" or spent:
                say(f"stopping after round {k}: {spent or result.reason}")
                break
        ws.journal.write(results[-1].round if results else start, "run_end")
    return results


def recover(ws: Workspace, say: Announce) -> None:
    """Finish or refuse before a run: main must be clean, or the leftover of our own interrupted apply."""
    last = ws.journal.last() or {}
    head = vcs.head_sha(ws.repo)
    if last.get("phase") == "applying" and last.get("commit") == head:
        vcs.reset_hard(ws.repo)  # main moved, the checkout may not have finished
        tag = vcs.ROUND_TAG.format(k=last["round"])
        if tag not in [t.name for t in ws.repo.tags]:
            vcs.tag(ws.repo, tag, head)
        ws.journal.write(last["round"], "recorded", status="accepted", commit=head, recovered=True)
        say(
            f"round {last['round']} had been accepted when the last run stopped; its checkout is now complete"
        )
    dirty = vcs.dirty_paths(ws.repo)
    if dirty:
        more = f" and {len(dirty) - 1} more" if len(dirty) > 1 else ""
        raise UserError(
            f"{ws.root} has uncommitted changes ({dirty[0]}{more}); commit or stash them, then run again"
        )
