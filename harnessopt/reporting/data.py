"""Everything ``harnessopt report`` shows, gathered from git (through the ledger) as plain data.

Kept apart from the rendering (``reporting.html``) so that tests, ``log --json`` readers and MLflow
read the same numbers the plots draw.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.ledger.lock import live_holder
from harnessopt.ledger.manifest import objective_gates, pooled_dead_zone
from harnessopt.ledger.store import Round
from harnessopt.reporting.adoption import adoption
from harnessopt.reporting.gate_evidence import evidence_lines
from harnessopt.reporting.log import (
    incumbent_line,
    interrupted_spend,
    last_run_parts,
    last_run_settings,
    measured_line,
    projected_vs_spent,
    reason_line,
    rollback_of,
    round_diff,
)
from harnessopt.reporting.triggering import trigger_row
from harnessopt.rollout.taxonomy import FAILURE_CLASSES, describe, merged
from harnessopt.workspace import flags
from harnessopt.workspace.core import Workspace

OUTCOMES = ("improved", "regressed", "no change", "not measured")
CELLS = ("fixed", "broken", "unchanged")
FLAKY_MIN_GROUPS = 1  # a task shows in the flaky table once one group of identical reruns disagreed


def proposal_outcome(r: Round) -> str:
    """improved: accepted; regressed: Δ below minus the dead zone; no change: a no-op or Δ inside
    the zone; not measured: the round ended before the gate (failed, smoke, static check)."""
    m = r.manifest
    if r.status == "accepted":
        return "improved"
    if r.status == "noop":
        return "no change"
    if parts := objective_gates(m):  # either family significantly lower (its veto; before it, its dead zone)
        lower = any(
            p["lost"] if "lost" in p else p.get("delta", 0) < -p.get("dead_zone", 0) for p in parts.values()
        )
        return "regressed" if lower else "no change"
    if m.delta is None or m.dead_zone is None:
        return "not measured"
    return "regressed" if m.delta < -m.dead_zone else "no change"


def round_row(r: Round, started_from: str = "") -> dict[str, Any]:
    """The report's row of round ``r``; ``started_from``: a rollback main went through before it."""
    m = r.manifest
    train = [m.phases[p] for p in ("rollout",) if p in m.phases]
    val = [m.phases[p] for p in ("smoke", "validation", "reruns") if p in m.phases]
    return {
        "round": r.round,
        "status": r.status,
        "outcome": proposal_outcome(r),
        "val_score": m.val_score,
        "incumbent_score": m.incumbent_score,
        "delta": m.delta,
        "dead_zone": pooled_dead_zone(m),  # none for objective both: per family
        "fixed": m.fixed,
        "broken": m.broken,
        "train_pass_rate": m.train_passed / m.train_tasks
        if m.train_tasks and m.train_passed is not None
        else None,
        "cost_usd": m.cost_usd,
        "tokens": {role: u.input + u.output for role, u in m.tokens.items()},
        "calls": {role: u.calls for role, u in m.tokens.items()},
        "role_cost_usd": {role: u.cost_usd for role, u in m.tokens.items()},
        "violations": m.violations,
        "summary": m.title,
        "reason": reason_line(  # what log says of it, word for word
            {
                "reason": m.reason,
                "confirmation": m.confirmation.model_dump(mode="json") if m.confirmation else None,
                "started_from": started_from,
                "trigger": trigger_row(m.trigger),
                "checks": m.checks.model_dump(mode="json"),
            }
        ),
        "wall_s": m.wall_s,
        "trigger": trigger_row(m.trigger),
        "candidates": [c.model_dump() for c in m.search.candidates] if m.search else [],
        "alpha_split": m.search.alpha_split if m.search else 1,
        "taxonomy": {
            "train": describe(merged(train)) if train else None,
            "val": describe(merged(val)) if val else None,
        },
    }


def task_matrix(ws: Workspace, rounds: list[Round]) -> dict[str, Any]:
    """Val task x gated round: fixed, broken or unchanged (rounds that reached the gate only)."""
    gated = [r for r in rounds if r.manifest.n]
    tasks = sorted(
        {t.id for t in ws.tasks("val")} | {t for r in gated for t in r.manifest.fixed + r.manifest.broken}
    )
    cells: dict[str, dict[int, str]] = {t: {} for t in tasks}
    for r in gated:
        fixed, broken = set(r.manifest.fixed), set(r.manifest.broken)
        for t in tasks:
            cells[t][r.round] = "fixed" if t in fixed else "broken" if t in broken else "unchanged"
    return {"tasks": tasks, "rounds": [r.round for r in gated], "cells": cells}


def flaky_tasks(rounds: list[Round]) -> list[dict[str, Any]]:
    """Per val task: groups of identical reruns seen, how many disagreed, and that rate."""
    groups: Counter[str] = Counter()
    mixed: Counter[str] = Counter()
    for r in rounds:
        for task, (seen, disagreed) in r.manifest.repeats.items():
            groups[task] += seen
            mixed[task] += disagreed
    rows = [
        {"task": t, "groups": groups[t], "flipped": mixed[t], "rate": mixed[t] / groups[t]}
        for t in groups
        if mixed[t] >= FLAKY_MIN_GROUPS
    ]
    return sorted(rows, key=lambda x: (-x["rate"], -x["flipped"], x["task"]))


def taxonomy_table(rounds: list[Round]) -> dict[str, Any]:
    """Failure classes per round (all phases of the target together), shares of runs and of failures."""
    out = []
    for r in rounds:
        if not r.manifest.phases:
            continue
        d = describe(merged(list(r.manifest.phases.values())))
        out.append({"round": r.round, **d})
    return {"classes": list(FAILURE_CLASSES), "rounds": out}


def report_data(ws: Workspace) -> dict[str, Any]:
    """The whole report as JSON-ready data."""
    rounds = ledger.past_rounds(ws.repo)
    rows = [round_row(r, rollback_of(ws, r.manifest.parent)) for r in rounds]
    outcomes = Counter(row["outcome"] for row in rows)
    registered = flags.lenient_defaults(ws.root / "harness")  # listed even when no run read them
    uses = adoption(ws.repo, {**registered, **ws.cfg.flags})
    accepted = [r.round for r in rounds if r.status == "accepted"]
    used, settings = last_run_parts(ws), last_run_settings(ws)
    return {
        "workspace": str(ws.root),
        "incumbent": incumbent_line(ws),  # main's commit: a round's, or a rollback's
        "config": {  # what the last run used (a --target, --optimizer or -c is not in harnessopt.yaml)
            "mode": settings.get("mode", ws.cfg.mode),
            "template": settings.get("template", ws.cfg.template),
            "target": used.get("target") or f"{ws.cfg.model.provider}:{ws.cfg.model.target}",
            "optimizer": used.get("optimizer") or ws.cfg.optimizer.label,
            "batch_size": settings.get("batch_size", ws.cfg.rollout.batch_size),
            "epochs": settings.get("epochs", ws.cfg.gate.epochs),
        },
        "rounds": rows,
        "outcomes": {k: outcomes.get(k, 0) for k in OUTCOMES},
        "matrix": task_matrix(ws, rounds),
        "taxonomy": taxonomy_table(rounds),
        "flaky": flaky_tasks(rounds),
        "audits": [_audit(a) for a in ledger.audits(ws.repo)],
        "diffs": {k: round_diff(ws, k) for k in accepted},
        "adoption": {
            "rules": [asdict(u) for u in uses["rules"]],
            "flags": [asdict(u) for u in uses["flags"]],
        },
        "spend": [line for line in [proposals.spend_line(ws.repo), measured_line(ws)] if line]
        + projected_vs_spent(ws)
        + interrupted_spend(
            ws, ws.journal.entries(), {r.round for r in rounds}, live_holder(ws.root) is None
        ),
        "round0_spend": proposals.spend(ws.repo),
        # status's lines on the gate: best's confirmation, the noise floor and what val can detect,
        # the false-accept budget spent (QA: the report said nothing of the noise floor)
        "gate": evidence_lines(ws),
    }


def _audit(data: dict[str, Any]) -> dict[str, Any]:
    keys = ("gain", "interval", "n", "claimed_val_gain", "best", "ref", "forced", "earlier")
    out = {k: data.get(k) for k in keys}
    if isinstance(out["interval"], list | tuple) and len(out["interval"]) == 2:
        # a gain of a score in [0, 1] lies in [-1, +1]: a normal interval can reach past it
        out["interval"] = [max(-1.0, min(1.0, float(x))) for x in out["interval"]]
    return out
