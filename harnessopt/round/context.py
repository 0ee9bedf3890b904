"""What the steps of a round share: the round's fixed context, what it produced so far, its result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.ledger.store import RoundManifest, Status
from harnessopt.optimizer.view import CopyBackResult, ViewSnapshot
from harnessopt.protocols import GateDecision, Outcomes, Proposal, Task, TaskResult
from harnessopt.rollout.phase_stats import RoundRuns
from harnessopt.rollout.runner import Candidate
from harnessopt.search.state import Search

Ending = tuple[Status, str]  # (status, reason) of a round that ends before the gate


@dataclass
class RoundResult:
    """What one round decided and where git keeps it."""

    round: int
    status: Status
    reason: str
    commit: str
    manifest: RoundManifest


@dataclass(frozen=True)
class RoundContext:
    """What every step of round k reads: fixed when the round starts."""

    k: int
    scratch: Path
    incumbent: Candidate
    parent: str
    val: list[Task]  # loaded once per round
    held_out: list[Task] = field(default_factory=list)  # gate.confirm holdout: val tasks the gate never sees


@dataclass
class Trail:
    """What the round produced so far (written by ``_steps`` only, read by ``record``)."""

    train: list[TaskResult] = field(default_factory=list)
    proposal: Proposal | None = None
    snapshot: ViewSnapshot | None = None
    copied: CopyBackResult | None = None
    candidate: Candidate | None = None
    cand_val: list[TaskResult] = field(default_factory=list)
    decision: GateDecision | None = None
    noise_floor: dict[str, Any] | None = None  # the A/A test, when this round measured one
    confirmation: dict[str, Any] | None = None  # an accepted candidate on runs that did not select it
    runs: RoundRuns = field(default_factory=RoundRuns)  # every run of the round, by phase
    checks: dict[str, Any] = field(default_factory=dict)  # what the leakage check found (leakage.screen)
    probe: list[TaskResult] = field(default_factory=list)  # the incumbent's smoke rerun made ahead
    search: Search | None = None  # every candidate of the round, screened on train (search.candidates > 1)
    incumbent_val: Outcomes = field(default_factory=dict)  # the incumbent's val runs the gate compared
    new_bank: Outcomes = field(default_factory=dict)  # the banked gate's confirmation: the winner's bank
    judged: bool = False  # the ending is the gate's (and its confirmation's), not a check's
    started: float = field(default_factory=time.monotonic)
