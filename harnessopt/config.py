"""``harnessopt.yaml``: one validated config object per component, unknown keys rejected."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harnessopt import registry
from harnessopt.errors import UserError, not_utf8
from harnessopt.limits import MAX_RUNS_A_TASK
from harnessopt.util.text import duplicate_key

CONFIG_NAME = "harnessopt.yaml"
# What each mode lets the optimizer change, and what no mode or whitelist ever does (globs).
MODE_WHITELIST = {"skill": ("skill/**",), "harness": ("harness/**",), "joint": ("skill/**", "harness/**")}
ALWAYS_READ_ONLY = ("tasks/**", "scorer.py", "perturb.py", "harnessopt.yaml", ".git/**")
DEFAULT_CANDIDATES = 1
"""search.candidates when the config does not say: the yield benchmark (benchmarks/) chooses it."""
DEFAULT_EXPLORE = 10
"""Steps a round chains when ``search.explore`` is null (the default) and chaining can run (one
candidate a round, the task objective) where no run chose them (``search.length.chain_length``
chooses a run's from prices: ``round.driver``), e.g. a config read without a workspace."""


class _Strict(BaseModel):
    # inf is no setting: a time limit of inf (or 1e300) passed and then failed the round mid-run
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


MAX_SECONDS = 7 * 24 * 3600.0  # a time limit of a task, a turn or a call: at most a week


# A config field naming a part: a registry name or a dotted path ``package.module:Factory``.
SandboxName = Annotated[str, AfterValidator(partial(registry.check, "sandbox"))]
OptimizerName = Annotated[str, AfterValidator(partial(registry.check, "optimizer"))]
ModelName = Annotated[str, AfterValidator(partial(registry.check, "model"))]
GateName = Annotated[str, AfterValidator(partial(registry.check, "gate"))]
ExecutorName = Annotated[str, AfterValidator(partial(registry.check, "executor"))]


def _known_template(name: str) -> str:
    """A template's name picks the image variant, the model's tools and the projection's priors:
    a misspelt one would run as no template quietly."""
    from harnessopt.workspace.templates import unknown_template

    if unknown := unknown_template(name):
        raise ValueError(unknown)
    return name


TemplateName = Annotated[str, AfterValidator(_known_template)]


def _http_url(url: str) -> str:
    """An upstream endpoint: an http(s) URL with a host and a port that parses ("" is unset). A
    port of 99999 or a cut IPv6 host passed the config and the dry run, then was a traceback."""
    if url and (problem := url_problem(url)):
        raise ValueError(f"{url!r} {problem}")
    return url


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a model endpoint, or None."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (parsed on access: out of range or not a number raises)
    except ValueError as e:
        return f"is not a valid URL ({e}); e.g. http://localhost:8000/v1"
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        return "is not an http(s) URL with a host; e.g. http://localhost:8000/v1"
    return None


HttpUrl = Annotated[str, AfterValidator(_http_url)]

# Docker's reference grammar: [registry[:port]/]path[/path...][:tag][@sha256:digest], or an image id
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REF = re.compile(
    rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?"
    r"(?:@sha256:[a-f0-9]{64})?|(?:sha256:)?[a-f0-9]{12,64}"
)


def image_ref_problem(ref: str) -> str | None:
    """What makes ``ref`` no Docker image reference (the engine answered "invalid reference
    format" with a traceback), or None."""
    if _IMAGE_REF.fullmatch(ref):
        return None
    return f"{ref!r} is not a Docker image reference: lowercase name[:tag], e.g. harnessopt-sandbox:latest"


def _image_ref(ref: str) -> str:
    if problem := image_ref_problem(ref):
        raise ValueError(problem)
    return ref


ImageRef = Annotated[str, AfterValidator(_image_ref)]


def _yaml_off(value: Any) -> Any:
    """YAML reads an unquoted ``off`` (and ``no``, ``false``) as false: for a check's setting, the
    word the docs give."""
    return "off" if value is False else value


Check = Annotated[Literal["reject", "warn", "off"], BeforeValidator(_yaml_off)]
# The name of an environment variable (never its value: keys are not written to the workspace).
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# USD per million tokens, [input, output].
PricePair = Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=2, max_length=2)]


class ModelConfig(_Strict):
    provider: ModelName = "anthropic"
    """Where model calls go: anthropic (Messages API), openai (any Chat Completions endpoint), scripted."""
    target: str = Field("claude-sonnet-4-6", min_length=1)
    """Model the harness runs (exported as HARNESSOPT_TARGET_MODEL)."""
    base_url: HttpUrl | None = None
    """Upstream endpoint, e.g. http://localhost:8000/v1 (default: ANTHROPIC_BASE_URL / OPENAI_BASE_URL, else the official API)."""
    api_key_env: EnvName | None = None
    """Environment variable holding the upstream key (default: ANTHROPIC_API_KEY / OPENAI_API_KEY)."""
    script: str | None = None
    """Scripted-model YAML (path relative to the workspace) when provider is 'scripted'."""
    allow_server_tools: bool = False
    """Let calls use server tools (web search/fetch, code execution), MCP servers and URL sources."""
    wire_api: Literal["chat", "responses"] = "chat"
    """API the openai provider speaks upstream: chat (POST /chat/completions) or responses (POST /responses)."""


class RolloutConfig(_Strict):
    sandbox: SandboxName = "auto"
    """auto = docker when an engine answers and ``rollout.image`` exists, else local (with a warning)."""
    batch_size: int = Field(8, ge=1)
    """Train tasks rolled out per round for the optimizer to read."""
    concurrency: int = Field(2, ge=1, le=64)
    """Tasks run at once."""
    timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    """Wall-clock limit per task, enforced from outside the harness."""
    memory_mb: int = Field(1024, ge=64)
    """Memory limit per task sandbox."""
    cpus: float = Field(1.0, gt=0)
    """CPU limit per task container."""
    pids: int = Field(128, ge=16)
    """Process limit per task container."""
    out_mb: int = Field(64, ge=1)
    """Size cap of the writable /out of a task."""
    output_cap_kb: int = Field(256, ge=1)
    """Bytes of stdout/stderr kept per task."""
    image: ImageRef = "harnessopt-sandbox:latest"
    """Docker image the task containers run."""
    scorer_timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS)
    """Time the host-side scorer may take per task; past it the task scores 0 (scorer error)."""
    scorer_memory_mb: int = Field(2048, ge=64)
    """Address-space limit of the scorer's process; past it that task scores 0 (scorer error)."""
    executor: ExecutorName = "local"
    """Where tasks run: local (a thread pool on this machine), ray (a Ray cluster; docs/cluster.md)
    or package.module:Factory."""
    warm_interpreter: bool = True
    """Start the next tasks' interpreters ahead, warmed, while the current tasks wait on the model
    (``runner.py warm``); results are those of a cold start. Off: every task starts cold."""


class OptimizerConfig(_Strict):
    backend: OptimizerName = "anthropic"
    """Who edits the view: the built-in Claude tool loop, a CLI agent, or a person."""
    model: str = Field("claude-opus-4-1", min_length=1)
    """Model of the built-in optimizer."""
    provider: ModelName | None = None
    """Upstream of the optimizer's calls; default: the target's (model.provider, base_url, api_key_env)."""
    base_url: HttpUrl | None = None
    """Optimizer upstream endpoint; default: model.base_url when the provider is the target's."""
    api_key_env: EnvName | None = None
    """Environment variable holding the optimizer upstream's key; default as base_url."""
    max_turns: int = Field(40, ge=1)
    """Model turns per round."""
    max_tokens: int = Field(400_000, ge=1000)
    """Input+output tokens per round."""
    wall_s: float = Field(1800.0, gt=0, le=MAX_SECONDS)
    """Wall-clock limit per round."""
    command: list[str] | None = None
    """Argv of the 'command' backend; the brief is passed on stdin and in OPTIMIZE.md."""
    bash_timeout_s: float = Field(60.0, gt=0, le=MAX_SECONDS)
    """Time limit of one bash tool command."""
    settle_s: float = Field(5.0, gt=0, le=MAX_SECONDS)
    """Manual backend: seconds without edits before the person's turn ends."""
    feedback: Literal["full", "no_expected"] = "full"
    """Scorer feedback in train trajectories: as written, or with the gold answer cut out."""
    unsafe_host: bool = False
    """Let the optimizer's bash or CLI agent run on this host when the sandbox is not Docker
    (--unsafe-host-optimizer): it can then reach the API key, the workspace and the network."""

    @property
    def label(self) -> str:
        """The optimizer as a run names it: ``backend:model``, or the backend alone where no model of
        harnessopt's choosing is called (``manual``: a person; ``command``: the argv's own)."""
        return self.backend if self.backend in ("manual", "command") else f"{self.backend}:{self.model}"


class GateConfig(_Strict):
    policy: GateName = "banked"
    """The gate policy (docs/gate.md): ``banked`` (a paired t-test against the incumbent's bank of
    cached runs, two looks) or ``paired`` (flip confirmation, the gate before the bank); a dotted
    path plugs in your own."""
    smoke: int = Field(5, ge=0)
    """Val tasks run first; any crash or timeout there rejects without spending the rest."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """One-sided confidence that the gain is real."""
    epochs: int = Field(1, ge=1, le=MAX_RUNS_A_TASK)
    """Runs per val task (for stochastic targets)."""
    incumbent_epochs: int | None = Field(None, ge=1, le=MAX_RUNS_A_TASK)
    """Runs per val task measured and cached for the incumbent (default: epochs + second_look). The
    runs past the first ``epochs`` are a bank the gate's reruns of the incumbent draw on before
    running it again (docs/gate.md, "Cached incumbent runs"); at 2 x epochs or more the A/A noise
    floor is measured on the cached runs at no extra cost."""
    second_look: int = Field(10, ge=0, le=MAX_RUNS_A_TASK)
    """Runs of every val task the gate's second look adds, when the first look is promising but
    inside the dead zone (0: a single look)."""
    first_look_share: float = Field(0.05, gt=0.0, lt=1.0)
    """Share of the primary test's alpha the first look spends; the second look gets the rest."""
    max_broken: int | None = Field(None, ge=0)
    """Reject when more val tasks broke than this."""
    confirm_flips: bool = True
    """Rerun tasks that flipped once before deciding."""
    rerun_incumbent: bool = False
    """Re-run the incumbent on val each round instead of reusing its cached scores."""
    min_effect: float = Field(0.0, ge=0.0)
    """Smallest gain worth a commit, added to the dead zone."""
    soft_margin: float = Field(0.05, ge=0.0)
    """Smallest gain of the secondary metric (soft score, or relative token saving) that breaks a tie."""
    secondary: Literal["none", "soft", "cost"] = "none"
    """Tie-break inside the dead zone, chosen here and never by the data: none, soft (the scorer's
    soft value), or cost (token saving, with a non-inferiority test on quality)."""
    secondary_share: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of the round's false-accept budget (1 - confidence) that the secondary test spends."""
    noninferiority_margin: float = Field(0.02, ge=0.0, le=1.0)
    """secondary cost: the largest loss of mean val score a cheaper candidate may have."""
    target_effect: float = Field(0.05, gt=0.0, lt=1.0)
    """The gain worth detecting: the noise floor says how many val tasks or epochs detect it."""
    confirm: Literal["val", "holdout", "none"] = "val"
    """After an accept, runs that did not select it: fresh runs on val, or on the held-out part
    of val; ho/best moves only when they confirm the gain."""
    confirm_epochs: int = Field(3, ge=1, le=MAX_RUNS_A_TASK)
    """The banked gate's confirmation (confirm: val): fresh runs of each val task by the accepted
    candidate, against the incumbent's bank. They start the new incumbent's bank, which the next
    round that validates tops up to incumbent_epochs; capped at incumbent_epochs."""
    confirm_moves_main: bool = True
    """main moves only when the confirmation (``confirm``) finds the gain again; false: main keeps
    what the gate accepted whatever the confirmation says (ho/best still waits for it)."""
    holdout_share: float = Field(0.3, gt=0.0, lt=1.0)
    """confirm: holdout: the share of val tasks set aside (by id), never seen by the gate."""
    run_alpha: float | None = Field(None, gt=0.0, lt=1.0)
    """False-accept budget of the whole run, spent evenly over run_rounds gate decisions."""
    run_rounds: int = Field(20, ge=1)
    """Gate decisions run_alpha is spread over; past them the gate accepts nothing."""

    @property
    def banked_epochs(self) -> int:
        """Runs per val task cached for the incumbent: ``incumbent_epochs``, by default ``epochs``
        plus the second look's runs (with no rerun of any kind, just ``epochs``)."""
        if self.incumbent_epochs is not None:
            return self.incumbent_epochs
        return self.epochs + (self.second_look if self.confirm_flips else 0)

    @property
    def confirm_runs(self) -> int:
        """Fresh runs a val task of the banked gate's confirmation: ``confirm_epochs``, at most the bank's."""
        return min(self.confirm_epochs, self.banked_epochs)

    @property
    def judges_bank(self) -> bool:
        """The gate compares with the incumbent's whole bank (``policy: banked`` without a secondary
        test, ``gate.banked.BankedGate``): what the noise floor and the projection model."""
        return self.policy == "banked" and self.secondary == "none"


class SearchConfig(_Strict):
    candidates: int = Field(DEFAULT_CANDIDATES, ge=1, le=16)
    """Edits the optimizer proposes each round, each in its own view and aimed at a different failure
    cluster of the round's train runs; more than one are screened on train (docs/optimizer.md, "Search")."""
    winners: int = Field(1, ge=1)
    """Screened candidates that go on to smoke and validation (the best non-dominated ones); more than
    one splits the gate's false-accept budget among them (docs/gate.md, "Search")."""
    screen_tasks: int | None = Field(None, ge=0)
    """Train tasks added to the batch for screening only (the incumbent, or a chain's base, runs them
    too; the optimizer does not read them). Null (the default): none with several candidates, and
    with ``search.explore`` null as many as ``search.length.chain_length`` chooses with the chain's
    length (more for a dearer optimizer turn), else none."""
    screen_floor: float | None = Field(None, ge=-1.0, le=1.0)
    """A candidate whose mean train difference against the incumbent is below this is not validated
    (none: the best screened candidate always is)."""
    archive: int = Field(4, ge=0)
    """Candidates of earlier rounds that won on some train tasks offered to a later brief to merge (0: none)."""
    explore: int | None = Field(None, ge=0, le=300)
    """Proposals chained in a round, each built on the last one that beat its base on a train batch;
    only the chain's end (or with ``checkpoints`` its pick) is validated (0: off, one proposal a
    round; docs/optimizer.md, "Explore"). Null (the default): a run chains as many steps as
    validating a chain's end costs in steps, from the projection's prices, 3 to 50
    (``search.length.chain_length``; the run says what it chose), 200 where the run's budget switches
    checkpoints on (300 where it pays for 6 whole validations), or 0 when search.candidates > 1 or
    the objective is not task (``Config.explore_steps``)."""
    checkpoints: int | None = Field(None, ge=0, le=300)
    """Every this many steps a chain's head runs once on fixed train tasks (``checkpoint_tasks``: the
    same tasks all run), and so does its end; the best scored state is validated instead of the end
    when it scored more than ``checkpoint_margin`` above it (0: off, the end is validated;
    docs/optimizer.md, "Explore" 8). Null (the default): every 20 steps of 200-step chains where
    ``search.explore`` is null, the train split has 50 tasks and the run's budget pays for 2 whole
    validations (both looks, the whole bank), every 10 of 300-step chains where it pays for 6; else off
    (``search.length.chain_length``; the run says what it chose)."""
    checkpoint_tasks: int | None = Field(None, ge=1, le=1000)
    """Fixed train tasks a checkpoint runs the chain's head on (at most the train split's). Null (the
    default): 50, and all of them up to 100 where checkpoints are switched on by a budget that pays
    for 6 whole validations (``search.length.chain_length``)."""
    checkpoint_margin: float | None = Field(None, ge=0.0, le=1.0)
    """How far above the chain's end (in mean score on the checkpoint's tasks) the best scored state
    must be to be validated instead of it. Null (the default): 0.04, and 0.03 where checkpoints are
    switched on by a budget that pays for 6 whole validations."""

    ties_move: bool | None = None
    """Whether a chain's step whose candidate ties its base on the train batch (the same mean score)
    moves the chain too; off, a step moves it only when strictly better there. Null (the default): on
    where ``search.explore`` is null and the run's budget pays for fewer than 2 whole validations
    (where ``search.checkpoints`` stays off: a short chain that moves only on a visible gain barely
    moves before its one validation), else off (``search.length.chain_length``; the run says)."""

    @model_validator(mode="after")
    def _explore_is_a_chain(self) -> SearchConfig:
        if self.explore == 1:
            raise ValueError("search.explore: 1 chains nothing; use 0 (off) or 2 or more")
        if self.explore and self.candidates > 1:
            raise ValueError(
                "search.explore chains one proposal at a time and search.candidates > 1 proposes several "
                "side by side; use one of them (search.explore: 0 for several candidates a round)"
            )
        if self.ties_move and (self.explore == 0 or self.candidates > 1):
            raise ValueError(
                "search.ties_move is about the steps of a chain and this config chains none (search.explore: 0 "
                "or search.candidates > 1); leave it out, or chain (search.explore null or 2 or more)"
            )
        picked = [f for f in ("checkpoint_tasks", "checkpoint_margin") if getattr(self, f) is not None]
        if picked and (self.checkpoints == 0 or self.explore == 0 or self.candidates > 1):
            raise ValueError(
                f"search.{picked[0]} is about a chain's checkpoints and this config holds none "
                "(search.checkpoints: 0, search.explore: 0 or search.candidates > 1); leave it out, or "
                "chain with checkpoints (search.explore and search.checkpoints null or a number)"
            )
        if self.checkpoints and (self.explore == 0 or self.candidates > 1):
            raise ValueError(
                "search.checkpoints scores the steps of a chain and this config chains none (search.explore: 0 "
                "or search.candidates > 1); set search.checkpoints: 0, or chain (search.explore null or 2 or more)"
            )
        return self

    @property
    def screening_only(self) -> int:
        """The train tasks a round screens on beyond its batch as it runs: ``screen_tasks``, where a
        null no rule has filled in (``search.length.with_chain``) is none."""
        return self.screen_tasks or 0

    @property
    def checkpoint_every(self) -> int:
        """Steps between a chain's checkpoints as it runs: ``checkpoints``, where a null no rule has
        filled in (``search.length.with_chain``) is off."""
        return self.checkpoints or 0


class BudgetConfig(_Strict):
    max_calls: int | None = Field(None, ge=1)
    """Model calls the gateway allows in the whole run (all roles)."""
    max_tokens: int | None = Field(None, ge=1)
    """Input+output tokens the gateway allows in the whole run."""
    max_cost: float | None = Field(None, gt=0)
    """US dollars the gateway allows in the whole run (list prices)."""
    max_hours: float | None = Field(None, gt=0, le=24 * 366)  # a year
    """Wall-clock hours the run may take, checked at phase boundaries (the round in progress fails)."""
    max_failed_rounds: int = Field(3, ge=1)
    """Consecutive failed rounds (an optimizer that keeps failing, ...) after which the run stops."""
    target_max_output_tokens: int = Field(32_000, ge=1)
    """Largest max_tokens one harness call may ask for; larger asks are refused (400)."""
    optimizer_max_output_tokens: int = Field(32_000, ge=1)
    """Largest max_tokens one optimizer call may ask for; larger asks are refused (400)."""


class GatewayConfig(_Strict):
    max_connections: int = Field(64, ge=2, le=4096)
    """Connections each gateway listener serves at once (a thread each); more get a 503 at once."""
    max_calls_per_lease: int = Field(10, ge=1)
    """Calls one lease (a task, or an optimizer round) may have in flight; more get a retryable 429."""
    io_timeout_s: float = Field(10.0, gt=0, le=MAX_SECONDS)
    """Time a client has to send a request's headers, and again its body; slower ones are dropped."""
    target_body_mb: float = Field(4.0, gt=0, le=32)
    """Largest request body a harness may send."""
    optimizer_body_mb: float = Field(32.0, gt=0, le=32)
    """Largest request body the optimizer may send."""
    socket_gid: int | None = Field(None, ge=1)
    """Group owning the gateway socket's dir, given to task containers; default: an unused gid (root)."""
    container_uids: list[int] = Field(default_factory=lambda: [65534])
    """Uids besides harnessopt's own (and root) that may connect to the gateway's Unix socket."""


class RayConfig(_Strict):
    address: str | None = None
    """Ray cluster to join (ray://... or host:port); default: RAY_ADDRESS, else a local one-node cluster."""
    max_retries: int = Field(2, ge=0, le=10)
    """Times a task whose worker or node died is run again on another node before the round fails."""
    num_cpus: float = Field(1.0, gt=0)
    """CPUs a task reserves on its node (Ray schedules by them; rollout.concurrency bounds the total)."""
    grace_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    """Time past rollout.timeout_s a task may wait for a node before the cluster counts as gone."""


class ChecksConfig(_Strict):
    leakage: Check = "reject"
    """Added lines that copy a train/val input or gold answer, or name a task id (docs/workspace.md,
    "Leakage and tamper checks"): reject the candidate, only warn, or do not look."""
    ngram_words: int = Field(8, ge=3)
    """Words in a row an added line must share with a task's input or answer to count as copied."""
    ngram_chars: int = Field(40, ge=8)
    """Characters those words must span (so short words and short answers never count alone)."""
    id_min_chars: int = Field(4, ge=1)
    """Task ids shorter than this are too likely to occur by chance and are not looked for."""
    memorised: Check = "reject"
    """Before an accept is recorded, rerun the fixed val tasks with perturbed inputs on both sides and
    reject (or only warn) when the gain collapses there (docs/gate.md, "Memorised answers")."""
    memorised_variants: int = Field(1, ge=1, le=8)
    """Perturbed variants run per fixed val task (each once, on both sides)."""
    memorised_alpha: float = Field(0.05, gt=0.0, lt=0.5)
    """Level of the memorised test: the rate at which it rejects a candidate that keeps its gain."""
    memorised_retain: float = Field(0.5, gt=0.0, le=1.0)
    """Share of the gate's gain a candidate must keep on perturbed inputs (H0 of the test)."""
    datalike: Annotated[Literal["flag", "off"], BeforeValidator(_yaml_off)] = "flag"
    """Flag a round for review when its diff adds data-like content (many short literals,
    high-entropy or base64-like blobs, new data files under skill/); never a rejection by itself."""

    skill_rules_off: list[Literal["folder-name", "unknown-keys"]] = Field(default_factory=list)
    """Agent Skills spec rules SKILL.md may break (init --skill-rule-off): folder-name (name and
    folder differ), unknown-keys (front matter keys outside the spec are kept, not checked)."""


class TriggerConfig(_Strict):
    distractors: str = "distractors"
    """Folder (relative to the workspace) of other skills installed beside the candidate in trigger
    runs, one Agent Skills directory each; missing: the candidate is the only skill offered."""


class Config(_Strict):
    objective: Literal["task", "trigger", "both"] = "task"
    """What a round scores: the agent's work with the skill (task), whether the skill loads exactly
    when a query needs it (trigger: only SKILL.md's description fields may change), or both, each gated."""
    mode: Literal["skill", "harness", "joint"] = "skill"
    """What the optimizer may change: skill/** (skill), harness/** (harness) or both (joint); harness
    and joint mode start with a round-0 diagnosis a person approves (docs/optimizer.md)."""
    template: TemplateName = "chat"
    """Harness template the workspace was made from."""
    whitelist: list[str] | None = None
    """Glob patterns (relative to the workspace) the optimizer may change; default per mode."""
    read_only: list[str] = Field(default_factory=list)
    """Globs never copied back, added to the always read-only tasks/**, scorer.py, perturb.py,
    harnessopt.yaml and .git/** (which no whitelist can open)."""
    flags: dict[str, str] = Field(default_factory=dict)
    """Feature flags exported to the harness as HO_FLAG_<NAME>."""
    model: ModelConfig = Field(default_factory=lambda: ModelConfig())
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig())
    optimizer: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig())
    gate: GateConfig = Field(default_factory=lambda: GateConfig())
    search: SearchConfig = Field(default_factory=lambda: SearchConfig())
    """Several candidates a round, screened on train (docs/optimizer.md, "Search")."""
    budget: BudgetConfig = Field(default_factory=lambda: BudgetConfig())
    gateway: GatewayConfig = Field(default_factory=lambda: GatewayConfig())
    checks: ChecksConfig = Field(default_factory=lambda: ChecksConfig())
    """Leakage checks on every candidate (tamper checks always run)."""
    ray: RayConfig = Field(default_factory=lambda: RayConfig())
    trigger: TriggerConfig = Field(default_factory=lambda: TriggerConfig())
    """Trigger runs (objective trigger or both; docs/workspace.md "Objectives")."""
    prices: dict[str, PricePair] = Field(default_factory=dict)
    """USD per million tokens [input, output] by model-name glob, before the built-in table."""

    @property
    def price_table(self) -> dict[str, tuple[float, float]]:
        """``prices`` as numbers, (input, output) USD per million tokens by model-name glob."""
        return {glob: (float(p[0]), float(p[1])) for glob, p in self.prices.items()}

    @property
    def optimizer_provider(self) -> str:
        """The provider the optimizer's calls go to: ``optimizer.provider``, else the target's."""
        return self.optimizer.provider or self.model.provider

    @property
    def explore_steps(self) -> int:
        """Steps a round chains (0: one proposal a round): ``search.explore``, or when it is null
        ``DEFAULT_EXPLORE`` where a chain can run (one candidate a round, the task objective)."""
        if self.search.explore is not None:
            return self.search.explore
        return DEFAULT_EXPLORE if self.search.candidates == 1 and self.objective == "task" else 0

    @field_validator("whitelist", "read_only")
    @classmethod
    def _valid_globs(cls, globs: list[str] | None) -> list[str] | None:
        from harnessopt.util.globs import glob_problem

        if globs and (problem := glob_problem(globs)):  # else found at copy-back, after the round's spend
            raise ValueError(f"{problem}; see docs/optimizer.md for the glob syntax")
        return globs

    @model_validator(mode="after")
    def _trigger_in_skill_mode(self) -> Config:
        if self.objective == "trigger" and self.mode != "skill":
            raise ValueError(
                f"objective: trigger changes only SKILL.md's description, which mode {self.mode} does not "
                "optimize; use mode: skill (or objective: both)"
            )
        return self

    @model_validator(mode="after")
    def _explore_on_tasks(self) -> Config:
        if self.search.explore and self.objective != "task":
            raise ValueError(
                f"search.explore screens each step on task runs; objective {self.objective} is not "
                "supported with it: use objective: task or search.explore: 0"
            )
        return self

    @model_validator(mode="after")
    def _one_alpha_split(self) -> Config:
        if self.search.winners > 1 and self.gate.run_alpha is not None:
            raise ValueError(
                "search.winners > 1 splits each round's alpha and gate.run_alpha spreads the run's; "
                "use one of them"
            )
        if self.search.winners > self.search.candidates:
            raise ValueError(  # (a silent no-op before: no round has more winners than candidates)
                f"search.winners {self.search.winners} is more than search.candidates "
                f"{self.search.candidates}: no round can validate more candidates than it proposes"
            )
        return self

    def allowed_globs(self) -> list[str]:
        """Paths the optimizer may change, relative to the workspace root (a trigger round: SKILL.md,
        whose description fields alone are then kept, ``objective.fields``)."""
        if self.objective == "trigger":
            return ["skill/SKILL.md"]
        if self.whitelist is not None:
            return list(self.whitelist)
        return list(MODE_WHITELIST[self.mode])

    def read_only_globs(self) -> list[str]:
        """Paths never copied back whatever the whitelist says: ``ALWAYS_READ_ONLY`` and ``read_only``."""
        return [*ALWAYS_READ_ONLY, *self.read_only]


def load_config(ws: Path) -> Config:
    path = ws / CONFIG_NAME
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except FileNotFoundError:
        raise UserError(
            f"{ws} is not a harnessopt workspace (no {CONFIG_NAME}); run 'harnessopt init' first"
        ) from None
    except yaml.YAMLError as e:
        raise UserError(
            f"{path} is not valid YAML ({_yaml_problem(e)}); fix it or restore it with git"
        ) from e
    except UnicodeDecodeError as e:
        raise UserError(not_utf8(path, e)) from None
    if raw is None or (not raw and not isinstance(raw, dict)):  # read as all defaults, a hosted model (QA)
        raise UserError(
            f"{path} holds no settings (an empty document); restore it with git "
            f"(git -C {shlex.quote(str(ws))} checkout -- {CONFIG_NAME})"
        )
    if twice := duplicate_key(text):
        raise UserError(f"{path}: {twice} is given twice (only the last would count); keep one")
    return parse_config(raw, str(path))


def parse_config(raw: Any, where: str) -> Config:
    if not isinstance(raw, dict):
        raise UserError(f"{where} must be a YAML mapping")
    if found := _bool_for_a_number(raw, Config):
        key, value = found
        raise UserError(
            f"{where}: {key}: expected a number, got {str(value).lower()}; fix the setting (see docs/workspace.md)"
        )
    try:
        return Config.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        dotted = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise UserError(
                f"{where}: unknown setting {dotted!r}; the settings are listed in docs/workspace.md"
            ) from e
        loc = f"{dotted}: " if dotted else ""
        raise UserError(f"{where}: {loc}{_plain(err)}; fix the setting (see docs/workspace.md)") from e


_PLAIN = {  # pydantic's error types in a user's words
    "int_parsing": "expected a whole number",
    "int_type": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "bool_parsing": "expected true or false",
    "bool_type": "expected true or false",
    "string_type": "expected text",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping of settings",
}


def _plain(err: Any) -> str:
    """One error of pydantic's as the settings' own words: what was expected and what was given."""
    if err["type"] in _PLAIN:
        return f"{_PLAIN[err['type']]}, got {err.get('input')!r}"
    if err["type"] == "string_too_short" and err.get("input") == "":
        return "must not be empty"
    if err["type"] in ("too_short", "too_long") and err["loc"][:1] == ("prices",):
        return f"a price is [input, output] USD per million tokens, e.g. [3, 15], got {err.get('input')!r}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if msg.startswith("Input should be "):  # "Input should be greater than 0", "... 'a' or 'b'"
        return "must be " + msg.removeprefix("Input should be ") + f", got {err.get('input')!r}"
    return msg


def _bool_for_a_number(raw: Any, model: type[BaseModel], at: str = "") -> tuple[str, bool] | None:
    """The first setting of ``raw`` that holds a number in ``model`` and true or false (YAML's
    yes, no, on and off too), which pydantic would take as 1 or 0: its dotted key and value."""
    if not isinstance(raw, dict):
        return None
    for name, field in model.model_fields.items():
        kinds = set(get_args(field.annotation)) or {field.annotation}
        value = raw.get(name)
        if isinstance(value, bool) and kinds & {int, float} and bool not in kinds:
            return f"{at}{name}", value
        for kind in kinds:
            nested = isinstance(kind, type) and issubclass(kind, BaseModel)
            if nested and (found := _bool_for_a_number(value, kind, f"{at}{name}.")):
                return found
    return None


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def apply_overrides(cfg: Config, overrides: Mapping[str, Any]) -> Config:
    """Command-line values win over the YAML: keys are dotted paths like 'rollout.concurrency'.

    ``None`` sets the key to null (``-c search.explore=null``: it was skipped, silently, as if no
    flag was given; the caller passes only the flags that were given). An unknown key is a UserError.
    """
    data = cfg.model_dump()
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        if parents and parents[0] in ("flags", "prices"):  # free-form maps: a key may hold dots (gpt-4.1)
            parents, leaf = parents[:1], dotted.split(".", 1)[1]
        for p in parents:
            child = node.get(p) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                raise UserError(f"unknown setting {dotted!r}; the settings are listed in docs/workspace.md")
            node = child
        if leaf not in node and parents not in (["flags"], ["prices"]):  # free-form maps take new keys
            raise UserError(f"unknown setting {dotted!r}; the settings are listed in docs/workspace.md")
        if parents == ["flags"] and not isinstance(value, str):  # -c flags.stream=0: HO_FLAG_* are strings
            value = ("1" if value else "0") if isinstance(value, bool) else str(value)
        node[leaf] = value
    return parse_config(data, "command-line options")


def parse_assignment(text: str) -> tuple[str, Any]:
    """``-c key=value``: the value is read as YAML (``3`` an int, ``true`` a bool, ``[a, b]`` a list)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UserError(f"-c takes KEY=VALUE (e.g. -c gate.epochs=3), got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def yaml_value(value: Any) -> str:
    """``value`` as ``-c key=VALUE`` reads it back (``parse_assignment``): a string as itself
    where YAML reads it so, else as JSON, which YAML reads (``[1, 2]``, ``{"*": [1, 2]}``, ``"3"``)."""
    if isinstance(value, str) and value.strip() == value and "\n" not in value:
        try:
            if value and yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's problem and where: ``expected ',' or ']', but got '<stream end>' at line 4, column 1``."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if not problem:
        return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return (
        f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)
    )
