"""The incumbent's cached val runs, split for the gate (docs/gate.md, "Cached incumbent runs").

With ``gate.incumbent_epochs`` above ``gate.epochs`` the loop measures and caches more runs of the
incumbent than the first look uses. The first look sees the first ``epochs`` runs of each task, as
the candidate's; the runs past them are a bank: each time the gate reruns some tasks (flip
confirmation, the second look) the incumbent's side takes the next banked run of each task, and
only a task whose bank is empty runs the incumbent again. Banked runs were measured before the
candidate existed and independently of it, so they are as fresh to the gate as a new run, and the
selection of which tasks to rerun (on the first look's runs) cannot have seen them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harnessopt.protocols import Outcome, Outcomes


def first_look(cached: Outcomes, epochs: int) -> Outcomes:
    """Each task's first ``epochs`` runs: what the first look compares with the candidate's."""
    return {t: list(runs[:epochs]) for t, runs in cached.items()}


class IncumbentBank:
    """The incumbent's runs past the first look, drawn one per task per rerun."""

    def __init__(self, cached: Outcomes, epochs: int):
        self.first = first_look(cached, epochs)
        self._rest: dict[str, list[Outcome]] = {t: list(runs[epochs:]) for t, runs in cached.items()}
        self.drawn = 0
        self.ran = 0

    def draw(self, ids: Sequence[str], run: Callable[[list[str]], Outcomes]) -> Outcomes:
        """One incumbent run for each of ``ids``: banked where one is left, else ``run(missing)``."""
        got: dict[str, list[Outcome]] = {}
        missing = []
        for t in ids:
            rest = self._rest.get(t)
            if rest:
                got[t] = [rest.pop(0)]
                self.drawn += 1
            else:
                missing.append(t)
        if missing:
            fresh = run(missing)
            self.ran += sum(len(v) for v in fresh.values())
            got.update({t: list(runs) for t, runs in fresh.items()})
        return got
