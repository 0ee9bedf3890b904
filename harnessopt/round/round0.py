"""Round 0 of harness and joint mode: diagnose the seed harness, and wait for a person's approval.

A full rollout of the train split with the seed harness; a diagnosis agent (the configured
optimizer backend, on a view whose brief is ``render_round0_brief``) reads those trajectories and
writes ``proposals/round-0.md``. harnessopt puts its own failure taxonomy (counts and task ids,
``taxonomy.classify``) in front, notes any of the five review aspects or the decisions the agent
left out, and records it on main (``ledger.round0``). Nothing of ``skill/`` or ``harness/`` changes in
round 0. Until a person approves (``harnessopt approve WS``, ``--yes``, or the prompt on a
terminal), no round runs; after a rejection the next ``run`` diagnoses again, told why the earlier
proposals were rejected. The approved proposal is the plan in the brief of the rounds that follow
(``ledger.round0.plan_to_implement``); they are gated like any round.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harnessopt.errors import UserError
from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.round0 import PROPOSAL_PATH, Round0
from harnessopt.optimizer.brief import render_history, render_round0_brief
from harnessopt.optimizer.view import build_view, copy_back
from harnessopt.protocols import Announce, Task, TaskResult
from harnessopt.rollout.runner import Candidate
from harnessopt.rollout.taxonomy import SCORER_ERROR, classify
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.round import stop
from harnessopt.round.services import Services
from harnessopt.util.text import visible
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace

# What a person decides when asked: ("approve", who) or ("reject", reason); None = decide later.
Decide = Callable[[Round0], tuple[str, str] | None]
BROKEN_PREFIX = "train runs of the incumbent"  # the reason's words when the incumbent cannot run
ASPECTS = ("Tool inventory", "Prompt context", "Loop strategy", "Shape of generated code", "State and memory")
PROPOSAL_CAP = 200_000  # characters of the agent's proposal kept


def required(ws: Workspace) -> bool:
    """Harness and joint mode start with round 0."""
    return ws.cfg.mode in ("harness", "joint")


def next_steps(root: Path) -> str:
    q = shlex.quote(str(root))
    return f"next: harnessopt approve {q}   (or: harnessopt reject {q} --reason '...')"


def ready(ws: Workspace, svc: Services, say: Announce, decide: Decide | None) -> bool:
    """May the rounds of this run start? In harness and joint mode only after an approved round 0:
    writes the proposal when there is none (or the last was rejected), then asks ``decide``."""
    if not required(ws):
        if unused := proposals.unused_plan(ws.repo, ws.cfg.mode):
            say(f"round 0: {unused}")
        return True
    st = proposals.state(ws.repo)
    if st is not None and st.status == "approved":
        return True
    if st is None or st.status == "rejected":
        if st is not None:
            say(f"round 0: the last proposal was rejected ({st.reason}); diagnosing the seed harness again")
        try:
            st = diagnose(ws, svc, say)
        except stop.StopRequested as why:  # STOP (or the deadline) during its rollout or a person's turn
            say(f"round 0: {stop.honour(ws.root) if str(why) == stop.REASON else why}; no proposal recorded")
            return False
    choice = decide(st) if decide is not None else None
    if choice is None:
        say("round 0: the proposal awaits a person's decision; no round runs before it is approved")
        say(next_steps(ws.root))
        return False
    verdict, words = choice
    if verdict == "approve":
        proposals.record_decision(ws.repo, True, "", by=words)
        say(f"round 0: proposal approved ({words}); the next rounds implement it")
        return True
    proposals.record_decision(ws.repo, False, words)
    say(f"round 0: proposal rejected ({words}); the next run diagnoses again")
    return False


def diagnose(ws: Workspace, svc: Services, say: Announce) -> Round0:
    """Roll out all train tasks with the seed harness, have the diagnosis agent write the proposal,
    record it on main. A seed harness that crashes on most tasks is a UserError (nothing recorded).
    What a diagnosis spent is in its proposal's commit; one that recorded none (a broken seed,
    Ctrl-C, an error) writes it to the journal as round 0's ``spend`` line, which ``status`` shows,
    and while it runs ``.harnessopt/spend-live.json`` keeps it (a SIGKILL), as a round's."""
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} has uncommitted changes; commit or stash them, then run again")
    parent = vcs.head_sha(ws.repo)
    scratch = svc.scratch / "round-0"
    shutil.rmtree(scratch, ignore_errors=True)
    for p in EDITABLE_PATHS:
        shutil.copytree(ws.root / p, scratch / "incumbent" / p, ignore=shutil.ignore_patterns("__pycache__"))
    seed = Candidate(scratch / "incumbent", "incumbent", parent)
    train = sorted(ws.tasks("train"), key=lambda t: t.id)
    if not train:
        raise UserError(
            "the workspace has no train tasks; re-create it with a --split that gives train tasks"
        )
    say(f"round 0: rollout of the seed harness on all {len(train)} train tasks")
    ws.journal.write(0, "round0_rollout", parent=parent, tasks=len(train))
    svc.spend.begin(0)  # kept in .harnessopt/spend-live.json meanwhile (a SIGKILL)
    try:
        return _diagnose(ws, svc, say, parent, seed, train)
    finally:  # a diagnosis that recorded no proposal (a broken seed, Ctrl-C) spent all the same
        if svc.spend.tracks(0):
            svc.write_spend(ws.journal, 0)


def _diagnose(
    ws: Workspace, svc: Services, say: Announce, parent: str, seed: Candidate, train: list[Task]
) -> Round0:
    results = svc.runner.run(seed, train, 0, phase="rollout")
    if broken := incumbent_broken(results):
        raise UserError(f"round 0: {broken}; fix the seed harness (or the sandbox), then run again")
    target = svc.cfg.model.target
    write_trajectories(seed.root / "trajectories", results, harness_commit=parent, target_model=target)
    try:
        agent_text, summary, backend, discarded = _diagnosis(ws, svc, seed.root, len(results), say)
    finally:
        svc.gateway.release_round("optimizer", 0)
    text = compose(results, agent_text, summary, backend=backend, parent=parent, target=target)
    data = {
        "version": ledger.MANIFEST_VERSION,
        "round": 0,
        "status": "proposal",
        "parent": parent,
        "mode": ws.cfg.mode,  # the mode that continues it (a run of -c mode=joint)
        "train_tasks": len(results),
        "train_passed": sum(r.passed for r in results),
        "failures": failure_table(results),
        "violations": discarded,
        "tokens": svc.usage_of_round(0).tokens,
        "cost_usd": svc.usage_of_round(0).cost_usd,
    }
    with svc.spend.ending(0):  # its commit holds its spend: out of the live file in one step
        sha = proposals.record_proposal(ws.repo, text, seed.root / "trajectories", data)
    svc.store.clear(0)
    ws.journal.write(0, "round0_proposal", commit=sha)
    if discarded:
        say(
            f"round 0: discarded {len(discarded)} write(s) (round 0 changes no file): {', '.join(discarded[:5])}"
        )
    say(
        f"round 0: proposal written to {ws.root / PROPOSAL_PATH} (commit {sha[:10]}); read it before deciding"
    )
    return Round0(sha, text, "pending")


def _diagnosis(
    ws: Workspace, svc: Services, seed: Path, n: int, say: Announce
) -> tuple[str, str, str, list[str]]:
    """(the agent's proposals/round-0.md, its summary, the backend's name, the other writes it made:
    all discarded, as ``copy_back`` with an empty whitelist finds them)."""
    cfg = svc.cfg
    brief = render_round0_brief(
        cfg.allowed_globs(), cfg.optimizer, n_trajectories=n, rejected=proposals.rejected(ws.repo)
    )
    with _view_dir() as view:
        snap = build_view(seed, view, history_md=render_history(ledger.past_rounds(ws.repo)), brief_md=brief)
        say(f"round 0: diagnosis agent '{cfg.optimizer.backend}' is reading {n} trajectories")
        proposal = svc.propose(view, brief, 0)
        summary = visible(proposal.summary, 20_000).strip()
        if proposal.stopped_by == "stopped":  # STOP during a person's turn: no half-written proposal
            raise stop.StopRequested(stop.REASON)
        if proposal.stopped_by == "error":
            raise UserError(
                f"round 0: the diagnosis agent failed ({summary.splitlines()[0][:300] if summary else 'no reason'}); "
                "fix the optimizer settings, then run again"
            )
        with tempfile.TemporaryDirectory(
            prefix="ho-r0-nothing-"
        ) as nowhere:  # an empty whitelist writes nothing
            found = copy_back(view, Path(nowhere), [], snapshot=snap, read_only=cfg.read_only_globs())
        discarded = [p for p in found.violations if p != PROPOSAL_PATH]
        return _read_proposal(view / PROPOSAL_PATH), summary, cfg.optimizer.backend, discarded


@contextmanager
def _view_dir() -> Iterator[Path]:
    private = Path(tempfile.mkdtemp(prefix="ho-view-r0-"))  # 0700, like every round's view
    try:
        yield private / "view"
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _read_proposal(path: Path) -> str:
    """The agent's file: a regular file only, opened without following a link, capped, made visible."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(PROPOSAL_CAP * 4)
    finally:
        os.close(fd)
    return visible(data.decode("utf-8", "replace"), PROPOSAL_CAP).strip()


def failure_table(results: list[TaskResult]) -> dict[str, list[str]]:
    """Failure class -> the ids of the train tasks that failed that way (taxonomy.classify)."""
    table: dict[str, list[str]] = {}
    for r in sorted(results, key=lambda r: r.task_id):
        if (cls := classify(r)) is not None:
            table.setdefault(cls, []).append(r.task_id)
    return dict(sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0])))


def compose(
    results: list[TaskResult], agent_text: str, summary: str, *, backend: str, parent: str, target: str
) -> str:
    """proposals/round-0.md: the counted taxonomy, then the agent's diagnosis, with any of the
    required sections it left out named."""
    title = next((ln.lstrip("# ").strip() for ln in agent_text.splitlines() if ln.strip()), "")
    title = title or (summary.splitlines()[0] if summary else "round-0 diagnosis")
    passed = sum(r.passed for r in results)
    lines = [f"# Round 0 proposal: {title[:200]}", ""]
    lines += [
        f"Seed harness at commit {parent[:12]}, target model {target}: {passed}/{len(results)} "
        "train tasks passed. Trajectories: trajectories/ in this commit.",
        "",
        "## Failure taxonomy (counted by harnessopt)",
        "",
    ]
    table = failure_table(results)
    lines += [f"- {cls}: {len(ids)} ({', '.join(ids)})" for cls, ids in table.items()] or ["- no failure"]
    lines += ["", f"## Diagnosis (written by the diagnosis agent, backend {backend})", ""]
    if agent_text:  # its title is the proposal's; its own sections follow
        body = "\n".join(
            agent_text.splitlines()[1:] if agent_text.startswith("# ") else agent_text.splitlines()
        )
    else:
        body = f"(the agent wrote no {PROPOSAL_PATH}; its summary follows)\n\n{summary}"
    lines += [body.strip(), ""]
    missing = [a for a in (*ASPECTS, "Decisions") if a.lower() not in agent_text.lower()]
    if missing:
        lines += [f"Note: the diagnosis does not cover: {', '.join(missing)}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def incumbent_broken(train: list[TaskResult]) -> str | None:
    """Why the incumbent cannot be optimized right now: most train runs crashed or timed out
    (a missing CLI, a wrong image, a broken harness). The harness's own last stderr lines say why:
    a Python traceback ends with its error, which its first lines never hold."""
    crashed = [r for r in train if r.crashed]
    if not train:
        return None
    if 2 * len(crashed) <= len(train):
        return _unscored(train)
    kinds = ", ".join(sorted({str(r.error_class) for r in crashed}))
    said = next((r.stderr_tail for r in crashed if r.stderr_tail.strip()), "")
    lines = [x.strip() for x in said.strip().splitlines() if x.strip(" ^~\t")]  # not 3.11's ^^^ marks
    first = " | ".join(lines[-3:])
    codes = sorted({r.exit_code for r in crashed if r.exit_code is not None})
    exits = f" (exit code {', '.join(map(str, codes))})" if codes else ""
    return (
        f"{len(crashed)}/{len(train)} {BROKEN_PREFIX} failed ({kinds}){exits} before any optimizer "
        f"call; the harness said: {first or '(nothing on stderr)'}"
    )


def _unscored(train: list[TaskResult]) -> str | None:
    """Why the incumbent's runs say nothing: the scorer failed on most of them (every run scores 0,
    the optimizer would read failures the answers never had, and no round could gain)."""
    errors = [e for r in train if (e := next((n for n in r.notes if n.startswith(SCORER_ERROR)), None))]
    if 2 * len(errors) <= len(train):
        return None
    return (
        f"{len(errors)}/{len(train)} {BROKEN_PREFIX} could not be scored before any optimizer call (the "
        f"scorer failed: {errors[0].removeprefix(SCORER_ERROR + ': ')[:300]}); fix scorer.py and commit it"
    )


def describe(st: Round0) -> list[str]:
    """Lines shown before a person decides: where the proposal is and its first lines."""
    head = [ln for ln in st.text.splitlines() if ln.strip()][:40]
    return [*head, "", f"(the whole proposal: {PROPOSAL_PATH}, commit {st.commit[:10]})"]
