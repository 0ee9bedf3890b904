"""``harnessopt replay WS --target MODEL``: do the accepted rounds still help on another model?

The check to run after a model upgrade. Every accepted round whose edit main holds (after a
rollback, not the rounds it undid), oldest first, is
validated again for the target model: the round's commit against its parent on the val tasks the
gate sees, judged by the run's gate as in a round (``audit.paired_decision``: flips rerun, the same
dead zone). Each state is measured once (round k's commit is round k+1's parent) and its val
outcomes go to the val cache under that model, so a later ``run --target MODEL`` starts from them.
Each round's verdict is "still helps" (the gate accepts), "hurts" (below minus the dead zone) or
"no measurable difference"; the report is kept on ``refs/harnessopt/replay/<model>-<head>``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from harnessopt.commands.audit import RerunMemo, export_states, measuring, paired_decision, verdict_word
from harnessopt.errors import UserError
from harnessopt.gate.confirmation import split_val
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.protocols import Outcomes
from harnessopt.reporting.progress import RunProgress
from harnessopt.rollout.val_cache import ValCache
from harnessopt.round.services import Services
from harnessopt.workspace.core import Workspace

REPLAY_REF = "refs/harnessopt/replay/{target}-{head}"


def run_replay(
    ws: Workspace, *, say: Callable[[str], None], progress: RunProgress | None = None
) -> dict[str, Any]:
    """Re-validate main's accepted rounds, in order, for ``ws.cfg.model.target`` (module docstring)."""
    head = vcs.head_sha(ws.repo)
    rounds = ledger.live_accepted(ws.repo, head)  # after a rollback, not the rounds it undid
    if not rounds:
        undone = [r.round for r in ledger.past_rounds(ws.repo) if r.status == "accepted"]
        if undone:  # accepted, then rolled back: "no accepted round yet" was untrue (QA)
            raise UserError(
                f"main holds no accepted round's edit: a rollback undid round(s) {', '.join(map(str, undone))}; "
                "nothing to replay: roll forward (harnessopt rollback WS K) or run rounds until one is accepted"
            )
        raise UserError("no accepted round on main yet: nothing to replay; run rounds until one is accepted")
    target = ws.cfg.model.target
    val, _held_out = split_val(ws.tasks("val"), ws.cfg.gate)
    say(
        f"replay: {len(rounds)} accepted round(s) on {target}, {len(val)} val tasks x {ws.cfg.gate.epochs} epoch(s)"
    )
    results: list[dict[str, Any]] = []
    with measuring(ws, ws.cfg, say, progress) as svc:
        measured: dict[str, Outcomes] = {}
        for r in rounds:
            parent = str(r.manifest.parent or ws.repo.commit(r.commit).parents[0].hexsha)
            cands = export_states(
                ws, svc, f"replay-{r.round}", {"parent": parent, f"round-{r.round}": r.commit}
            )
            base_out = measured.get(parent) or _cached(svc, ws, parent)
            cand_out = _cached(svc, ws, r.commit)
            memo = _kept_reruns(svc, ws, parent, r.commit)
            d, cand_out, base_out = paired_decision(
                svc, cands[f"round-{r.round}"], cands["parent"], val, base_out=base_out, cand_out=cand_out,
                reruns=memo,
            )  # fmt: skip
            for sha, got in ((parent, base_out), (r.commit, cand_out)):
                measured.setdefault(sha, got)
                cache = ValCache(svc.state_dir)
                cache.put(cache.key(ws.repo, sha, svc.cfg, svc.sandbox, "HEAD"), measured[sha])
            word = verdict_word(d)
            row = {
                "round": r.round,
                "commit": r.commit,
                "title": r.manifest.title,
                "verdict": "still helps" if word == "helps" else word,
                "delta": d.delta,
                "dead_zone": d.dead_zone,
                "n": d.n,
                "fixed": d.fixed,
                "broken": d.broken,
                "claimed_delta": r.manifest.delta,
                "gate_reason": d.reason,
            }
            results.append(row)
            say(round_line(row))
        usage = svc.usage_of_round(0)
    report = {
        "target": target,
        "head": head,
        "rounds": results,
        "tokens": usage.tokens,
        "cost_usd": usage.cost_usd,
    }
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", target).strip("._") or "model"
    ref = REPLAY_REF.format(target=safe, head=head[:12])
    text = ledger.message(f"harnessopt replay of {len(results)} round(s) on {target}", "", report)
    ledger.record_measurement(ws.repo, ref, head, text)  # a replay before it stays a parent
    ws.journal.write(
        0, "replay", target=target, ref=ref, verdicts={str(x["round"]): x["verdict"] for x in results}
    )
    say(summary_line(report))
    return report


def _cached(svc: Services, ws: Workspace, sha: str) -> Outcomes | None:
    """A state's val outcomes under this model, when a run or a replay measured them already."""
    if svc.cfg.gate.rerun_incumbent:
        return None
    cache = ValCache(svc.state_dir)
    return cache.get(cache.key(ws.repo, sha, svc.cfg, svc.sandbox, "HEAD"))


def _kept_reruns(svc: Services, ws: Workspace, parent: str, commit: str) -> RerunMemo | None:
    """The gate's reruns of this pair under this model, kept in the val cache (keyed by both
    states' cache keys): a later replay reads them and makes no model call."""
    if svc.cfg.gate.rerun_incumbent:
        return None
    cache = ValCache(svc.state_dir)
    pair = cache.key(ws.repo, parent, svc.cfg, svc.sandbox, "HEAD") + cache.key(
        ws.repo, commit, svc.cfg, svc.sandbox, "HEAD"
    )

    def kept(which: str, run: Callable[[], tuple[Outcomes, Outcomes]]) -> tuple[Outcomes, Outcomes]:
        keys = [hashlib.sha256(f"replay-reruns|{pair}|{which}|{side}".encode()).hexdigest() for side in "cb"]
        got = [cache.get(k) for k in keys]
        if got[0] is not None and got[1] is not None:
            return got[0], got[1]
        fresh = run()
        for key, out in zip(keys, fresh, strict=True):
            cache.put(key, out)
        return fresh

    return kept


def round_line(row: dict[str, Any]) -> str:
    was = f"; was {row['claimed_delta']:+.3f} when accepted" if row["claimed_delta"] is not None else ""
    return (
        f"replay round {row['round']} ({row['commit'][:10]}): {row['verdict']}: {row['delta']:+.3f} vs dead zone "
        f"{row['dead_zone']:.3f} (n={row['n']}, fixed {len(row['fixed'])}, broken {len(row['broken'])}){was}"
    )


def summary_line(report: dict[str, Any]) -> str:
    rows = report["rounds"]

    def named(verdict: str) -> str:
        ks = [str(x["round"]) for x in rows if x["verdict"] == verdict]
        return f"{len(ks)}" + (f" (round {', '.join(ks)})" if ks else "")

    return (
        f"replay on {report['target']}: of {len(rows)} accepted round(s), {named('still helps')} still help, "
        f"{named('no measurable difference')} no measurable difference, {named('hurts')} hurt"
    )
