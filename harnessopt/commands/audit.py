"""``harnessopt audit``: the held-out gain of ho/best over ho/round-0 on the test split.

Nothing else ever runs the test split, and a pair is audited once: looking again and again at the
same held-out set until it agrees is selection too (``--force`` overrides, and says so).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from harnessopt.config import Config
from harnessopt.errors import UserError
from harnessopt.gate.policy import make_gate
from harnessopt.gate.stats import audit_stats
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.objective.metrics import side
from harnessopt.protocols import GateDecision, Outcomes, Task
from harnessopt.reporting.progress import RunProgress
from harnessopt.rollout.run_cache import RERUN_EPOCH, SMOKE_RERUN_EPOCH
from harnessopt.rollout.runner import Candidate, outcomes
from harnessopt.round.services import Services, open_services
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace

FlagValues = Sequence[tuple[str, str]]


def run_audit(
    ws: Workspace,
    *,
    epochs: int,
    force: bool,
    say: Callable[[str], None],
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    repo = ws.repo
    base = repo.commit(ledger.ROUND_TAG.format(k=0)).hexsha
    best = ledger.best(repo).commit
    if base == best:
        raise UserError("ho/best is still round 0: nothing to audit yet; run rounds until one is accepted")
    ref = ledger.AUDIT_REF.format(base=base[:12], best=best[:12])
    if (done := ledger.audit_refs(repo, base, best)) and not force:
        earlier = ledger.manifest_data(str(repo.commit(done[0]).message))
        raise UserError(
            f"this pair was audited already (held-out gain {earlier.get('gain', 0):+.3f}, see {done[0]}); "
            "auditing again is selection on the test split: pass --force only if you must"
        )
    tests = ws.tasks("test")
    if not tests:
        raise UserError(
            "the workspace has no test tasks; re-create it with a --split that keeps a test share"
        )
    claimed = claimed_gain(ws, best)
    with measuring(ws, ws.cfg, say, progress) as svc:
        cands = export_states(ws, svc, "audit", {"round-0": base, "best": best})
        say(f"audit: {len(tests)} test tasks x {epochs} epoch(s), ho/round-0 and ho/best")
        svc.runner.expect(0, "audit", 2 * len(tests) * epochs)  # both sides, run one after the other
        base_out = outcomes(svc.runner.run(cands["round-0"], tests, 0, epochs=range(epochs), phase="audit"))
        best_out = outcomes(svc.runner.run(cands["best"], tests, 0, epochs=range(epochs), phase="audit"))
        usage = svc.usage_of_round(0)
        notes = list(svc.gateway.notes)
    report = audit_stats(base_out, best_out, confidence=0.95)
    report.update(
        {"claimed_val_gain": claimed, "epochs": epochs, "base": base, "best": best, "forced": force}
    )
    report["confirmed_gain"] = confirmed_gain(ws, best)  # on runs that did not select the rounds
    if ws.cfg.objective != "task":  # triggering on the held-out split, both sides
        report["trigger"] = {"round-0": side(tests, base_out), "best": side(tests, best_out)}
    report.update(tokens=usage.tokens, cost_usd=usage.cost_usd, notes=notes)
    # a forced audit keeps the looks before it: their commits as parents (the ref moves to the new
    # one, and git log of it shows them all) and their gains in its record (QA: a re-audit replaced
    # the first look at the test split, which is what makes a second one selection)
    # every earlier look, the ones the refs' records keep as parents too (QA: the third forced
    # audit listed only the second)
    tips = [repo.commit(r).hexsha for r in done] if force else []
    report["earlier"] = [
        {"commit": c.hexsha, "gain": ledger.manifest_data(str(c.message)).get("gain")}
        for c in ledger.measurement_records(repo, tips)
    ]
    message = ledger.message(f"harnessopt audit of {best[:10]} over round 0", "", report)
    ledger.record_measurement(repo, ref, best, message, tips)
    ws.journal.write(0, "audit", ref=ref, gain=report["gain"], interval=report["interval"])
    lo, hi = report["interval"]
    for e in report["earlier"]:
        say(
            f"audit: forced: this pair's earlier audit ({e['commit'][:10]}) gave {e['gain']:+.3f}; it is kept"
        )
    say(
        f"held-out gain {report['gain']:+.3f} (95% interval {lo:+.3f} to {hi:+.3f}, n={report['n']}) "
        f"vs claimed on val {claimed:+.3f}; fixed {len(report['fixed'])}, broken {len(report['broken'])}"
    )
    if report["confirmed_gain"] is not None:
        gain = report["confirmed_gain"]
        say(f"audit: the accepted rounds' gains on runs that did not select them add up to {gain:+.3f}")
    for name, t in (report.get("trigger") or {}).items():
        say(
            f"audit: triggering of {name} on test: precision {_pct(t['precision'])}, recall {_pct(t['recall'])}"
        )
    for note in notes:
        say(f"audit: note: {note}")
    return report


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


@contextmanager
def measuring(
    ws: Workspace, cfg: Config, say: Callable[[str], None], progress: RunProgress | None = None
) -> Iterator[Services]:
    """Services for measuring states outside a round (audit, ablate, replay): no optimizer, no
    rollouts kept for a rerun, and the live progress bound when given."""
    with open_services(ws.root, cfg, say, with_optimizer=False, keep_rollouts=False) as svc:
        if progress is not None:  # a bar (or plain lines) per candidate's runs
            progress.bind(svc.gateway.total)
            svc.runner.observers.append(progress)
        yield svc


def export_states(
    ws: Workspace,
    svc: Services,
    name: str,
    revs: Mapping[str, str],
    flags: Mapping[str, FlagValues] | None = None,
) -> dict[str, Candidate]:
    """``skill/`` and ``harness/`` of each labelled commit, exported under the run's scratch dir;
    ``flags`` gives a label's flag values over harnessopt.yaml's (``rollout.runner.Candidate.flags``)."""
    scratch = svc.scratch / name
    shutil.rmtree(scratch, ignore_errors=True)
    cands = {}
    for label, sha in revs.items():
        vcs.export(ws.repo, sha, EDITABLE_PATHS, scratch / label)
        cands[label] = Candidate(scratch / label, label, sha, tuple((flags or {}).get(label, ())))
    return cands


def paired_decision(
    svc: Services,
    cand: Candidate,
    base: Candidate,
    tasks: Sequence[Task],
    *,
    round_no: int = 0,
    base_out: Outcomes | None = None,
    cand_out: Outcomes | None = None,
    reruns: RerunMemo | None = None,
) -> tuple[GateDecision, Outcomes, Outcomes]:
    """Both states on ``tasks`` (``gate.epochs`` each; ``base_out`` when already measured), judged
    by the run's gate as in a round: flipped tasks rerun on both sides, the same dead zone.
    ``base_out`` / ``cand_out``: a side's outcomes when already measured (not run again);
    ``reruns``: where the gate's reruns of this pair were kept (replay: run once, then read)."""
    epochs = range(svc.cfg.gate.epochs)
    if base_out is None and cand_out is None:  # both sides, one after the other: one count
        svc.runner.expect(round_no, "incumbent", 2 * len(tasks) * len(epochs))
    if base_out is None:
        base_out = outcomes(svc.runner.run(base, tasks, round_no, epochs=epochs, phase="incumbent"))
    if cand_out is None:
        cand_out = outcomes(svc.runner.run(cand, tasks, round_no, epochs=epochs, phase="incumbent"))
    by_id = {t.id: t for t in tasks}
    rerun_epoch = iter(range(RERUN_EPOCH, SMOKE_RERUN_EPOCH))

    def confirm(ids: Sequence[str]) -> tuple[Outcomes, Outcomes]:
        again, epoch = [by_id[i] for i in ids], [next(rerun_epoch)]

        def run() -> tuple[Outcomes, Outcomes]:
            svc.runner.expect(round_no, "reruns", 2 * len(again))  # both sides: one count
            return (
                outcomes(svc.runner.run(cand, again, round_no, epochs=epoch, phase="reruns")),
                outcomes(svc.runner.run(base, again, round_no, epochs=epoch, phase="reruns")),
            )

        return reruns(f"{','.join(ids)}@{epoch[0]}", run) if reruns is not None else run()

    decision = make_gate(svc.cfg.gate).decide(
        cand_out, base_out, confirm if svc.cfg.gate.confirm_flips else None
    )
    return decision, cand_out, base_out


# (the reruns' key: task ids and epoch, how to run them) -> (candidate's, base's outcomes)
RerunMemo = Callable[[str, Callable[[], tuple[Outcomes, Outcomes]]], tuple[Outcomes, Outcomes]]


def verdict_word(d: GateDecision) -> str:
    """helps (the gate accepts), hurts (below minus the dead zone), or no measurable difference."""
    if d.accept:
        return "helps"
    return "hurts" if d.delta < -d.dead_zone else "no measurable difference"


def confirmed_gain(ws: Workspace, best: str) -> float | None:
    """The accepted rounds' gains on runs that did not select them (``manifest.confirmation``),
    summed along ho/best's history; None when a round on the way has no confirmation."""
    confs = [r.manifest.confirmation for r in ledger.accepted_along(ws.repo, best)]
    if not confs or any(c is None for c in confs):
        return None
    return sum(c.gain for c in confs if c is not None)


def claimed_gain(ws: Workspace, best: str) -> float:
    """The val gain the accepted rounds leading to ho/best claimed, summed along its history."""
    return sum(r.manifest.delta or 0.0 for r in ledger.accepted_along(ws.repo, best))
