"""The smoke test's verdict (docs/gate.md, "Smoke test"): which of the candidate's first-run
crashes reproduce and are its own. A pure function of outcomes; the round runs the rollouts."""

from __future__ import annotations

from dataclasses import dataclass

from harnessopt.protocols import Outcomes


@dataclass
class SmokeVerdict:
    """The smoke test's finding: which first-run crashes reproduce and are the candidate's own."""

    crashed: list[str]  # tasks whose first candidate run crashed
    flaky: list[str]  # ... whose candidate rerun did not crash
    shared: list[str]  # ... that crashed again, but so did the incumbent there
    reproduced: list[str]  # ... that crashed again where the incumbent did not: these reject

    @property
    def reject(self) -> bool:
        return bool(self.reproduced)


def smoke_verdict(
    first: Outcomes, rerun_cand: Outcomes, rerun_inc: Outcomes, incumbent: Outcomes
) -> SmokeVerdict:
    """Judge the smoke test (docs/gate.md, "Smoke test"): a crashed task was rerun once on both
    sides (``rerun_cand``, ``rerun_inc``). It rejects only when the candidate's rerun crashed too
    and the incumbent does not have the crash: its rerun did not crash and not every cached run of
    it crashed. A task without a candidate rerun counts as reproduced (a crash never passes
    unchecked); one without any incumbent outcome counts as a crash the incumbent does not have.
    """
    v = SmokeVerdict([], [], [], [])
    for t in sorted(first):
        if not any(o.crashed for o in first[t]):
            continue
        v.crashed.append(t)
        again = rerun_cand.get(t, ())
        if again and not any(o.crashed for o in again):
            v.flaky.append(t)
            continue
        inc_cached = incumbent.get(t, ())
        inc_has = any(o.crashed for o in rerun_inc.get(t, ())) or (
            bool(inc_cached) and all(o.crashed for o in inc_cached)
        )
        (v.shared if inc_has else v.reproduced).append(t)
    return v
