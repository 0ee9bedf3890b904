"""The banked gate (``gate.policy: banked``, the default): a two-look paired t-test of the candidate's
val runs against the mean of the incumbent's whole bank of cached runs (docs/gate.md, "The banked gate").

Why: at the val sizes users have, the paired gate's power is lost in two places. Its first look
compares one candidate run with one incumbent run, so both sides' run noise is in every task's
difference; and its flip confirmation counts a flip that does not reproduce as 0, which shrinks
real gains (a task a gain moved from 0.5 to 0.85 flips once, and reproduces less than half the
time) as much as it shrinks noise. Here:

* **The incumbent's side is its bank.** The loop measures the incumbent ``incumbent_epochs`` times
  on each val task once per incumbent (paid on round 1 and after an accept) and hands the gate
  every run; a task's incumbent value is the mean of them. The runs were measured before the
  candidate existed, so the per-task difference ``mean(candidate runs) - mean(incumbent runs)`` has
  mean 0 for a candidate without an effect, whatever the number of runs on either side.
* **A crash is run once more, on both sides.** A crashed val run (crash, timeout, sandbox failure)
  is run again once and the rerun replaces it; a crash that reproduces scores 0 like any failure.
  The incumbent's crashed runs are rerun when the bank is measured, the candidate's here (through
  ``confirm``). An outage that crashes a tenth of one side's tasks otherwise moves every task's
  difference the same way (for the incumbent: in every round until it changes).
* **Two looks, one alpha.** The first look tests the candidate's first runs at ``first_look_share``
  of alpha; when it is inside its dead zone with t above ``look_from``, the second look runs the
  candidate ``second_look`` more times on every val task (never the incumbent: its bank is the
  measurement) and tests all its runs at the rest of alpha. Each look is a one-sided paired
  t-test with the gate's dead zone (``stats.dead_zone``: the SD floor and one lattice step), so by
  the union bound a candidate without an effect is accepted with probability at most alpha.

With ``gate.secondary`` set (soft or cost), the gate is the paired gate (``PairedGate``): the
secondary tests read the first look's paired runs, which the bank's mean does not give them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import stats
from harnessopt.gate.policy import PairedGate, _base_details, _merge, _Paired
from harnessopt.protocols import ConfirmFn, GateDecision, Outcomes

LOOK_STEP = 2
"""The second look adds its runs this many at a time; after each step (but the last) it stops,
rejecting, when the t statistic of all runs so far is at or below ``look_from`` (futility: a stop
can only turn an accept into a reject, so it spends no alpha)."""


class BankedGate(PairedGate):
    """Two looks of a paired t-test against the incumbent's bank mean (see the module docstring).

    ``decide`` calls ``confirm`` for the candidate's crash reruns (one call per round of reruns,
    with the ids whose run crashed) and, on a second look, ``second_look`` times with every val
    id. Only the candidate's side of what ``confirm`` returns is read: the loop passes one that runs
    the candidate alone (``bank_first_look``)."""

    name = "banked"

    def __init__(self, cfg: GateConfig | None = None, look_from: float = 0.5):
        super().__init__(cfg, look_from=look_from)
        self.bank_first_look = self.cfg.secondary == "none"

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        if not self.bank_first_look:
            return super().decide(candidate, incumbent, confirm)
        if not self.cfg.confirm_flips:
            confirm = None  # no rerun of any kind: one look at the whole alpha
        p = _Paired.of(candidate, incumbent)
        details = _base_details(candidate, incumbent, p)
        details.update(design="banked", incumbent_runs=min((len(incumbent[t]) for t in p.ids), default=0))
        if not p.ids:
            reason = "rejected: no val task was scored for both candidate and incumbent"
            return GateDecision(False, reason, 0, 0.0, 0.0, 0.0, stats.dead_zone(0, 0.0), details=details)
        lv = self.levels(confirm is not None)
        details.update(alpha=lv.alpha, look_levels=list(lv.looks), secondary_level=None, reruns=0)
        cand = {t: list(candidate[t]) for t in p.ids}
        reproduced: dict[str, int] = {}  # per task: crashes whose rerun crashed too (they stay)
        cand = self._retry_crashes(cand, confirm, details, reproduced)
        dec = self._look(cand, incumbent, p.ids, lv.looks[0], details)
        details.update(look=1)
        if confirm is not None and self._promising(dec):
            first = {"delta": dec.delta, "dead_zone": dec.dead_zone, "t": details["t"]}
            added = 0
            while added < self.second_look:  # in steps, each may stop it for futility
                step = min(LOOK_STEP, self.second_look - added)
                more: Outcomes = {}
                for _ in range(step):
                    more = _merge(more, self._only(confirm(p.ids)[0], p.ids))
                added += step
                details["reruns"] += sum(len(r) for r in more.values())
                merged = {t: list(r) for t, r in _merge(cand, more).items()}
                cand = self._retry_crashes(merged, confirm, details, reproduced)
                dec = self._look(cand, incumbent, p.ids, lv.looks[-1], details)
                if added < self.second_look and details["t"] <= self.look_from:
                    details["second_look_stopped"] = {"runs": added, "of": self.second_look}
                    break
            dec.details.update(look=2, first_look=first, second_look_runs=added)
        dec.accept, dec.reason = self._verdict(dec, cand, incumbent, p.ids, None)
        return dec

    @staticmethod
    def _only(got: Outcomes, ids: Sequence[str]) -> Outcomes:
        return {t: list(got[t]) for t in ids if t in got}

    def _retry_crashes(
        self,
        cand: dict[str, list[Any]],
        confirm: ConfirmFn | None,
        details: dict[str, Any],
        done: dict[str, int],
    ) -> dict[str, list[Any]]:
        """Each crashed run that has not been rerun yet is run once more; the rerun takes its place.
        ``done``: per task, the crashes already rerun that crashed again (counted up here)."""
        if confirm is None:
            return cand
        while crashed := [t for t, runs in cand.items() if sum(o.crashed for o in runs) > done.get(t, 0)]:
            again = self._only(confirm(crashed)[0], crashed)
            details["reruns"] += sum(len(r) for r in again.values())
            details["crash_reruns"] = details.get("crash_reruns", 0) + len(again)
            for t in crashed:
                i = [k for k, o in enumerate(cand[t]) if o.crashed][done.get(t, 0)]
                if again.get(t):
                    cand[t][i] = again[t][0]  # the rerun replaces the crash; if it crashed too, it scores 0
                done[t] = done.get(t, 0) + int(not again.get(t) or again[t][0].crashed)
        return cand

    def _look(
        self, cand: Outcomes, inc: Outcomes, ids: list[str], level: float, details: dict[str, Any]
    ) -> GateDecision:
        """One look: the per-task difference of both sides' mean over all their runs."""
        p = _Paired.of(cand, inc)
        p.ids = ids
        diffs = {t: p.cand[t] - p.inc[t] for t in ids}
        fixed = [t for t in ids if stats.solved(p.cand[t]) and not stats.solved(p.inc[t])]
        broken = [t for t in ids if stats.solved(p.inc[t]) and not stats.solved(p.cand[t])]
        runs = min(len(cand[t]) for t in ids)
        details.update(epochs_total=runs)
        details.pop("raw_delta", None)
        return self._judge(p, diffs, fixed, broken, [], details, level, 1.0 / max(runs, 1))
