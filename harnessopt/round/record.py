"""The last step of a round: its outcome written to git, whatever the outcome (an accept on main,
anything else on a ref of its own)."""

from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.lock import check_held
from harnessopt.ledger.store import OptimizerRecord, RoleUsage, RoundManifest, Status
from harnessopt.objective.metrics import round_stats
from harnessopt.protocols import Announce, Proposal
from harnessopt.reporting.projection import run_models
from harnessopt.rollout.runner import outcomes
from harnessopt.rollout.val_cache import ValCache
from harnessopt.round.context import Ending, RoundContext, RoundResult, Trail
from harnessopt.round.services import Services
from harnessopt.search.explore import keep_head
from harnessopt.search.state import verdict_text
from harnessopt.util import interrupts
from harnessopt.util.text import visible
from harnessopt.workspace.core import RECORD_PATHS, Workspace


def count_unclaimed(svc: Services, rc: RoundContext, t: Trail) -> None:
    """Runs started ahead that no step asked for (the probe of a round that ended before its smoke
    test) were spent all the same: the round's counts take them, by their own phase."""
    by_id = {task.id: task for task in [*rc.val, *rc.held_out]}
    for label, r in svc.runner.drop_prefetched():
        if (task := by_id.get(r.task_id)) is not None:
            t.runs.started(label, [task], rc.k, [r.epoch], r.phase)
            t.runs.finished(label, r, 1, 1)


def record(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, ending: Ending, say: Announce
) -> RoundResult:
    """Accept: one atomic commit on main + tags. Otherwise: the candidate on a ref, main untouched."""
    check_held(ws.root)  # the workspace is still this run's: no second writer since its lock went
    status, reason = ending[0], visible(ending[1], 2000)
    if status == "accepted" and (why := vcs.main_unmovable(ws.repo, rc.parent)):
        status, reason = "failed", not_applied(ws.root, rc.k, why)
    count_unclaimed(svc, rc, t)
    if t.search is not None:  # every candidate on its own ref, before the round's record names them
        t.search.write_refs(ws.repo, rc.parent, rc.k)
    m = manifest(svc, rc, t, status, reason)
    ws.journal.write(rc.k, "record", status=status, reason=reason)
    overlay = (t.candidate or rc.incumbent).root  # skill/, harness/ and this round's trajectories/
    if status == "accepted":
        new_best = ledger.is_new_best(ws.repo, m)
        paths = list(RECORD_PATHS[:3])
        if new_best:  # best_skill.md only moves with ho/best
            shutil.copy2(overlay / "skill" / "SKILL.md", overlay / "best_skill.md")
            paths.append("best_skill.md")
        try:
            # main's move and what the next run needs of it, Ctrl-C and SIGTERM held: a stop just
            # after the move would otherwise lose the new incumbent's cached runs (paid again)
            with interrupts.deferred():
                sha = ledger.record_accepted(
                    ws.repo, ws.journal, rc.parent, overlay, paths, m, new_best=new_best
                )
                cache_accepted(ws, svc, sha, t)
                # said inside: a Ctrl-C held till here lands once main moved, after the round's line
                _said(rc.k, status, reason, _recorded(ws, svc, rc, t, status, sha, say), say)
        except ledger.MainMoved as e:  # changed in the moment since the check above: recorded as failed
            return record(ws, svc, rc, t, ("failed", not_applied(ws.root, rc.k, e.why)), say)
    else:
        paths = [p for p in RECORD_PATHS[:3] if (overlay / p).exists()]
        sha = ledger.record_other(ws.repo, rc.parent, overlay, paths, m)
        _said(rc.k, status, reason, _recorded(ws, svc, rc, t, status, sha, say), say)
    return RoundResult(rc.k, status, reason, sha, m)


def _said(k: int, status: Status, reason: str, resumed: int, say: Announce) -> None:
    """The round's outcome, as recorded."""
    if resumed:
        say(f"round {k}: reused {resumed} finished rollout(s) of an interrupted run")
    say(f"round {k}: {verdict_text(status, reason)}")


def _recorded(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, status: Status, sha: str, say: Announce
) -> int:
    """After the round's commit: its recorded line, the explore head, the resume files cleared;
    how many finished rollouts of an interrupted run it reused."""
    ws.journal.write(rc.k, "recorded", status=status, commit=sha)
    if svc.cfg.explore_steps:  # after the record: a crash before it leaves the head the round began with
        keep_head(ws.repo, rc.k, t.search, status, t.judged, say)
    resumed = svc.store.resumed(rc.k)
    svc.store.clear(rc.k)  # git holds the round now
    return resumed


def not_applied(root: Path, k: int, why: str) -> str:
    """The reason of an accepted round that could not go on main: what the user changed, and where
    the candidate is (the command that shows it, for the workspace at ``root``)."""
    return (
        f"accepted by the gate, not applied: {why} during the round, and main moves only from what "
        f"the round started on; the candidate is on refs/harnessopt/failed/round-{k} "
        f"(harnessopt diff {shlex.quote(str(root))} {k} shows it); commit or stash your work on main, then run again"
    )


def cache_accepted(ws: Workspace, svc: Services, sha: str, t: Trail) -> None:
    """The accepted candidate's val runs become the new incumbent's cached ones: its bank, measured
    fresh by the banked gate's confirmation (``evaluate.confirm_banked``), else its validation runs,
    which the next round tops up to ``gate.incumbent_epochs`` (docs/gate.md, "The banked gate")."""
    cache = ValCache(svc.state_dir)
    cache.put(cache.key(ws.repo, sha, svc.cfg, svc.sandbox), t.new_bank or outcomes(t.cand_val))


def optimizer_record(
    p: Proposal, skipped: list[str], counted: dict[str, int] | None, root: Path | None = None
) -> OptimizerRecord:
    """What the optimizer spent: the tokens its agent reports, or, where it reports none (a Codex
    turn that failed sends no usage), the ones the gateway counted for the role in the round. Its
    transcript's path is relative to the workspace ``root``: an absolute one went stale once the
    workspace was moved or copied (QA)."""
    transcript = None
    if p.transcript_path:
        path = Path(p.transcript_path)
        try:
            transcript = str(path.resolve().relative_to(Path(root).resolve())) if root else str(path)
        except ValueError:  # kept elsewhere (a test's own folder): as it is
            transcript = str(path)
    tokens_in, tokens_out = p.input_tokens, p.output_tokens
    if not (tokens_in or tokens_out) and counted:
        tokens_in, tokens_out = int(counted.get("input", 0)), int(counted.get("output", 0))
    return OptimizerRecord(
        turns=p.turns,
        stopped_by=p.stopped_by,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        transcript=transcript,
        view_skipped=skipped,
    )


def manifest(svc: Services, rc: RoundContext, t: Trail, status: Status, reason: str) -> RoundManifest:
    d, p, snap = t.decision, t.proposal, t.snapshot
    usage = svc.usage_of_round(rc.k)
    optimizer = None
    if p is not None:
        optimizer = optimizer_record(
            p, snap.skipped if snap else [], usage.tokens.get("optimizer"), svc.state_dir.parent
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
        violations=_violations(t),
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
        optimizer_s=round(svc.optimizer_s[rc.k], 3) if rc.k in svc.optimizer_s else None,
        models=run_models(svc.cfg),
        checks=t.checks,
        search=t.search.record() if t.search else None,
        trigger=round_stats(
            svc.cfg.objective,
            rc.val,
            t.cand_val,
            outcomes(t.cand_val),
            t.incumbent_val,
            t.candidate.root / "skill" if t.candidate else None,
            rc.incumbent.root / "skill",
        ),
    )


def _violations(t: Trail) -> list[str]:
    """The round's discarded writes: every candidate's (each proposed in a view of its own)."""
    if t.search is not None and t.search.several:
        return sorted({v for p in t.search.proposed for v in p.copied.violations})
    return t.copied.violations if t.copied else []


def _role_cost(svc: Services, k: int, role: str) -> float:
    u = svc.gateway.usage().get((role, k))
    return round(u.cost_usd, 6) if u else 0.0
