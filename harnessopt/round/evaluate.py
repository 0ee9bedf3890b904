"""The candidate against the incumbent: the incumbent's val outcomes (and the noise floor), the
smoke test, validation, the gate and the confirmation of an accept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harnessopt.gate.bank import CHANGED_CONFIDENCE, IncumbentBank, changed_since, first_look
from harnessopt.gate.confirmation import confirmation_record
from harnessopt.gate.noise_floor import NoiseFloorStore, measure
from harnessopt.gate.noise_floor import lines as noise_lines
from harnessopt.gate.policy import futile_decision, make_gate, spent_decision
from harnessopt.gate.smoke import smoke_verdict
from harnessopt.gate.stats import mean, run_alpha_for, task_means
from harnessopt.ledger import store as ledger
from harnessopt.objective import both
from harnessopt.protocols import Announce, GateDecision, GatePolicy, Outcomes, Task, TaskResult
from harnessopt.rollout.run_cache import (
    CONFIRM_EPOCH,
    CRASH_RERUN_EPOCH,
    PROBE_EPOCH,
    RERUN_EPOCH,
    SMOKE_RERUN_EPOCH,
)
from harnessopt.rollout.runner import Candidate, outcomes
from harnessopt.rollout.val_cache import ValCache, digest, environment_key, key_parts
from harnessopt.round.context import Ending, RoundContext
from harnessopt.round.services import Services
from harnessopt.search import budget
from harnessopt.workspace.core import Workspace

FUTILITY_EVERY = 5  # validation checks for futility every this many tasks (or `concurrency`)


def incumbent_outcomes(
    ws: Workspace, svc: Services, rc: RoundContext, say: Announce, top_up: int | None = None
) -> tuple[Outcomes, dict[str, Any] | None]:
    """The incumbent's val outcomes: cached under everything that changes a rollout or a score
    (``rollout.val_cache.key_parts``) unless re-running is asked. The first measurement under an environment
    (round 1, or after a scorer, task, model, sandbox or limit change) runs it twice: an A/A test
    whose noise floor (``gate.noise_floor.measure``) is printed, stored and returned. ``top_up``: the runs
    a val task the bank is topped up to (a validation planned for one look: ``budget.one_look_bank``);
    by default ``gate.banked_epochs``, the whole bank."""
    cache, floors = ValCache(svc.state_dir), NoiseFloorStore(svc.state_dir)
    g = svc.cfg.gate
    epochs, banked = g.epochs, g.banked_epochs if top_up is None else top_up
    parts, cached, short = _bank(ws, svc, rc, banked)
    if cached is not None and not short:
        return cached, None
    aa = cached is None and floors.get(environment_key(parts)) is None
    have = {t.id: len((cached or {}).get(t.id, ())) for t in short}
    lacking = banked - min(have.values())
    twice = ""
    if aa and banked < 2 * epochs:  # the A/A test's second arm: `epochs` more runs a task
        arm = "twice" if lacking == epochs else f"then x {epochs} again"
        twice = f", {arm} (an A/A test: the noise floor)"
    say(
        f"round {rc.k}: measuring the incumbent on {len(short)} val tasks x {lacking} "
        f"epoch(s){twice}" + (f" ({epochs} for the first look, the rest banked)" if banked > epochs else "")
    )
    got = {t: list(runs) for t, runs in (cached or {}).items()}
    earlier = cached or {}  # what the bank held before this top-up (``got`` extends copies of it)
    second = len(rc.val) * epochs if twice else 0  # the A/A test's second arm, after the bank
    svc.runner.expect(rc.k, "incumbent", sum(banked - n for n in have.values()) + second)
    for n in sorted(set(have.values())):  # a top-up runs only the epochs a task lacks
        tasks = [t for t in short if have[t.id] == n]
        res = svc.runner.run(rc.incumbent, tasks, rc.k, epochs=range(n, banked), phase="incumbent")
        if svc.gate.bank_first_look:  # the bank is the incumbent's side of every look: no outage in it
            res = rerun_crashed(svc, rc, tasks, res)
        for t, runs in outcomes(res).items():
            got.setdefault(t, []).extend(runs)
    later = {t: got[t][len(runs) :] for t, runs in earlier.items() if len(got[t]) > len(runs)}
    # not cached: every round sees it; an outage's runs (scored 0, no evidence) are the outage's to say
    if cached is not None and (change := changed_since(earlier, later)) and not svc.gateway.upstream_down():
        delta, z, n = change
        why = (
            f"the incumbent scores lower now than when it was confirmed ({delta:+.3f} on {n} val tasks, z {z:.1f}, "
            f"one-sided {CHANGED_CONFIDENCE:.2%}): its skill or harness behaves differently "
            "later (reads the time or the task's split?), or the model changed; no candidate can be judged "
            f"against it: review the round that accepted it (harnessopt diff, harnessopt rollback)"
        )
        ws.journal.write(rc.k, "incumbent_changed", delta=delta, z=z, n=n)
        raise IncumbentChanged(why)
    cache.put(digest(parts), got)
    ws.journal.write(rc.k, "incumbent_val", n=len(got), score=_mean_score(got))
    if not aa:
        return got, None
    if banked >= 2 * epochs:  # the A/A test on the banked runs: no extra run
        again = {t: runs[epochs : 2 * epochs] for t, runs in got.items()}
    else:
        again = outcomes(
            svc.runner.run(rc.incumbent, rc.val, rc.k, epochs=range(epochs, 2 * epochs), phase="incumbent")
        )
    nf = {**measure(first_look(got, epochs), again, svc.cfg.gate), "measured_round": rc.k}
    floors.put(environment_key(parts), nf)
    for line in noise_lines(nf):
        say(f"round {rc.k}: {line}")
    ws.journal.write(rc.k, "noise_floor", **nf)
    return got, nf


class IncumbentChanged(Exception):
    """The incumbent's topped-up bank scores significantly lower than its earlier runs: the round
    fails with this reason (``gate.bank.changed_since``)."""


def _bank(
    ws: Workspace, svc: Services, rc: RoundContext, runs: int
) -> tuple[dict[str, str], Outcomes | None, list[Task]]:
    """The incumbent's val cache key parts, its cached runs (None: none, or ``rerun_incumbent``) and
    the val tasks with fewer than ``runs`` of them."""
    return _bank_of(ws, svc, rc.parent, rc.val, runs)


def _bank_of(
    ws: Workspace, svc: Services, parent: str, val: Sequence[Task], runs: int
) -> tuple[dict[str, str], Outcomes | None, list[Task]]:
    parts = key_parts(ws.repo, parent, svc.cfg, svc.sandbox)
    cached = None if svc.cfg.gate.rerun_incumbent else ValCache(svc.state_dir).get(digest(parts))
    short = [t for t in val if len((cached or {}).get(t.id, ())) < runs]
    return parts, cached, short


def bank_lacks(ws: Workspace, svc: Services, rc: RoundContext) -> budget.Lacks:
    """Runs the incumbent's bank lacks on val before it holds ``n`` a task (``incumbent_outcomes``
    runs them), the A/A test's second pass included: read once, asked for any ``n``."""
    return bank_lacks_of(ws, svc, rc.parent, rc.val)


def bank_lacks_of(ws: Workspace, svc: Services, parent: str, val: Sequence[Task]) -> budget.Lacks:
    """``bank_lacks`` for the skill and harness of commit ``parent`` on the gate's ``val`` tasks:
    what the driver asks of main before it starts a round."""
    g = svc.cfg.gate
    parts, cached, _ = _bank_of(ws, svc, parent, val, 0)
    have = [len((cached or {}).get(t.id, ())) for t in val]
    aa = cached is None and NoiseFloorStore(svc.state_dir).get(environment_key(parts)) is None

    def lacks(n: int) -> int:
        return sum(max(0, n - h) for h in have) + (len(val) * g.epochs if aa and n < 2 * g.epochs else 0)

    return lacks


def looks_that_fit(ws: Workspace, svc: Services, rc: RoundContext, say: Announce) -> int:
    """The gate's looks this round's validation plans for, before it runs (``search.budget.looks``):
    2, or 1 when the run's budget pays for validating with the first look but not the second; a plan
    made from the budget alone, so the one look may spend all of alpha."""
    if not budget.limited(svc.cfg, svc.rates, svc.seconds_left()):
        return 2
    spent, lacks = svc.gateway.total(), bank_lacks(ws, svc, rc)
    if budget.looks(svc.cfg, svc.rates, spent, len(rc.val), lacks, svc.seconds_left()) == 2:
        return 2
    left = budget.runs_left(svc.cfg, svc.rates, spent, svc.seconds_left()) or 0.0
    g = svc.cfg.gate
    bank = budget.one_look_bank(g)
    against = (
        f", against the incumbent's bank topped up to {bank} runs a val task, not {g.banked_epochs}"
        if bank < g.banked_epochs
        else ""
    )
    say(
        f"round {rc.k}: the budget left (about {left:,.0f} target runs) pays for validating with the "
        f"gate's first look, not its second: this validation is judged on one look at the whole alpha{against}"
    )
    return 1


def rerun_crashed(
    svc: Services,
    rc: RoundContext,
    tasks: Sequence[Task],
    results: list[TaskResult],
    who: Candidate | None = None,
    phase: str = "incumbent",
) -> list[TaskResult]:
    """A bank's runs (the incumbent's, or ``who``'s) with each crashed one run once more (at
    ``CRASH_RERUN_EPOCH`` plus its epoch); the rerun takes its place, and a crash that reproduces
    stays, scoring 0 (docs/gate.md, "The banked gate": the gate reruns the candidate's own)."""
    crashed = [r for r in results if r.crashed]
    by_id = {t.id: t for t in tasks}
    again: dict[tuple[str, int], TaskResult] = {}
    for e in sorted({r.epoch for r in crashed}):
        redo = [by_id[r.task_id] for r in crashed if r.epoch == e and r.task_id in by_id]
        for r in svc.runner.run(who or rc.incumbent, redo, rc.k, epochs=[CRASH_RERUN_EPOCH + e], phase=phase):
            again[(r.task_id, e)] = r
    return [again.get((r.task_id, r.epoch), r) if r.crashed else r for r in results]


def probe_jobs(svc: Services, rc: RoundContext) -> list[tuple[Task, int]]:
    """The incumbent's rerun of the first smoke task, made while the optimizer works: when a
    candidate crashes there twice, the smoke test has the incumbent's side at once (one run a round)."""
    return [(t, PROBE_EPOCH) for t in smoke_tasks(rc.val, svc.cfg.gate.smoke)[:1]]


def probe(svc: Services, rc: RoundContext) -> list[TaskResult]:
    """The probe's result (``probe_jobs``): its own phase of the round."""
    jobs = probe_jobs(svc, rc)
    return (
        svc.runner.run(rc.incumbent, [t for t, _ in jobs], rc.k, epochs=[PROBE_EPOCH], phase="probe")
        if jobs
        else []
    )


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
    incumbent does not have rejects (``gate.smoke.smoke_verdict``).

    Validation's first runs start in the slots the smoke test leaves free (``Runner.prefetch``);
    a rejection drops them."""
    tasks = smoke_tasks(rc.val, svc.cfg.gate.smoke)
    if not tasks:
        return [], None
    say(f"round {rc.k}: smoke test of the candidate on {len(tasks)} val tasks")
    ahead = _SmokeAhead(svc, rc, cand, validation_jobs(svc, rc, tasks)[: svc.cfg.rollout.concurrency])
    svc.runner.observers.append(ahead)
    try:
        results = svc.runner.run(cand, tasks, rc.k, phase="smoke")
    finally:
        svc.runner.observers.remove(ahead)
    crashed = [t for t in tasks if any(r.crashed for r in results if r.task_id == t.id)]
    again: tuple[Outcomes, Outcomes] = ({}, {})
    if crashed:  # a flake must not reject: the same tasks once more, on both sides
        say(f"round {rc.k}: smoke test: {len(crashed)} crashed; rerunning them once on both sides")
        cand_again = outcomes(svc.runner.run(cand, crashed, rc.k, epochs=[SMOKE_RERUN_EPOCH], phase="reruns"))
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

    def started(
        self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int], phase: str
    ) -> None:
        return None

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        if label != self.cand.label or result.epoch != 0:
            return
        if result.crashed:
            self.svc.runner.prefetch(
                self.cand, [(self.by_id[result.task_id], SMOKE_RERUN_EPOCH)], self.rc.k, phase="reruns"
            )
        elif self.first:
            self.svc.runner.prefetch(self.cand, self.first, self.rc.k, phase="validation")
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
        {
            **got,
            **outcomes(svc.runner.run(rc.incumbent, rest, rc.k, epochs=[SMOKE_RERUN_EPOCH], phase="reruns")),
        }
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
    svc.runner.expect(rc.k, "validation", len(again) * (epochs - 1) + len(rest) * epochs)
    plan, used = validation_jobs(svc, rc, again), 0
    results = list(smoked)
    if epochs > 1 and again:
        used += len(again) * (epochs - 1)
        svc.runner.prefetch(cand, plan[used : used + conc], rc.k, phase="validation")
        results += svc.runner.run(cand, again, rc.k, epochs=range(1, epochs), phase="validation")
    chunk = _chunk(svc)
    first = inc if svc.gate.bank_first_look else first_look(inc, epochs)
    for i in range(0, len(rest), chunk):
        if svc.gate.futile(outcomes(results), first, [t.id for t in rest[i:]], svc.cfg.gate.confirm_flips):
            say(f"round {rc.k}: validation stopped for futility; {len(rest) - i} val tasks not run")
            ws.journal.write(rc.k, "prefetch_dropped", runs=len(svc.runner.drop_prefetched()))
            break
        used += len(rest[i : i + chunk]) * epochs
        svc.runner.prefetch(cand, plan[used : used + conc], rc.k, phase="validation")
        results += svc.runner.run(cand, rest[i : i + chunk], rc.k, epochs=range(epochs), phase="validation")
    ws.journal.write(rc.k, "validate", n=len(results), score=_mean_score(outcomes(results)))
    return results


def validation_jobs(svc: Services, rc: RoundContext, smoked: Sequence[Task]) -> list[tuple[Task, int]]:
    """Validation's runs in the order ``validate`` asks for them: the smoke tasks' other epochs,
    then the rest of val chunk by chunk (what ``Runner.prefetch`` may start ahead)."""
    epochs = svc.cfg.gate.epochs
    ids = {t.id for t in smoked}
    rest = [t for t in rc.val if t.id not in ids]
    chunk = _chunk(svc)
    jobs = [(t, e) for e in range(1, epochs) for t in smoked]
    for i in range(0, len(rest), chunk):
        jobs += [(t, e) for e in range(epochs) for t in rest[i : i + chunk]]
    return jobs


def _chunk(svc: Services) -> int:
    """Validation's chunk: a futility check every ``FUTILITY_EVERY`` tasks (at least ``concurrency``)."""
    return max(FUTILITY_EVERY, svc.cfg.rollout.concurrency)


def gate(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    cand: Candidate,
    cand_val: list[TaskResult],
    inc: Outcomes,
    one_look: bool = False,
) -> GateDecision:
    """The gate's decision on the candidate's val runs; ``one_look``: the budget left pays for the
    first look only (``looks_that_fit``), which the gate then judges at the whole alpha."""
    by_id = {t.id: t for t in rc.val}
    rerun_epoch = iter(range(RERUN_EPOCH, SMOKE_RERUN_EPOCH))
    bank = IncumbentBank(inc, svc.cfg.gate.epochs)  # the incumbent's runs past the first look
    banked = svc.gate.bank_first_look  # the gate reads the whole bank; its reruns are the candidate's
    inc = inc if banked else bank.first

    def confirm(ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        epoch = next(rerun_epoch)
        tasks = [by_id[i] for i in ids]
        if banked and len(tasks) == len(by_id):  # the second look: its next run of every task starts
            svc.runner.prefetch(cand, [(t, epoch + 1) for t in tasks], rc.k, phase="reruns")  # in free slots
        again = svc.runner.run(cand, tasks, rc.k, epochs=[epoch], phase="reruns")
        if banked:
            return outcomes(again), {}
        base = bank.draw(
            ids,
            lambda miss: outcomes(
                svc.runner.run(rc.incumbent, [by_id[i] for i in miss], rc.k, epochs=[epoch], phase="reruns")
            ),
        )
        return outcomes(again), base

    cand_out = outcomes(cand_val)
    left = [t.id for t in rc.val if t.id not in cand_out]  # validation stopped for futility
    policy = _round_policy(ws, svc, both.SHARE if svc.cfg.objective == "both" else 1.0, one_look)
    if policy is None:
        d = spent_decision(svc.cfg.gate)
    elif left and svc.gate.futile(cand_out, inc, left, svc.cfg.gate.confirm_flips):
        bar = getattr(svc.gate, "futility_bar", None)  # a policy of your own may have none
        d = futile_decision(
            cand_out,
            inc,
            left,
            svc.cfg.gate.epochs,
            bar(cand_out, inc, left, svc.cfg.gate.confirm_flips) if callable(bar) else None,
            alpha=_round_alpha(ws, svc, 1.0, one_look),  # it could accept until it stopped: spent
        )
    elif svc.cfg.objective == "both":  # task score and triggering, each at alpha/2
        d = both.decide(rc.val, cand_out, inc, policy, confirm if svc.cfg.gate.confirm_flips else None)
    else:
        d = policy.decide(cand_out, inc, confirm if svc.cfg.gate.confirm_flips else None)
    d.details.update(incumbent_banked_runs=bank.drawn)
    if one_look:  # the budget's last validation: no second look fitted
        d.details.update(looks_planned=1)
        d.reason += "; one look at the whole alpha: the budget left paid for no second"
    ws.journal.write(rc.k, "gate", accept=d.accept, reason=d.reason, delta=d.delta, dead_zone=d.dead_zone)
    return d


def _round_policy(
    ws: Workspace, svc: Services, share: float = 1.0, one_look: bool = False
) -> GatePolicy | None:
    """The gate of this round: with ``gate.run_alpha`` its level is this decision's share of the
    run's budget (``stats.run_alpha_for``); None once that budget is spent. ``share``: the part of
    that level one gate of the round may spend (objective both: two gates, each half). ``one_look``:
    without its second look (the incumbent's bank as it is), so the first look has the whole level."""
    g = svc.cfg.gate
    if g.run_alpha is None and share == 1.0 and not one_look:
        return svc.gate
    alpha = _round_alpha(ws, svc, share, one_look)
    g = budget.one_look(g) if one_look else g
    return make_gate(g.model_copy(update={"confidence": 1.0 - alpha})) if alpha > 0 else None


def _round_alpha(ws: Workspace, svc: Services, share: float = 1.0, one_look: bool = False) -> float:
    """The level `_round_policy`'s gate tests at: ``1 - gate.confidence``, with ``gate.run_alpha``
    this decision's share of the run's budget (every earlier round that spent any counts, a
    validation stopped for futility too), times ``share``."""
    g = budget.one_look(svc.cfg.gate) if one_look else svc.cfg.gate
    decided = sum(r.manifest.gate.alpha is not None for r in ledger.past_rounds(ws.repo))
    alpha = 1.0 - g.confidence
    if g.run_alpha is not None:
        alpha = min(alpha, run_alpha_for(g.run_alpha, g.run_rounds, decided + 1))
    return alpha * share


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
    svc.runner.expect(rc.k, "reruns", 2 * len(tasks) * len(epochs))  # both sides: one count
    svc.runner.prefetch(
        rc.incumbent, [(t, e) for e in epochs for t in tasks], rc.k, phase="reruns"
    )  # in free slots
    got = outcomes(svc.runner.run(cand, tasks, rc.k, epochs=epochs, phase="reruns"))
    base = outcomes(svc.runner.run(rc.incumbent, tasks, rc.k, epochs=epochs, phase="reruns"))
    rec = confirmation_record(got, base, mode, _families(svc, tasks))
    say(f"round {rc.k}: {rec['summary']}")
    ws.journal.write(rc.k, "confirm", **rec)
    return rec


def confirm_banked(
    ws: Workspace,
    svc: Services,
    rc: RoundContext,
    cand: Candidate | None,
    d: GateDecision | None,
    bank: Outcomes,
    say: Announce,
) -> tuple[dict[str, Any] | None, Outcomes]:
    """The banked gate's confirmation (``gate.confirm: val``): the accepted candidate measured fresh
    on val, ``gate.confirm_epochs`` runs a task (crashes rerun once, as any bank's), against the
    incumbent's bank. Neither side's runs selected the candidate, so the gain between them is free
    of the gate's selection. The runs start the new incumbent's bank: ``incumbent_outcomes`` tops
    it up to ``incumbent_epochs`` in the next round that validates, and only then, so the last
    accept of a run pays for its confirmation and not for a bank nothing will use. Returns the
    record and the runs."""
    if cand is None or d is None or not d.accept:
        return None, {}
    g = svc.cfg.gate
    n = g.confirm_runs
    rest = f", topped up to {g.banked_epochs} when a round next validates" if n < g.banked_epochs else ""
    say(
        f"round {rc.k}: confirming on {len(rc.val)} val tasks x {n} fresh runs (the new incumbent's bank{rest})"
    )
    epochs = range(CONFIRM_EPOCH, CONFIRM_EPOCH + n)
    got = svc.runner.run(cand, rc.val, rc.k, epochs=epochs, phase="reruns")
    fresh = outcomes(rerun_crashed(svc, rc, rc.val, got, who=cand, phase="reruns"))
    rec = confirmation_record(fresh, {t: bank[t] for t in fresh if t in bank}, "val", _families(svc, rc.val))
    say(f"round {rc.k}: {rec['summary']}")
    ws.journal.write(rc.k, "confirm", **rec)
    return rec, fresh


def _families(svc: Services, tasks: Sequence[Task]) -> dict[str, set[str]] | None:
    """``objective: both``: each family's task ids, which its confirmation judges one by one."""
    return both.family_ids(tasks) if svc.cfg.objective == "both" else None


def final_ending(d: GateDecision, confirmation: dict[str, Any] | None, confirm_moves_main: bool) -> Ending:
    """The round's status and reason: the gate's verdict, unless the runs that did not select an
    accepted candidate failed to confirm its gain (``gate.confirm_moves_main``): then main does not
    move and the round is a rejection that says so (docs/gate.md, "What is controlled")."""
    if not d.accept:
        return "rejected", d.reason
    if confirmation is not None and not confirmation.get("confirmed") and confirm_moves_main:
        return "rejected", f"rejected: {confirmation['summary']}; main does not move (the gate: {d.reason})"
    return "accepted", d.reason


def _mean_score(got: Outcomes) -> float | None:
    per_task = list(task_means(got).values())
    return round(mean(per_task), 4) if per_task else None
