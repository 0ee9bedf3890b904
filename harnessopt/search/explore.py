"""Explore (``search.explore: E``): E proposals chained in one round, only the chain's end validated.

Step 1 is built on the incumbent and screened on the round's train batch, as a round with one
candidate and a screen floor would be. A step that beats its base there (the paired train
difference strictly above 0: GEPA's acceptance rule, on ``rollout.batch_size`` tasks and the
``search.screen_tasks`` more that are screened on but not read) becomes the base of the next step;
one that does not is dropped, and the next step starts from the same base. Each later step reads
the base's runs on a fresh train batch (the base runs it and its screening-only tasks, as the
incumbent runs the round's batch) and is screened on them. After E steps the chain's end, if any step
moved it, goes to smoke and validation against the incumbent as the round's one candidate: its
cumulative diff is what the leakage and memorised checks, the gate, the commit and the review see.
With ``search.checkpoints`` (every few steps the head runs on fixed train tasks, and so does the
end: ``search.checkpoints``) the state validated is the chain's pick: the best scored state where it
scored clearly above the end, else the end; the steps after the pick are not validated.

A chain end the gate judged and did not accept is kept on ``refs/harnessopt/explore/head``, and
the next round's chain starts from it (the head runs the round's batch instead of main) rather
than from main: the steps it took are not thrown away because one validation missed their sum.
An accept drops the head (main has it now); a head whose base is no longer main's skill and
harness (a rollback, a person's commit) is dropped when a round finds it. A chain end rejected
by a check (leakage, smoke, the memorised-answer check) is never kept.

Train is not val: choosing along the chain on train costs the val gate nothing, and main moves
only through the gate (docs/optimizer.md, "Explore"; the yield benchmark's "explore" row).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import git

from harnessopt.ledger import vcs
from harnessopt.ledger.store import EXPLORE_HEAD_REF
from harnessopt.optimizer.view import CopyBackResult
from harnessopt.protocols import Announce, Task, TaskResult
from harnessopt.rollout.run_cache import CHECKPOINT_EPOCH, STEP_EPOCH
from harnessopt.rollout.runner import Candidate, outcomes
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.round.context import RoundContext
from harnessopt.round.evaluate import bank_lacks
from harnessopt.round.propose import check, propose
from harnessopt.round.services import Services
from harnessopt.search import budget, checkpoints
from harnessopt.search.clusters import Focus
from harnessopt.search.screen import Screened, screen
from harnessopt.search.state import Proposed, Search
from harnessopt.search.steps import screen_tasks
from harnessopt.util import interrupts
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace

STEP_FLOOR = 1e-9  # a step moves the chain only when strictly better than its base on the batch
TIE_FLOOR = -1e-9  # with search.ties_move: also when level with it there


def step_floor(ties_move: bool | None) -> float:
    """The screen floor a chain's step must reach to move the chain (``search.ties_move``)."""
    return TIE_FLOOR if ties_move else STEP_FLOOR


_SUBJECT = re.compile(r"harnessopt round (\d+) candidate (s\d+): (.*)")


@dataclass(frozen=True)
class Head:
    """A chain end the gate did not accept, kept on ``EXPLORE_HEAD_REF``; a round's chain starts there."""

    candidate: Candidate  # its skill/ and harness/, exported into the round's scratch
    name: str  # round-K/sJ: the round and step it ended
    title: str  # its summary's first line (as far as its commit's subject has it)
    changed: list[str]  # the files it changes against main


def carried_head(ws: Workspace, rc: RoundContext, say: Announce) -> Head | None:
    """The kept head as round ``rc.k``'s start, or None (no head, or one built on a skill and
    harness main no longer has: dropped, and said)."""
    repo = ws.repo
    if not vcs.ref_exists(repo, EXPLORE_HEAD_REF):
        return None
    commit = repo.commit(EXPLORE_HEAD_REF)
    base = commit.parents[0].hexsha if commit.parents else ""
    if not base or vcs.tree_id(repo, base, EDITABLE_PATHS) != vcs.tree_id(repo, rc.parent, EDITABLE_PATHS):
        drop_head(ws, rc.k, "main's skill or harness changed since it was kept", say)
        return None
    got = _SUBJECT.match(commit.summary if isinstance(commit.summary, str) else "")
    name, title = (f"round-{got[1]}/{got[2]}", got[3]) if got else (commit.hexsha[:10], "")
    changed = repo.git.diff("--name-only", "-z", rc.parent, commit.hexsha, "--", *EDITABLE_PATHS).split("\0")
    changed = [path for path in changed if path]
    root = _copy_editable(rc.incumbent.root, rc.scratch / "head")  # what main runs, ignored files too
    _overlay(repo, commit.hexsha, changed, root)
    ws.journal.write(rc.k, "explore-head", head=name, commit=commit.hexsha)
    say(f"round {rc.k}: exploring on from the kept head {name} ({commit.hexsha[:10]}), not from main")
    return Head(Candidate(root, "head", commit.hexsha), name, title, changed)


def _copy_editable(src: Path, root: Path) -> Path:
    """A fresh ``root`` with ``src``'s skill/ and harness/ as they are on disk (links kept as links)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for part in EDITABLE_PATHS:
        if (src / part).exists():
            shutil.copytree(src / part, root / part, symlinks=True)
    return root


def _overlay(repo: git.Repo, sha: str, paths: list[str], root: Path) -> None:
    """Write ``paths`` as commit ``sha`` has them into ``root`` (a path it lacks is removed), never
    through a link: each one's directory must resolve inside ``root``; ``vcs.export`` writes them."""
    inside = root.resolve()
    for path in paths:
        target = root.joinpath(*path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(inside):
            raise RuntimeError(f"the kept head's {path} lies under a link out of the workspace copy")
        if target.is_symlink() or target.is_file():
            target.unlink()
    if paths:  # export with no path would write the whole tree
        vcs.export(repo, sha, paths, root)


def drop_head(ws: Workspace, k: int, why: str, say: Announce) -> None:
    vcs.delete_ref(ws.repo, EXPLORE_HEAD_REF)
    ws.journal.write(k, "explore-head", dropped=why)
    say(f"round {k}: dropped the kept explore head: {why}; this round explores from main")


def keep_head(repo: git.Repo, k: int, found: Search | None, status: str, judged: bool, say: Announce) -> None:
    """After round k is recorded: an accept drops the head (main has it); a chain end the gate (or
    its confirmation) judged and did not accept becomes the head; anything else leaves it as it was."""
    if status == "accepted":
        vcs.delete_ref(repo, EXPLORE_HEAD_REF)
        return
    end = next((p for p in found.proposed if p.name in found.validated), None) if found else None
    if status == "rejected" and judged and end is not None and end.commit:
        vcs.set_ref(repo, EXPLORE_HEAD_REF, end.commit)
        say(
            f"round {k}: kept {end.name}, the chain's end, as the explore head: the next round goes on from it"
        )


def explore(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    train: list[TaskResult],
    view: Path,
    say: Announce,
    batch_of: Callable[[int], list[Task]],
    head: Head | None = None,
) -> Search:
    """The round's chain of ``search.explore`` steps; its end (if it moved) is the one winner.

    ``train``: the start's runs on the round's batch (step 1's trajectories and its bar); the
    start is ``head`` when one is kept, else the incumbent. ``batch_of(j)``: the fresh train batch
    of step j > 1."""
    steps, extra = svc.cfg.explore_steps, svc.cfg.search.screening_only
    split = ws.tasks("train")
    batch, more = screen_tasks(split, train, extra, rc.k)  # the round's batch and screening-only tasks
    base, base_runs, chain = head.candidate if head else rc.incumbent, train, list[Proposed]()
    every = svc.cfg.search.checkpoint_every
    fixed = checkpoints.fixed(split, checkpoints.tasks_of(svc.cfg.search)) if every else []
    marks = _Marks(svc, rc, base, fixed, say)
    if more:
        # the start runs the screening-only tasks too, while step 1's optimizer works (it reads
        # only the round's batch); step 1's screening collects them
        svc.runner.prefetch(base, [(t, 0) for t in more], rc.k, phase="rollout")
    read = len(train)
    found = Search([], head=head.name if head else "", explored=True)
    for j in range(1, steps + 1):
        name = f"s{j}"
        if every and j > 1 and (j - 1) % every == 0:  # the checkpoint after step j - 1
            marks.score(chain, f"s{j - 1}")
        if j > 1 and not _room_for_step(ws, svc, rc, len(batch_of(j)), len(marks.tasks)):
            # step 1: the driver checked
            left = budget.runs_left(svc.cfg, svc.rates, svc.gateway.total(), svc.seconds_left()) or 0.0
            say(
                f"round {rc.k}: the budget left (about {left:,.0f} target runs) pays for validating the "
                f"chain's end and not for step {name} too: the chain ends at {chain[-1].name}"
                if chain
                else f"round {rc.k}: the budget left (about {left:,.0f} target runs) pays for no step "
                f"{name} that could still be validated: the chain ends with no step kept"
            )
            ws.journal.write(rc.k, "explore_budget_end", before=name, left_runs=round(left))
            break
        if j > 1:  # a fresh batch: the base's runs on it are the step's trajectories and its bar
            batch = batch_of(j)
            base, base_runs, read = _rebased(ws, svc, rc, base, j, batch)
        step = dataclasses.replace(rc, incumbent=base)
        brief = render_step(name, j, steps, [p.name for p in chain], head)
        sview = view.with_name(f"{view.name}-{name}")
        proposal, snapshot = propose(ws, svc, step, sview, read, say, name=name, focus_md=brief)
        interrupts.check()
        copied, candidate, ending = check(ws, svc, step, proposal, snapshot, name=name)
        focus = Focus(f"step {j}" + (f" on the kept head {head.name}" if head else ""))
        p = Proposed(name, focus, proposal, snapshot, copied, candidate, ending)
        found.proposed.append(p)
        if proposal.stopped_by == "stopped":  # STOP ended a person's turn: the chain ends at this step
            break
        if candidate is None or ending is not None:
            status, why = ending or ("noop", "no whitelisted edit")
            stage = {"noop": "made no change", "rejected": "was rejected at the checks"}.get(status, "failed")
            say(f"round {rc.k}: step {name} {stage} ({why.splitlines()[0][:200]}): dropped")
            continue
        if j == 1 and more:
            base_runs = [*train, *svc.runner.run(base, more, rc.k, phase="rollout")]
        ran = {r.task_id for r in base_runs}
        runs = svc.runner.run(
            candidate, [t for t in batch if t.id in ran], rc.k, epochs=[step_epoch(j)], phase="screening"
        )
        interrupts.check()
        (s,) = screen({name: outcomes(runs)}, outcomes(base_runs), floor=step_floor(svc.cfg.search.ties_move))
        base_name = _name_of(chain, head)
        outcome = "kept" if s.chosen else "dropped"
        p.screened, p.rank = (
            dataclasses.replace(s, chosen=False, reason=_step_reason(s, base_name, outcome)),
            j,
        )
        if s.chosen:
            chain.append(p)
            base = candidate  # the next step rebases it onto its own fresh batch
            say(
                f"round {rc.k}: step {name} beat {base_name} on {s.n} train tasks ({s.mean_delta:+.3f}): kept"
            )
        else:
            say(f"round {rc.k}: step {name} did not beat {base_name} on train ({s.mean_delta:+.3f}): dropped")
    picked = chain
    if every:  # the end scored too; the chain's pick is the state validated
        marks.score(chain, "the end")
        picked = chain[: marks.choose(chain, head, checkpoints.margin_of(svc.cfg.search))]
        found.checkpoints, found.checkpoints_run = len(marks.scored), marks.ran
    _end(picked, head, marks if every else None)
    ws.journal.write(
        rc.k,
        "explore",
        head=head.name if head else None,
        steps={
            p.name: [round(p.screened.mean_delta, 4) if p.screened else None, p in chain]
            for p in found.proposed
        },
        chain=[p.name for p in chain],
        **(
            {
                "checkpoints": [[_name_of(chain[:n], head), round(v, 4)] for n, v in marks.scored],
                "pick": _name_of(picked, head),
            }
            if every
            else {}
        ),
    )
    return found


class _Marks(checkpoints.Marks):
    """A round's checkpoints (``search.checkpoints``): each scores the chain's head on the fixed
    train tasks through the runner at ``CHECKPOINT_EPOCH`` (a resumed round finds the runs in the run
    cache); a head a checkpoint already scored is not run again."""

    def __init__(self, svc: Services, rc: RoundContext, start: Candidate, tasks: list[Task], say: Announce):
        super().__init__()
        self.svc, self.rc, self.start, self.tasks, self.say = svc, rc, start, tasks, say

    def score(self, chain: list[Proposed], after: str) -> None:
        """Score the head (the last kept step, or the chain's start) at the checkpoint ``after``."""
        cand = chain[-1].candidate if chain else self.start
        assert cand is not None
        value = self.of(len(chain))  # a head that has not moved since it was scored: not run again
        if value is None:
            runs = self.svc.runner.run(
                cand, self.tasks, self.rc.k, epochs=[CHECKPOINT_EPOCH], phase="screening"
            )
            interrupts.check()
            value = checkpoints.score(runs)
        self.add(len(chain), value)
        if chain:
            chain[-1].checkpoint = value
        who = chain[-1].name if chain else "the chain's start"
        self.say(
            f"round {self.rc.k}: checkpoint after {after}: {who} scored {value:.3f} on {len(self.tasks)} "
            "fixed train tasks"
        )

    def choose(self, chain: list[Proposed], head: Head | None, margin: float) -> int:
        """The kept steps of the chain's pick (``checkpoints.Marks.pick``), said when it is not the end."""
        n = self.pick(margin)
        if n < len(chain):
            top, end = self.of(n), self.of(len(chain))
            assert top is not None and end is not None
            why = (
                f"the chain's pick, {_name_of(chain[:n], head)}, scored {top:.3f} on {len(self.tasks)} fixed "
                f"train tasks against the end's {end:.3f}"
            )
            for i in range(n, len(chain)):
                s = chain[i].screened
                assert s is not None
                reason = _step_reason(s, _name_of(chain[:i], head), "passed", why)
                chain[i].screened = dataclasses.replace(s, reason=reason)
            self.say(
                f"round {self.rc.k}: the chain's pick is {_name_of(chain[:n], head)} ({top:.3f} against the end "
                f"{chain[-1].name}'s {end:.3f}, more than {margin} above it): "
                + ("it is validated, not the end" if n else "no step of this chain is validated")
            )
        return n


def _room_for_step(ws: Workspace, svc: Services, rc: RoundContext, tasks: int, scoring: int = 0) -> bool:
    """Does the run's budget (its calls, tokens, dollars and hours) pay for one more step on ``tasks``
    train tasks, a checkpoint's ``scoring`` runs, and then the chain's validation with one look
    (``search.budget.room_for_step``: its bank topped up to ``one_look_bank``)? Always, without a
    limit to plan by."""
    if not budget.limited(svc.cfg, svc.rates, svc.seconds_left()):
        return True
    spent, lacks, left = svc.gateway.total(), bank_lacks(ws, svc, rc), svc.seconds_left()
    return budget.room_for_step(svc.cfg, svc.rates, spent, tasks, len(rc.val), lacks, left, scoring)


def render_step(name: str, j: int, steps: int, chain: list[str], head: Head | None = None) -> str:
    """The brief's section for step ``name`` (j of ``steps``) of an explore round."""
    start = "the incumbent"
    if head is not None:
        start = (
            f"the kept head {head.name} (an earlier round's chain, whose edits beat their bases on train;\n"
            "the gate has not accepted them yet)"
        )
    base = f"{start} with the edits of {', '.join(chain)}" if chain else start
    return (
        f"## Your step: {name}, step {j} of {steps}\n\n"
        f"This round chains {steps} edits. The files here are {base}: each earlier edit that beat its\n"
        "base on a batch of train tasks was kept, and the trajectories are this base's runs on a fresh\n"
        "batch. Make one more edit on top of these files; it is kept when it beats this base on these\n"
        "tasks, and only the chain's end is validated. Do not undo the earlier edits unless the\n"
        "trajectories show they hurt.\n\n"
    )


def step_epoch(j: int) -> int:
    """The epoch of step j's runs, its base's and its own: step 1 reads and screens on the round's
    batch (epoch 0); each later step's are fresh samples (``run_cache.STEP_EPOCH``), never the
    runs of the same content on the same task earlier in the round: a kept step's screening runs
    are the ones it was chosen on, and its base on the next step must not inherit that luck."""
    return 0 if j == 1 else STEP_EPOCH + j


def _rebased(
    ws: Workspace, svc: Services, rc: RoundContext, base: Candidate, j: int, tasks: list[Task]
) -> tuple[Candidate, list[TaskResult], int]:
    """A copy of the base's files for step ``j`` and its runs on ``tasks``: those on the first
    ``rollout.batch_size`` (the batch; the rest are ``search.screen_tasks``, screening only) staged
    as the step's trajectories (the copy has the base's content, so those runs are the base's);
    (the copy, all its runs, the runs staged)."""
    name = f"s{j}"
    root = _copy_editable(base.root, rc.scratch / f"base-{name}")
    rebased = dataclasses.replace(base, root=root)
    runs = svc.runner.run(rebased, tasks, rc.k, epochs=[step_epoch(j)], phase="rollout")
    read = {t.id for t in tasks[: svc.cfg.rollout.batch_size]}
    staged = [r for r in runs if r.task_id in read]
    write_trajectories(
        root / "trajectories", staged, harness_commit=rc.parent, target_model=svc.cfg.model.target
    )
    passed = sum(r.passed for r in runs)
    ws.journal.write(rc.k, "rollout", tasks=[r.task_id for r in runs], passed=passed, candidate=name)
    return rebased, runs, len(staged)


def _name_of(chain: list[Proposed], head: Head | None = None) -> str:
    """The base a step was built on: the last kept step, the kept head, or the incumbent."""
    if chain:
        return chain[-1].name
    return f"the kept head {head.name}" if head else "the incumbent"


def _step_reason(s: Screened, base: str, outcome: str, what: str = "") -> str:
    """Why a step was kept (``kept``: a later one built on it), ``dropped``, validated (``end``:
    ``what`` says which state of which chain) or kept and not validated (``passed``: after the
    chain's pick, ``what`` says why)."""
    summary = f"{s.mean_delta:+.3f} on {s.n} train tasks, won {len(s.wins)}, lost {len(s.losses)}"
    beat = "beat" if s.mean_delta > 0 else "matched (search.ties_move)"
    if outcome == "end":
        return f"validated: {what}; {beat} {base} on train ({summary})"
    if outcome == "passed":
        return f"not validated: {what}; {beat} {base} on train ({summary})"
    if outcome == "kept":
        return f"not validated: {beat} {base} on train ({summary}); a later step built on it"
    return f"not validated: did not beat {base} on train ({summary}); dropped"


def _end(chain: list[Proposed], head: Head | None = None, marks: checkpoints.Marks | None = None) -> None:
    """The chain's end (with ``marks``, its pick: ``chain`` up to it) is the round's one winner: its
    diff and summary are the whole chain's, from main (the kept head's edits included)."""
    if not chain:
        return
    end = chain[-1]
    assert end.screened is not None
    names = " -> ".join([*([head.name] if head else []), *(p.name for p in chain)])
    what = f"the chain's end ({names})"
    if marks is not None and end.checkpoint is not None:
        which = "pick" if marks.scored[-1][0] != len(chain) else "end"
        what = f"the chain's {which} ({names}), scored {end.checkpoint:.3f} on the fixed train tasks"
    reason = _step_reason(end.screened, _name_of(chain[:-1], head), "end", what)
    end.screened, end.rank = dataclasses.replace(end.screened, chosen=True, reason=reason), 0
    if len(chain) > 1 or head is not None:
        changed = sorted({*(head.changed if head else []), *(c for p in chain for c in p.copied.changed)})
        violations = sorted({v for p in chain for v in p.copied.violations})
        ignored = sorted({i for p in chain for i in p.copied.ignored})
        end.copied = CopyBackResult(changed=changed, violations=violations, ignored=ignored)
        lines = [(p.name, p.proposal.summary) for p in chain]
        if head is not None:
            lines.insert(0, (f"{head.name} (the kept head)", head.title))
        titles = "; ".join(text.splitlines()[0] if text else "" for _, text in lines)
        body = "\n\n".join(f"{who}: {text}" for who, text in lines)
        end.proposal = dataclasses.replace(end.proposal, summary=f"{names}: {titles}"[:200] + "\n\n" + body)
