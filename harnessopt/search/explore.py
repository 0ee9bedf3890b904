"""Explore (``search.explore: E``): E proposals chained in one round, only the chain's end validated.

Step 1 is built on the incumbent and screened on the round's train batch, as a round with one
candidate and a screen floor would be. A step that beats its base there (the paired train
difference strictly above 0: GEPA's acceptance rule, on ``rollout.batch_size`` tasks) becomes the
base of the next step; one that does not is dropped, and the next step starts from the same base.
Each later step reads the base's runs on a fresh train batch (the base runs it, as the incumbent
runs the round's batch) and is screened on that batch. After E steps the chain's end, if any step
moved it, goes to smoke and validation against the incumbent as the round's one candidate: its
cumulative diff is what the leakage and memorised checks, the gate, the commit and the review see.

Train is not val: choosing along the chain on train costs the val gate nothing, and main moves
only through the gate (docs/optimizer.md, "Explore"; the yield benchmark's "explore" row).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path

from harnessopt.optimizer.view import CopyBackResult
from harnessopt.protocols import Announce, Task, TaskResult
from harnessopt.rollout.runner import Candidate, outcomes
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.round.context import RoundContext
from harnessopt.round.propose import check, propose
from harnessopt.round.services import Services
from harnessopt.search.clusters import Focus
from harnessopt.search.screen import Screened, screen
from harnessopt.search.state import Proposed, Search
from harnessopt.util import interrupts
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace

STEP_FLOOR = 1e-9  # a step moves the chain only when strictly better than its base on the batch


def explore(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    train: list[TaskResult],
    view: Path,
    say: Announce,
    batch_of: Callable[[int], list[Task]],
) -> Search:
    """The round's chain of ``search.explore`` steps; its end (if it moved) is the one winner.

    ``train``: the incumbent's runs on the round's batch (step 1's trajectories and its bar).
    ``batch_of(j)``: the fresh train batch of step j > 1."""
    steps = svc.cfg.search.explore
    by_id = {t.id: t for t in ws.tasks("train")}
    batch = list({r.task_id: by_id[r.task_id] for r in train if r.task_id in by_id}.values())
    base, base_runs, chain = rc.incumbent, train, list[Proposed]()
    found = Search([])
    for j in range(1, steps + 1):
        name = f"s{j}"
        if j > 1:  # a fresh batch: the base's runs on it are the step's trajectories and its bar
            batch = batch_of(j)
            base, base_runs = _rebased(ws, svc, rc, base, name, batch)
        step = dataclasses.replace(rc, incumbent=base)
        brief = render_step(name, j, steps, [p.name for p in chain])
        sview = view.with_name(f"{view.name}-{name}")
        proposal, snapshot = propose(ws, svc, step, sview, len(base_runs), say, name=name, focus_md=brief)
        interrupts.check()
        copied, candidate, ending = check(ws, svc, step, proposal, snapshot, name=name)
        p = Proposed(name, Focus(f"step {j}"), proposal, snapshot, copied, candidate, ending)
        found.proposed.append(p)
        if candidate is None or ending is not None:
            continue
        ran = {r.task_id for r in base_runs}
        runs = svc.runner.run(candidate, [t for t in batch if t.id in ran], rc.k, phase="screening")
        interrupts.check()
        (s,) = screen({name: outcomes(runs)}, outcomes(base_runs), floor=STEP_FLOOR)
        base_name = _name_of(chain)
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
    _end(chain)
    ws.journal.write(
        rc.k,
        "explore",
        steps={
            p.name: [round(p.screened.mean_delta, 4) if p.screened else None, p in chain]
            for p in found.proposed
        },
        chain=[p.name for p in chain],
    )
    return found


def render_step(name: str, j: int, steps: int, chain: list[str]) -> str:
    """The brief's section for step ``name`` (j of ``steps``) of an explore round."""
    base = f"the incumbent with the edits of {', '.join(chain)}" if chain else "the incumbent"
    return (
        f"## Your step: {name}, step {j} of {steps}\n\n"
        f"This round chains {steps} edits. The files here are {base}: each earlier edit that beat its\n"
        "base on a batch of train tasks was kept, and the trajectories are this base's runs on a fresh\n"
        "batch. Make one more edit on top of these files; it is kept when it beats this base on these\n"
        "tasks, and only the chain's end is validated. Do not undo the earlier edits unless the\n"
        "trajectories show they hurt.\n\n"
    )


def _rebased(
    ws: Workspace, svc: Services, rc: RoundContext, base: Candidate, name: str, tasks: list[Task]
) -> tuple[Candidate, list[TaskResult]]:
    """A copy of the base's files for step ``name``, with its runs on ``tasks`` staged as the
    step's trajectories (the copy has the base's content, so those runs are the base's)."""
    root = rc.scratch / f"base-{name}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for part in EDITABLE_PATHS:
        if (base.root / part).exists():
            shutil.copytree(base.root / part, root / part, symlinks=True)
    rebased = dataclasses.replace(base, root=root)
    runs = svc.runner.run(rebased, tasks, rc.k, phase="rollout")
    write_trajectories(
        root / "trajectories", runs, harness_commit=rc.parent, target_model=svc.cfg.model.target
    )
    passed = sum(r.passed for r in runs)
    ws.journal.write(rc.k, "rollout", tasks=[r.task_id for r in runs], passed=passed, candidate=name)
    return rebased, runs


def _name_of(chain: list[Proposed]) -> str:
    """The base a step was built on: the last kept step, or the incumbent."""
    return chain[-1].name if chain else "the incumbent"


def _step_reason(s: Screened, base: str, outcome: str, chain: str = "") -> str:
    """Why a step was kept (``kept``: a later one built on it), ``dropped``, or validated (``end``:
    the end of ``chain``)."""
    summary = f"{s.mean_delta:+.3f} on {s.n} train tasks, won {len(s.wins)}, lost {len(s.losses)}"
    if outcome == "end":
        return f"validated: the chain's end ({chain}); beat {base} on train ({summary})"
    if outcome == "kept":
        return f"not validated: beat {base} on train ({summary}); a later step built on it"
    return f"not validated: did not beat {base} on train ({summary}); dropped"


def _end(chain: list[Proposed]) -> None:
    """The chain's end is the round's one winner: its diff and summary are the whole chain's."""
    if not chain:
        return
    end = chain[-1]
    assert end.screened is not None
    names = " -> ".join(p.name for p in chain)
    reason = _step_reason(end.screened, _name_of(chain[:-1]), "end", names)
    end.screened, end.rank = dataclasses.replace(end.screened, chosen=True, reason=reason), 0
    if len(chain) > 1:
        changed = sorted({c for p in chain for c in p.copied.changed})
        violations = sorted({v for p in chain for v in p.copied.violations})
        ignored = sorted({i for p in chain for i in p.copied.ignored})
        end.copied = CopyBackResult(changed=changed, violations=violations, ignored=ignored)
        titles = "; ".join(p.proposal.summary.splitlines()[0] for p in chain)
        body = "\n\n".join(f"{p.name}: {p.proposal.summary}" for p in chain)
        end.proposal = dataclasses.replace(end.proposal, summary=f"{names}: {titles}"[:200] + "\n\n" + body)
