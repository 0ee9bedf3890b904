"""Steps 3 and 4 of a round: the optimizer's proposal in its view, and the whitelisted copy-back
checked into a candidate. With several candidates a round (``search``) each one has its own
view, candidate directory and saved proposal, named by ``name`` (c1, c2, ...)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.objective import fields
from harnessopt.optimizer.brief import render_brief, render_history
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot, build_view, copy_back
from harnessopt.protocols import Announce, Proposal
from harnessopt.rollout.runner import Candidate
from harnessopt.round.checks import import_check, static_check
from harnessopt.round.context import Ending, RoundContext
from harnessopt.round.services import Services
from harnessopt.util.text import visible
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace

SUMMARY_CAP = 20_000  # characters of the optimizer's summary kept in the commit message


def propose(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    view: Path,
    n_train: int,
    say: Announce,
    *,
    name: str = "",
    focus_md: str | None = None,
) -> tuple[Proposal, ViewSnapshot | None]:
    """The optimizer's proposal (edits are in the view); None for the snapshot when it was kept
    from an interrupted run of this round, whose candidate ``check`` then restores. ``name`` and
    ``focus_md``: which of several candidates this is and what its brief aims it at."""
    who = f"round {rc.k}" + (f" candidate {name}" if name else "")
    if (saved := svc.store.load_candidate(rc.k, rc.parent, name)) is not None:
        say(f"{who}: reusing the optimizer's proposal of the interrupted run (no optimizer call)")
        return saved[0], None
    history = render_history(ledger.past_rounds(ws.repo))
    cfg = svc.cfg
    plan = proposals.plan_to_implement(ws.repo) if cfg.mode in ("harness", "joint") else None
    brief = render_brief(
        rc.k,
        cfg.mode,
        cfg.allowed_globs(),
        cfg.optimizer,
        n_trajectories=n_train,
        plan_md=plan,
        focus_md=focus_md,
        objective=cfg.objective,
    )
    snapshot = build_view(rc.incumbent.root, view, history_md=history, brief_md=brief)
    say(f"{who}: optimizer '{cfg.optimizer.backend}' is reading {n_train} trajectories")
    ws.journal.write(rc.k, "propose", view=str(view), **_named(name))
    proposal = svc.propose(view, brief, rc.k)
    # Untrusted text: controls made visible before it reaches git, the journal or a terminal.
    proposal.summary = visible(proposal.summary, SUMMARY_CAP).strip() or "(no summary)"
    ws.journal.write(
        rc.k,
        "proposed",
        summary=proposal.summary[:500],
        turns=proposal.turns,
        stopped_by=proposal.stopped_by,
        **_named(name),
    )
    return proposal, snapshot


def check(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    proposal: Proposal,
    snapshot: ViewSnapshot | None,
    *,
    name: str = "",
) -> tuple[CopyBackResult, Candidate | None, Ending | None]:
    """Copy back only whitelisted edits into a candidate; an ``Ending`` when the round (or, with
    several candidates, this candidate) ends here."""
    cand_root = rc.scratch / (name or "candidate")
    shutil.rmtree(cand_root, ignore_errors=True)
    shutil.copytree(rc.incumbent.root, cand_root)
    if snapshot is None:
        copied = _restore_candidate(svc, rc, cand_root, name)
    else:
        cfg = svc.cfg
        copied = copy_back(
            snapshot.view, cand_root, cfg.allowed_globs(), snapshot=snapshot, read_only=cfg.read_only_globs()
        )
        copied = fields.restrict(
            cfg.objective, rc.incumbent.root, cand_root, copied
        )  # trigger: description only
        svc.store.save_candidate(rc.k, rc.parent, proposal, dataclasses.asdict(copied), cand_root, name)
    ws.journal.write(rc.k, "check", changed=copied.changed, violations=copied.violations, **_named(name))
    if proposal.stopped_by == "error":
        said = proposal.summary.splitlines()[0][:300] if proposal.summary else "(nothing said)"
        refused = svc.gateway.exhausted()
        if refused and refused not in said:  # a CLI agent tells the budget's 429 in its own words
            return copied, None, ("failed", f"optimizer stopped: {refused} (it said: {said})")
        return copied, None, ("failed", f"optimizer error: {said}")
    if not copied.changed:
        why = "no whitelisted edit" + (f" ({len(copied.violations)} discarded)" if copied.violations else "")
        return copied, None, ("noop", why)
    candidate = Candidate(cand_root, name or "candidate", f"candidate-of-{rc.parent[:12]}")
    problem = static_check(cand_root, svc.cfg.checks.skill_rules_off)
    if problem is None and any(p.startswith("harness/") for p in copied.changed):  # before any rollout
        problem = import_check(svc.sandbox, cand_root, svc.cfg)
    return copied, candidate, ("rejected", problem) if problem else None


def _named(name: str) -> dict[str, str]:
    return {"candidate": name} if name else {}


def _restore_candidate(svc: Services, rc: RoundContext, cand_root: Path, name: str) -> CopyBackResult:
    saved = svc.store.load_candidate(rc.k, rc.parent, name)
    assert saved is not None, "propose() found it a moment ago"
    _, copied, tree = saved
    for part in EDITABLE_PATHS:
        shutil.rmtree(cand_root / part, ignore_errors=True)
        if (tree / part).exists():
            shutil.copytree(tree / part, cand_root / part, symlinks=True)
    return CopyBackResult(**copied)
