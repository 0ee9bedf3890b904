"""What a round's search produced: its candidates, their screen results, the winner, their refs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import git

from harnessopt.ledger import store as ledger
from harnessopt.ledger.store import CandidateRecord, SearchRecord, Status
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot
from harnessopt.protocols import Proposal
from harnessopt.rollout.runner import Candidate
from harnessopt.search.clusters import Focus
from harnessopt.search.screen import Screened, alpha_split
from harnessopt.workspace.core import EDITABLE_PATHS

_END_RANK: dict[str, int] = {"rejected": 0, "noop": 1, "failed": 2}  # which candidate speaks for a round


@dataclass
class Proposed:
    """One candidate: its proposal, the checked copy-back, and how the checks ended it (if they did)."""

    name: str  # "" when the round has one candidate, else c1, c2, ...
    focus: Focus
    proposal: Proposal
    snapshot: ViewSnapshot | None
    copied: CopyBackResult
    candidate: Candidate | None
    ending: tuple[Status, str] | None
    screened: Screened | None = None
    rank: int = 0  # place in the screen's order (best first)
    ref: str | None = None
    commit: str | None = None
    checkpoint: float | None = None  # search.checkpoints: its state's score on the fixed train tasks
    verdict: tuple[Status, str] | None = None  # a validated winner's ending
    gate_alpha: float | None = None  # what its gate decision spent of the false-accept budget

    def parts(self) -> tuple[Proposal, ViewSnapshot | None, CopyBackResult, Candidate | None]:
        """What the round's later steps and its record take from it; the candidate as smoke and
        validation run it (labelled ``candidate``, whatever its name)."""
        cand = dataclasses.replace(self.candidate, label="candidate") if self.candidate else None
        return self.proposal, self.snapshot, self.copied, cand

    @property
    def viable(self) -> bool:
        return self.candidate is not None and self.ending is None


@dataclass
class Search:
    """The round's candidates, their screening, and the one that speaks for the round."""

    proposed: list[Proposed]
    screen_tasks: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    head: str = ""  # search.explore: the kept head the chain started from (round-K/sJ)
    validated: list[str] = field(default_factory=list)  # winners that went to smoke and validation
    explored: bool = False  # an explore chain: recorded step by step even when the budget ended it at s1
    checkpoints: int = 0  # search.checkpoints: the chain's checkpoints, the end's included
    checkpoints_run: int = 0  # of them, those that ran the fixed tasks (a head scored before is not run)

    def in_turn(self) -> Iterator[Proposed]:
        """The winners, best first, each noted as validated when its turn comes."""
        for p in self.winners:
            self.validated.append(p.name)
            yield p

    @property
    def several(self) -> bool:
        return len(self.proposed) > 1 or self.explored

    @property
    def winners(self) -> list[Proposed]:
        ranked = [p for p in self.proposed if p.screened and p.screened.chosen]
        return sorted(ranked, key=lambda p: self.ranking().index(p.name))

    def ranking(self) -> list[str]:
        return [p.name for p in sorted(self.proposed, key=_rank_key)]

    def outcome(self) -> tuple[Proposed, tuple[Status, str] | None]:
        """The candidate that goes on (None ending) or that the round's record keeps, and the
        round's ending when no candidate goes on."""
        if winners := self.winners:
            return winners[0], None
        if not self.several:
            p = self.proposed[0]
            return p, p.ending or ("failed", "no candidate")
        viable = [p for p in self.proposed if p.viable]
        if viable:  # screened, and none cleared the floor
            best = min(viable, key=_rank_key)
            return best, ("rejected", f"screened out on train: {best.name} {_reason(best)}")
        first = min(self.proposed, key=lambda p: _END_RANK.get(p.ending[0] if p.ending else "failed", 3))
        why = "; ".join(f"{p.name} {p.ending[0]}: {p.ending[1]}" for p in self.proposed if p.ending)
        status = first.ending[0] if first.ending else "failed"
        return first, (status, f"no candidate passed the checks ({why})")

    def write_refs(self, repo: git.Repo, parent: str, k: int) -> None:
        """Every candidate with a tree on ``refs/harnessopt/candidates/round-K/NAME``."""
        if not self.several:
            return
        for p in self.proposed:
            root = p.candidate.root if p.candidate else None
            if root is None or not p.copied.changed or p.commit is not None:
                continue
            paths = [part for part in EDITABLE_PATHS if (root / part).exists()]
            p.ref, p.commit = ledger.record_candidate(
                repo, parent, root, paths, k, self._record(p), p.proposal.summary
            )

    def record(self) -> SearchRecord | None:
        """The manifest's ``search`` field (None for a round with one candidate and no chain)."""
        if not self.several:
            return None
        winners = [p.name for p in self.winners]
        return SearchRecord(
            candidates=[self._record(p) for p in sorted(self.proposed, key=_rank_key)],
            winners=winners,
            validated=self.validated,
            alpha_split=alpha_split([p.screened for p in self.proposed if p.screened]),
            screen_tasks=self.screen_tasks,
            merged=self.merged,
            head=self.head,
            checkpoints=self.checkpoints,
            checkpoints_run=self.checkpoints_run,
        )

    def _reason(self, p: Proposed) -> str:
        """Why ``p`` was or was not validated: a winner the round never reached (a winner ranked
        above it ended the round, or the round ended first: STOP, the deadline, an error) says so,
        not the screen's "validated"."""
        why = _reason(p)
        if not (p.screened and p.screened.chosen) or p.name in self.validated:
            return why
        ended = (
            f"{', '.join(self.validated)} ended the round before its turn"
            if self.validated
            else "the round ended before its validation"
        )
        return f"not validated: {ended}; chosen: {why.removeprefix('validated: ')}"[:500]

    def _record(self, p: Proposed) -> CandidateRecord:
        s = p.screened
        return CandidateRecord(
            name=p.name,
            focus=p.focus.label + (f" ({', '.join(p.focus.task_ids)})" if p.focus.task_ids else ""),
            title=p.proposal.summary.splitlines()[0][:200] if p.proposal.summary else "",
            outcome=_outcome(p),
            reason=self._reason(p),
            changed=p.copied.changed,
            mean_delta=round(s.mean_delta, 6) if s and s.n else None,
            wins=list(s.wins) if s else [],
            losses=list(s.losses) if s else [],
            n=s.n if s else 0,
            chosen=bool(s and s.chosen) and p.name in self.validated,
            optimizer_tokens=p.proposal.input_tokens + p.proposal.output_tokens,
            ref=p.ref,
            commit=p.commit,
            checkpoint=None if p.checkpoint is None else round(p.checkpoint, 6),
            verdict=verdict_text(*p.verdict)[:500] if p.verdict else "",
            gate_alpha=p.gate_alpha,
            violations=p.copied.violations,
        )


def verdict_text(status: str, reason: str) -> str:
    """A verdict as one line: its status, unless the reason starts with that word already
    (``accepted: +0.500 > dead zone ...`` read "accepted: accepted: ..."; ``accepted on pass_rate
    and tokens ...`` read "accepted: accepted on ...")."""
    return reason if re.match(rf"{re.escape(status)}\b", reason) else f"{status}: {reason}"


def _outcome(p: Proposed) -> Literal["screened", "noop", "failed", "rejected"]:
    status = p.ending[0] if p.ending else "screened"
    return status if status in ("noop", "failed", "rejected") else "screened"


def _reason(p: Proposed) -> str:
    if p.ending is not None:
        return f"not validated: {p.ending[0]} at the checks: {p.ending[1]}"[:500]
    return p.screened.reason if p.screened else "not screened"


def _rank_key(p: Proposed) -> tuple[int, int, str]:
    """Screened candidates in their screen order first, then the ones the checks ended, by name."""
    return (0, p.rank, p.name) if p.screened is not None else (1, 0, p.name)


def attach(proposed: list[Proposed], screened: list[Screened]) -> None:
    """Give each candidate its screen result and rank (``screened`` is best first)."""
    by_name = {p.name: p for p in proposed}
    for i, s in enumerate(screened):
        by_name[s.name].screened, by_name[s.name].rank = s, i
