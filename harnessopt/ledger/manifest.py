"""The manifest: the machine-readable last line of every round's commit message, and its parts.

Every model here reads commits written by other versions of harnessopt: a key this version does
not know is ignored (``_Tolerant``) or, in the sub-records a part of the round writes (the gate's
details, the noise floor, the confirmation, the checks), kept as it was and written back unchanged
(``Record``). Only the keys a record was given are written, so a manifest written again says what
it said. ``ledger.store`` writes and reads manifests; nothing indexes one by string keys.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

MANIFEST_VERSION = 2

Status = Literal["initial", "accepted", "rejected", "noop", "failed"]
StoppedBy = Literal["done", "turn_budget", "token_budget", "wall_clock", "error", "stopped"]


class _Tolerant(BaseModel):
    """Reading an older (or newer) commit must not fail on a key this version does not know."""

    model_config = ConfigDict(extra="ignore")


class RoleUsage(_Tolerant):
    calls: int = 0
    input: int = 0
    output: int = 0
    cost_usd: float | None = None
    """Dollars at list price of this role's calls (None in rounds recorded before it was kept)."""
    estimated_calls: int = 0
    """Calls whose token counts are chars/4 estimates: their upstream reported no usage."""


def spend_of(data: dict[str, Any]) -> tuple[int, int, float]:
    """Model calls, tokens (input and output) and dollars of a manifest's data or a journal
    ``spend`` line: its ``tokens`` map by role (a value that is not a role's counts is skipped)
    and its ``cost_usd``."""
    uses = [u for u in (data.get("tokens") or {}).values() if isinstance(u, dict)]
    calls = sum(int(u.get("calls") or 0) for u in uses)
    tokens = sum(int(u.get("input") or 0) + int(u.get("output") or 0) for u in uses)
    return calls, tokens, float(data.get("cost_usd") or 0.0)


class PhaseStats(_Tolerant):
    """What the target's runs of one phase of a round did, counted when the round is recorded
    (``taxonomy``): phases are rollout, incumbent, probe, smoke, validation, reruns, audit."""

    runs: int = 0
    passed: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    failures: dict[str, int] = Field(default_factory=dict)
    """Failed runs per failure class (docs/report.md)."""
    turns: list[int] = Field(default_factory=list)
    """Model calls of each run, sorted."""
    looping: int = 0
    """Runs in which the model repeated one identical tool call three times or more."""


class OptimizerRecord(_Tolerant):
    """What the optimizer spent in a round, and where its transcript is."""

    turns: int = 0
    stopped_by: StoppedBy = "done"
    input_tokens: int = 0
    output_tokens: int = 0
    transcript: str | None = None
    view_skipped: list[str] = Field(default_factory=list)


class Record(BaseModel):
    """A sub-record of the manifest. The fields this version reads are declared (all optional:
    an older commit may lack any); any other key is kept and written back as it was given."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _given_keys_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in given}


class GateRecord(Record):
    """The gate decision's details (``GateDecision.details``); a policy of one's own may add any key."""

    alpha: float | None = None
    """The share of the false-accept budget this decision spent (absent when it spent none: the
    run's budget was spent before the gate; a validation stopped for futility spends its level,
    as it could accept until it stopped; earlier versions recorded none for it). The other
    keys are the policy's own (the paired gate's: ``epochs``, ``look``, ``t``, ``reruns``, ...)."""


class NoiseFloorRecord(Record):
    """The A/A test of the incumbent (``gate.noise_floor.measure``), in the round that measured it."""

    m: int | None = None
    """Val tasks measured twice."""
    epochs: int | None = None
    flip_rate: float | None = None
    """Share of tasks whose solved/unsolved verdict differed between the two measurements."""
    paired_sd: float | None = None
    aa_delta: float | None = None
    detectable: float | None = None
    """The smallest gain the gate detects with 80% power at this noise."""
    target_effect: float | None = None
    reach: dict[str, Any] = Field(default_factory=dict)
    """What would bring ``detectable`` down to ``target_effect`` (more tasks, more epochs)."""
    measured_round: int | None = None


class ConfirmationRecord(Record):
    """An accepted candidate on runs that did not select it (``gate.confirmation``)."""

    on: str = "val"
    """``val`` (fresh runs on val) or ``holdout`` (the held-out val tasks)."""
    n: int = 0
    candidate_score: float | None = None
    incumbent_score: float | None = None
    gain: float = 0.0
    interval: list[float] = Field(default_factory=list)
    """The gain's 95% interval."""
    confirmed: bool = False
    """The gain is positive: ``ho/best`` may move."""
    rollouts: int | None = None
    summary: str = ""


class LeakageRecord(Record):
    """What the leakage check found in the candidate's added lines (``round.leakage``)."""

    action: str | None = None
    """What was done about it: ``warn`` (let through) or ``reject``."""
    added_lines: int | None = None
    tasks: list[str] = Field(default_factory=list)
    """Ids of the tasks the added lines copy."""
    findings: list[dict[str, Any]] = Field(default_factory=list)


class MemorisedRecord(Record):
    """The memorised-answer check of an accept (``round.memorised``, docs/gate.md)."""

    action: str | None = None
    """``reject`` or ``warn`` (``checks.memorised``)."""
    tasks: list[str] = Field(default_factory=list)
    """The fixed val tasks whose perturbed variants ran."""
    gain: float | None = None
    """Mean paired gain the gate saw on those tasks."""
    perturbed_gain: float | None = None
    """The same on the perturbed variants."""
    p: float | None = None
    """One-sided p of the sign-flip test (None: too few tasks to test)."""
    alpha: float | None = None
    retain: float | None = None
    collapsed: bool = False
    """The gain did not survive the perturbation (H0 rejected)."""
    summary: str = ""
    note: str | None = None


class DatalikeRecord(Record):
    """The static signal of data-like additions (``round.datalike``): flags, never rejects."""

    flagged: bool = False
    signals: list[str] = Field(default_factory=list)
    note: str | None = None


class ChecksRecord(Record):
    """What the candidate checks found."""

    leakage: LeakageRecord | None = None
    memorised: MemorisedRecord | None = None
    datalike: DatalikeRecord | None = None


class CandidateRecord(_Tolerant):
    """One of a round's candidates (``search.candidates`` > 1): what it changed, how it screened on
    train against the incumbent, and why it was or was not validated."""

    name: str
    """Its id in the round: c1, c2, ..."""
    focus: str = ""
    """The failure cluster its brief aimed it at."""
    title: str = ""
    """First line of the optimizer's summary."""
    outcome: Literal["screened", "noop", "failed", "rejected"] = "screened"
    """screened: it passed the checks and ran on train; otherwise how the checks ended it."""
    reason: str = ""
    """Why it was or was not validated, one line."""
    changed: list[str] = Field(default_factory=list)
    mean_delta: float | None = None
    """Mean paired train difference against the incumbent (None: not screened)."""
    wins: list[str] = Field(default_factory=list)
    """Train task ids where it beat the incumbent."""
    losses: list[str] = Field(default_factory=list)
    n: int = 0
    """Paired train tasks it was screened on."""
    chosen: bool = False
    """Went on to smoke and validation."""
    ref: str | None = None
    """refs/harnessopt/candidates/round-K/NAME: its tree, reviewable with ``harnessopt diff WS K --candidate I``."""
    commit: str | None = None
    optimizer_tokens: int = 0
    """Input + output tokens the optimizer spent proposing it."""
    verdict: str = ""
    """A validated winner's ending ("rejected: ..."), each winner's: with ``search.winners`` > 1
    the round's own fields hold only the last one validated."""
    gate_alpha: float | None = None
    """The share of the false-accept budget its gate decision spent (None: it reached no gate)."""
    violations: list[str] = Field(default_factory=list)
    """Its writes outside the whitelist, discarded (the round's ``violations`` hold every candidate's)."""
    checkpoint: float | None = None
    """An explore step's state's mean score on the chain's fixed train tasks (``search.checkpoints``),
    where a checkpoint ran it (None: not scored)."""


class SearchRecord(_Tolerant):
    """How a round with several candidates chose among them (docs/optimizer.md, "Search")."""

    candidates: list[CandidateRecord] = Field(default_factory=list)
    winners: list[str] = Field(default_factory=list)
    """Candidates the screen chose for smoke and validation, best first (``search.winners`` of them)."""
    validated: list[str] = Field(default_factory=list)
    """Winners that went to smoke and validation, in turn, until one was accepted."""
    alpha_split: int = 1
    """Ways the gate's false-accept budget was split among the winners (Bonferroni; 1: not split)."""
    screen_tasks: list[str] = Field(default_factory=list)
    """Train task ids the candidates were screened on (empty: no screening, one candidate left)."""
    merged: list[str] = Field(default_factory=list)
    """Archived candidates (round-K/cI) a candidate of this round was asked to merge."""
    head: str = ""
    """search.explore: the kept head this round's chain started from (``round-K/sJ``, an earlier
    round's chain end the gate did not accept); empty: the chain started from main."""
    checkpoints: int = 0
    """search.checkpoints: the checkpoints this round's chain held, the end's included (0: none)."""
    checkpoints_run: int = 0
    """Of them, those that ran the fixed train tasks: a head a checkpoint already scored is not run
    again. The projection prices later rounds' checkpoints at this share (docs/report.md)."""


class TriggerSide(_Tolerant):
    """Triggering of one side on the round's val trigger runs (docs/gate.md, "Objectives")."""

    precision: float | None = None
    recall: float | None = None
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0


class TriggerStats(_Tolerant):
    """What users ask of triggering in a round of objective trigger or both."""

    objective: str = "trigger"
    candidate: TriggerSide = Field(default_factory=TriggerSide)
    incumbent: TriggerSide = Field(default_factory=TriggerSide)
    description_chars: int | None = None
    """Characters of the candidate's description fields."""
    incumbent_description_chars: int | None = None
    pass_when_loaded: float | None = None
    """Pass rate of the candidate's task runs (not trigger runs) in which the skill loaded."""
    pass_when_not_loaded: float | None = None
    runs_loaded: int = 0
    runs_not_loaded: int = 0


class RoundManifest(_Tolerant):
    """The machine-readable part of a round's commit message."""

    version: int = MANIFEST_VERSION
    round: int
    status: Status
    reason: str = ""
    summary: str = ""
    parent: str | None = None
    val_score: float | None = None
    incumbent_score: float | None = None
    delta: float | None = None
    dead_zone: float | None = None
    n: int | None = None
    fixed: list[str] = Field(default_factory=list)
    broken: list[str] = Field(default_factory=list)
    gate: GateRecord = Field(default_factory=lambda: GateRecord())
    """The gate decision's details (empty when the round ended before the gate)."""
    train_passed: int | None = None
    train_tasks: int | None = None
    changed: list[str] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    optimizer: OptimizerRecord | None = None
    tokens: dict[str, RoleUsage] = Field(default_factory=dict)
    cost_usd: float | None = None
    notes: list[str] = Field(default_factory=list)
    """Facts the run found worth telling (e.g. a model without a price counted at $0)."""
    phases: dict[str, PhaseStats] = Field(default_factory=dict)
    """The target's runs of this round per phase, with their failure taxonomy."""
    repeats: dict[str, list[int]] = Field(default_factory=dict)
    """Val task -> [groups of identical reruns seen this round, groups whose runs disagreed]."""
    wall_s: float | None = None
    """Seconds the round took, start to record."""
    optimizer_s: float | None = None
    """Seconds of it the optimizer's conversations took (every candidate and step); None in rounds
    recorded before it was kept, and in rounds that asked the optimizer nothing."""
    models: dict[str, dict[str, Any]] | None = None
    """Which models the round ran and at what prices (``reporting.projection.run_models``): the
    projection prices a run from the rounds measured with its own; None in rounds recorded before."""
    noise_floor: NoiseFloorRecord | None = None
    """The A/A test of the incumbent, in the round that measured it (round 1, or after a change)."""
    confirmation: ConfirmationRecord | None = None
    """An accepted candidate on runs that did not select it (gain, interval, confirmed)."""
    checks: ChecksRecord = Field(default_factory=lambda: ChecksRecord())
    """What the candidate checks found (``leakage``: findings and the action taken)."""
    search: SearchRecord | None = None
    """Every candidate of a round with several (``search.candidates`` > 1); None with one."""
    trigger: TriggerStats | None = None
    """Precision and recall of triggering, both sides (objective trigger or both)."""

    @property
    def title(self) -> str:
        return self.summary.splitlines()[0] if self.summary else ""


def gate_alphas(m: RoundManifest) -> list[float]:
    """The false-accept budget each of a round's gate decisions spent: one per validated winner
    the gate judged (``search.winners`` > 1 judges several in turn), else the round's one."""
    if m.search is not None and any(c.gate_alpha is not None for c in m.search.candidates):
        return [c.gate_alpha for c in m.search.candidates if c.gate_alpha is not None]
    return [m.gate.alpha] if m.gate.alpha is not None else []


def judged(verdict: str, gate_alpha: float | None) -> str:
    """A validated candidate's verdict with the alpha its gate decision spent (``search.winners`` > 1
    splits the round's): what ``log``, ``diff --candidate`` and the report show of it; "" if none."""
    if not verdict:
        return ""
    return verdict + (f" (alpha {gate_alpha:.3g})" if gate_alpha is not None else "")


def objective_gates(m: RoundManifest) -> dict[str, dict[str, Any]]:
    """``objective: both``: each family's gate (task, trigger: its delta, dead_zone, n, accept),
    from the decision's ``details.objectives``; {} for a round of one objective."""
    parts = (m.gate.model_extra or {}).get("objectives")
    return {str(k): v for k, v in parts.items() if isinstance(v, dict)} if isinstance(parts, dict) else {}


def pooled_dead_zone(m: RoundManifest) -> float | None:
    """The dead zone the round's Δ is read against: None for ``objective: both``, whose Δ pools
    both families while each was gated against a zone of its own (shown per family)."""
    return None if objective_gates(m) else m.dead_zone
