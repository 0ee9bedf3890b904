"""The archive: candidates of earlier rounds that won on some train tasks but were not accepted.

It is read from the ledger (each round's ``SearchRecord``) and the candidates' refs; nothing else
keeps it. A later round with several candidates offers two or more *complementary* ones (each won
a train task the others did not) to one of its candidates to merge, with their diffs in its brief.
An archived candidate offered once (``SearchRecord.merged``) is not offered again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import git

from harnessopt.ledger import vcs
from harnessopt.ledger.store import CandidateRecord, Round
from harnessopt.workspace.core import EDITABLE_PATHS

DIFF_CAP = 4000  # characters of one archived candidate's diff in a brief


@dataclass(frozen=True)
class Archived:
    round: int
    name: str
    commit: str
    wins: tuple[str, ...]
    title: str

    @property
    def key(self) -> str:
        return f"round-{self.round}/{self.name}"


def archived(rounds: Sequence[Round], limit: int) -> list[Archived]:
    """The ``limit`` most recent candidates with a train win that are not part of ``main`` (never
    an explore step: each is judged against the one before it, and the kept ones are its chain's)."""
    offered = {key for r in rounds if r.manifest.search for key in r.manifest.search.merged}
    out = []
    for r in rounds:
        candidates = r.manifest.search.candidates if r.manifest.search else []
        for c in candidates:
            if not c.wins or not c.commit or _in_main(r, c, candidates):
                continue
            if c.name.startswith("s"):  # an explore step: its wins are over the step before it
                continue
            entry = Archived(r.round, c.name, c.commit, tuple(c.wins), c.title)
            if entry.key not in offered:
                out.append(entry)
    return out[-limit:] if limit > 0 else []


def _in_main(r: Round, c: CandidateRecord, candidates: Sequence[CandidateRecord]) -> bool:
    """Is ``c`` the candidate round ``r`` accepted? With ``search.winners`` > 1 a winner validated
    before it and rejected, or one the round never reached, is not (each winner's verdict says);
    a record without verdicts (older rounds) counts every winner of an accepted round as in."""
    if r.status != "accepted" or not c.chosen:
        return False
    if any(o.chosen and o.verdict for o in candidates):
        return re.match(r"accepted\b", c.verdict) is not None
    return True


def complementary(entries: Sequence[Archived]) -> list[Archived]:
    """Most recent first, the candidates that each add a train win none before them had; a merge
    is offered only when at least two do (one alone has nothing to be merged with)."""
    picked: list[Archived] = []
    covered: set[str] = set()
    for e in reversed(entries):
        if not set(e.wins) <= covered:
            picked.append(e)
            covered |= set(e.wins)
    return picked if len(picked) >= 2 else []


def merge_md(repo: git.Repo, entries: Sequence[Archived]) -> str:
    """Each archived candidate's title, wins and diff against its own parent, for a brief."""
    parts = []
    for e in entries:
        diff = vcs.diff(repo, f"{e.commit}^", e.commit, EDITABLE_PATHS)
        if len(diff) > DIFF_CAP:
            diff = diff[:DIFF_CAP] + "\n[... diff cut ...]\n"
        wins = ", ".join(f"`{t}`" for t in e.wins[:12])
        parts.append(
            f"### {e.key}: {e.title or '(untitled)'}\n\nWon on train: {wins}\n\n```diff\n{diff.rstrip()}\n```"
        )
    return "\n\n".join(parts)
