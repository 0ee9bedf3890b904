"""Several candidates a round (``search.candidates``): steps 3 and 4 once per candidate, then the
screening on train that picks which go on to smoke and validation (docs/optimizer.md, "Search").

Each candidate has its own view, brief (aimed at a failure cluster of the round's train runs,
``clusters.assign``), candidate directory and saved proposal, and goes through the same
whitelisted copy-back and checks. The candidates that pass the checks run on the same train tasks
as the incumbent (its runs are already paid for; ``search.screen_tasks`` adds more, which the
incumbent runs too), and ``screen`` picks the winner on train, which costs the val gate nothing.
With one candidate nothing changes: one proposal, no screening.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from pathlib import Path

from harnessopt.gate.policy import make_gate
from harnessopt.ledger import store as ledger
from harnessopt.optimizer.brief import render_focus
from harnessopt.protocols import Announce, Task, TaskResult
from harnessopt.rollout.runner import outcomes
from harnessopt.round.context import RoundContext
from harnessopt.round.propose import check, propose
from harnessopt.round.services import Services
from harnessopt.search import archive
from harnessopt.search.clusters import Focus, assign
from harnessopt.search.screen import alpha_split, screen
from harnessopt.search.state import Proposed, Search, attach
from harnessopt.util import interrupts
from harnessopt.workspace.core import Workspace


def propose_all(
    ws: Workspace, svc: Services, rc: RoundContext, train: list[TaskResult], view: Path, say: Announce
) -> Search:
    """Steps 3 and 4 for each of the round's ``search.candidates`` candidates."""
    k = svc.cfg.search.candidates
    if k == 1:
        proposal, snapshot = propose(ws, svc, rc, view, len(train), say)
        interrupts.check()
        copied, candidate, ending = check(ws, svc, rc, proposal, snapshot)
        return Search([Proposed("", Focus(""), proposal, snapshot, copied, candidate, ending)])
    offer = archive.complementary(archive.archived(ledger.past_rounds(ws.repo), svc.cfg.search.archive))
    focuses = assign(train, k, merge=bool(offer))
    names = [f"c{i}" for i in range(1, k + 1)]
    merge_md = archive.merge_md(ws.repo, offer) if offer else None
    found = Search([], merged=[e.key for e in offer])
    for i, (name, focus) in enumerate(zip(names, focuses, strict=True)):
        taken = [(n, f.label) for j, (n, f) in enumerate(zip(names, focuses, strict=True)) if j != i]
        brief = render_focus(name, k, focus.label, focus.task_ids, taken, merge_md=merge_md)
        cview = view.with_name(f"{view.name}-{name}")
        proposal, snapshot = propose(ws, svc, rc, cview, len(train), say, name=name, focus_md=brief)
        interrupts.check()
        copied, candidate, ending = check(ws, svc, rc, proposal, snapshot, name=name)
        found.proposed.append(Proposed(name, focus, proposal, snapshot, copied, candidate, ending))
    return found


def screen_all(
    ws: Workspace, svc: Services, rc: RoundContext, train: list[TaskResult], found: Search, say: Announce
) -> list[TaskResult]:
    """Run the candidates that passed the checks on train and screen them against the incumbent;
    returns the incumbent's extra train runs (``search.screen_tasks``), for the round's record."""
    cfg = svc.cfg.search
    _drop_duplicates(svc, found)
    viable = [p for p in found.proposed if p.viable]
    if not viable:
        return []
    if len(viable) == 1 and cfg.screen_floor is None:  # nothing to choose between: no screening runs
        attach(found.proposed, screen({viable[0].name: {}}, {}))
        return []
    tasks, extra = screen_tasks(ws.tasks("train"), train, cfg.screening_only, rc.k)
    for p in viable:  # all candidates' runs queued at once: the executor keeps every slot busy
        assert p.candidate is not None
        svc.runner.prefetch(p.candidate, [(t, 0) for t in tasks], rc.k, phase="screening")
    more = svc.runner.run(rc.incumbent, extra, rc.k, phase="rollout") if extra else []
    say(f"round {rc.k}: screening {len(viable)} candidates on {len(tasks)} train tasks")
    runs = {}
    for p in viable:
        assert p.candidate is not None
        runs[p.name] = outcomes(svc.runner.run(p.candidate, tasks, rc.k, phase="screening"))
        interrupts.check()
    screened = screen(runs, outcomes([*train, *more]), keep=cfg.winners, floor=cfg.screen_floor)
    attach(found.proposed, screened)
    found.screen_tasks = [t.id for t in tasks]
    ws.journal.write(
        rc.k, "screen", candidates={s.name: [round(s.mean_delta, 4), s.chosen, s.reason] for s in screened}
    )
    for s in screened:
        say(f"round {rc.k}: candidate {s.name}: {s.reason}")
    return more


def alpha_share(svc: Services, found: Search) -> Services:
    """The services whose gate spends the round's false-accept budget split among the screened
    winners (Bonferroni: each is tested at alpha / n, so the round's chance of a false accept stays
    at most alpha whichever of them is accepted); the same services with one winner."""
    n = alpha_split([p.screened for p in found.proposed if p.screened])
    if n == 1:
        return svc
    g = svc.cfg.gate
    gate_cfg = g.model_copy(update={"confidence": 1.0 - (1.0 - g.confidence) / n})
    cfg = svc.cfg.model_copy(update={"gate": gate_cfg})
    return dataclasses.replace(svc, cfg=cfg, gate=make_gate(gate_cfg))


def _drop_duplicates(svc: Services, found: Search) -> None:
    """A candidate whose skill and harness equal an earlier one's is that one: not screened twice."""
    seen: dict[str, str] = {}
    for p in found.proposed:
        if p.viable and p.candidate is not None:
            cid = svc.store.candidate_id(p.candidate.root)
            if cid in seen:
                p.ending = ("rejected", f"the same edit as {seen[cid]}")
            seen.setdefault(cid, p.name)


def screen_tasks(
    split: Sequence[Task], train: list[TaskResult], extra: int, k: int
) -> tuple[list[Task], list[Task]]:
    """The round's train tasks, then ``extra`` more of the train split (a fixed shuffle per round);
    and those more alone (the ones ``train`` has no run of)."""
    by_id = {t.id: t for t in split}
    batch = [by_id[r.task_id] for r in train if r.task_id in by_id]
    batch = list({t.id: t for t in batch}.values())
    taken = {b.id for b in batch}
    rest = sorted((t for t in split if t.id not in taken), key=lambda t: t.id)
    random.Random(k).shuffle(rest)
    return batch + rest[:extra], rest[:extra]
