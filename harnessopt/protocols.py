"""The small protocols and records that the swappable parts share.

Every other module imports from here, never the other way round. A part is chosen by a short
name (``local``/``docker`` sandbox, ``anthropic``/``command``/``manual`` optimizer,
``anthropic``/``scripted`` model); an unknown name is a ``UserError`` listing the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

J = TypeVar("J")
R = TypeVar("R")

# Where a part says what it is doing: one line of text for the person running harnessopt.
Announce = Callable[[str], None]

# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """One line of the task file. ``answer`` never leaves the host side."""

    id: str
    input: str | dict[str, Any]
    answer: Any
    split: str  # "train" | "val" | "test"
    metadata: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The task as the harness may see it: everything but the gold answer."""
        return {"id": self.id, "input": self.input, "split": self.split, "metadata": self.metadata}


# --------------------------------------------------------------------------- model gateway


@dataclass
class Exchange:
    """One model call seen by the gateway: the request and the (non-streaming) response body."""

    request: dict[str, Any]
    response: dict[str, Any] | None
    error: str | None
    started: float
    wall_s: float
    input_tokens: int = 0
    output_tokens: int = 0
    streamed: bool = False
    estimated: bool = False  # the upstream reported no usage: the token counts are chars/4 estimates


@dataclass
class Usage:
    """Model usage of one role in one round."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    estimated_calls: int = 0  # calls whose token counts are estimates (the upstream reported none)

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd
        self.estimated_calls += other.estimated_calls


# Request headers a client's features depend on that the gateway passes upstream. Nothing
# else of the client's headers leaves the gateway: never its credentials (the lease token).
FORWARDED_HEADERS = ("anthropic-beta", "anthropic-version")


@dataclass(frozen=True)
class Forward:
    """What of a client's request, besides the body, a model passes upstream.

    ``headers`` holds only FORWARDED_HEADERS (lower-cased names); ``query`` is the request
    path's query string without ``?`` (Claude Code calls ``/v1/messages?beta=true``).
    """

    headers: Mapping[str, str] = field(default_factory=dict)
    query: str = ""

    @classmethod
    def of(cls, headers: Mapping[str, str], query: str = "") -> Forward:
        """The allow-listed subset of a request's headers (names in any case), and its query."""
        kept = {k.lower(): v for k, v in headers.items() if k.lower() in FORWARDED_HEADERS}
        return cls(kept, query)


class Model(Protocol):
    """What the gateway forwards to: the real API or the scripted model.

    ``create`` takes a Messages API request body (``stream`` already removed) and returns the
    response body of a non-streaming call. It raises ``ModelError`` for an API error.
    ``forward`` carries the client's allow-listed headers and query string; a model that has
    no use for them ignores them.

    A model of your own subclasses this class: the members with a body below are optional and
    their defaults apply to what it leaves out.
    """

    name: str

    def create(
        self, request: dict[str, Any], role: str, *, forward: Forward | None = None
    ) -> dict[str, Any]: ...

    def check(self, request: dict[str, Any]) -> None:
        """Refuse a request this upstream cannot take, before any budget is reserved for it:
        raise ``ModelError`` (a refusal, not a call). Default: every request may go."""
        return None


class ModelError(Exception):
    """An API error to pass back to the caller with its HTTP status and error type.

    ``retryable`` becomes the ``x-should-retry`` header of the gateway's answer. A model that
    retries by itself raises only what it gave up on, with ``retryable=False``, so that
    clients do not repeat the whole sequence (one place decides retries).
    """

    def __init__(self, status: int, error_type: str, message: str, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class GatewayLease:
    """How one sandboxed run reaches the gateway, and the token that identifies it."""

    token: str
    base_url: str  # http://127.0.0.1:PORT (local sandbox, optimizer)
    socket_path: Path | None  # Unix socket for container sandboxes (mounted into the container)


# --------------------------------------------------------------------------- sandbox


@dataclass(frozen=True)
class RunSpec:
    """Everything a sandbox needs to run ``harness/run.py`` on one task."""

    task: dict[str, Any]  # Task.public(): no answer
    skill_dir: Path  # host path, mounted/copied read-only
    harness_dir: Path  # host path, mounted/copied read-only
    env: Mapping[str, str]  # HARNESSOPT_TARGET_MODEL, HO_FLAG_* (gateway vars are added by the sandbox)
    gateway: GatewayLease
    timeout_s: float


@dataclass
class RunOutput:
    """What came back from one sandboxed run. Files the harness wrote are under ``out_dir``."""

    exit_code: int | None  # None when killed (timeout) before it exited
    wall_s: float
    out_dir: Path
    stdout_tail: str = ""
    stderr_tail: str = ""
    error_class: str | None = None  # "timeout", "oom", "crash", "output_cap", "sandbox_error", ...
    notes: list[str] = field(default_factory=list)  # facts about containment to show in the trajectory


@dataclass
class ShellResult:
    """Outcome of one shell command: combined stdout+stderr (capped), exit code, timeout flag."""

    output: str
    exit_code: int | None  # None when killed at its timeout
    timed_out: bool


@dataclass
class AgentResult:
    """Outcome of one CLI agent run by a shell: stdout and stderr (head and tail kept), exit code."""

    stdout: str
    stderr: str
    exit_code: int | None  # None when killed at its timeout
    timed_out: bool
    note: str = ""  # what the shell did to it (stopped for the view's growth, processes left behind)


def discarded_list(view: Path) -> Path:
    """Beside a view (in its private parent, out of the optimizer's reach): the view's paths a
    shell could not keep in it, one a line. The Docker shell copies only regular files and
    directories out of its container, so a symlink or FIFO made there never reaches the host view;
    it lists them here, and the copy-back reports them as discarded, as it does the ones it finds
    in a local view."""
    return view.parent / f".{view.name}.discarded"


@runtime_checkable
class Shell(Protocol):
    """Where the optimizer's tools act: one fresh shell per command, cwd = the view.

    ``view_root`` is the path under which the commands see the view (``/view`` in a container,
    the host path on the host); the editor accepts absolute paths below it.
    """

    view_root: str

    def run(self, command: str, timeout_s: float) -> ShellResult: ...

    def edit(self, request: dict[str, Any]) -> dict[str, Any]:
        """One editor file operation, done where the commands run (the in-image runner's ``edit``
        mode: ``{"op": "view"|"read"|"write", "path": <view-relative>, "text"?}``), never
        following a link; the reply is ``{"ok": True, ...}`` or ``{"ok": False, "error": ...}``."""
        ...

    def agent(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes,
        env: Mapping[str, str],
        timeout_s: float,
        gateway: GatewayLease | None,
    ) -> AgentResult:
        """Run a CLI agent (the ``command`` optimizer) where the commands run, cwd = the view, with
        ``stdin``, ``env`` and ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY reaching the gateway with the
        lease's token; stopped at ``timeout_s``; no process of it outlives the call."""
        ...


@runtime_checkable
class SupportsClose(Protocol):
    """A part holding resources (a container, a pool) releases them in ``close``."""

    def close(self) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """Runs one task at a time per call; safe to call from several threads at once.

    A sandbox of your own subclasses this class (like inspect_ai's ``SandboxEnvironment``):
    ``name``, ``run``, ``shell`` and ``close`` are required; the members with a value or a body
    below are optional and their defaults apply to what it leaves out.
    """

    name: str
    # One line saying how tasks are contained, printed when a run starts ("" prints nothing).
    description: str = ""
    # Uids besides the tasks' (65534) that may reach the gateway's Unix socket, such as the
    # optimizer's container's.
    gateway_uids: tuple[int, ...] = ()
    # True when the optimizer's shell and agent run isolated from this host (in a container);
    # False puts them on the host, which needs ``optimizer.unsafe_host``.
    shell_isolated: bool = False
    # The interpreter that runs a task's ``harness/run.py``, as the sandbox's shell names it.
    task_python: str = "python3"

    @property
    def identity(self) -> str:
        """What the val cache keys a measurement by: every property of the sandbox that can
        change a score (Docker: ``docker:IMAGE@sha256:...``). Default: ``name``."""
        return self.name

    def prewarm(self, socket_dir: str | None) -> None:
        """Start what the first tasks need (containers) while the round's other work runs;
        ``socket_dir`` is the gateway's socket folder to mount. Default: nothing to start."""
        return None

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        """Run the harness on ``spec.task``; collect its /out files into ``out_dir`` (host)."""
        ...

    def shell(self, view: Path) -> Shell:
        """The optimizer's shell for ``view``, isolated like this sandbox's tasks.

        A shell holding resources is ``SupportsClose``: its user closes it after the round.
        """
        ...

    def close(self) -> None:
        """Release everything this sandbox started (containers, pools)."""
        ...


# --------------------------------------------------------------------------- executor

# Runs one spec and puts the run's /out in the given directory (on the head).
SandboxCall = Callable[[RunSpec, Path], RunOutput]


class Executor(Protocol):
    """Runs a batch of jobs at a bounded concurrency, each job's sandbox wherever it chooses.

    The runner keeps the head's part of every job (the lease, the gateway's record, the scorer);
    an executor decides how many jobs are in flight and where each one's sandbox runs. An executor
    of your own subclasses this class (``rollout.executors.PooledExecutor`` gives the job queue);
    the members with a value below are optional and keep their defaults.
    """

    name: str
    max_retries: int  # times a job whose worker died (``rollout.executors.WorkerLost``) is run again
    # True when the tasks run in the run's own sandbox (so starting its containers ahead helps).
    uses_run_sandbox: bool = False

    def sandbox_for(self, root: Path) -> SandboxCall:
        """How to run a spec of the candidate at ``root`` (holding skill/ and harness/)."""
        ...

    def submit(self, fn: Callable[[J], R], job: J, *, ahead: bool = False) -> Future[R]:
        """Queue one job; ``ahead``: only in a slot no ordinary job waits for."""
        ...

    def hurry(self, fut: Future[Any]) -> None:
        """An ``ahead`` job still queued becomes an ordinary one."""
        ...

    def gather(self, futures: Sequence[Future[R]]) -> Generator[R, None, None]:
        """Their results in order; stops them all on an error."""
        ...

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """``fn`` of each job, in order, at most ``concurrency`` at once; stops them all on an error."""
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- rollout results


@dataclass
class TaskResult:
    """One scored run of one task. Rendered to ``trajectories/<id>.md`` for train tasks."""

    task_id: str
    split: str
    round: int
    epoch: int
    score: float
    passed: bool
    soft: float | None
    feedback: str
    answer: str
    exit_code: int | None
    error_class: str | None
    wall_s: float
    input_tokens: int
    output_tokens: int
    steps: int
    stderr_tail: str = ""
    stdout_tail: str = ""
    task_input: Any = None
    exchanges: list[Exchange] = field(default_factory=list)
    harness_events: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phase: str = ""  # the part of the round that ran it (``rollout.phase_stats.PHASES``); set by the Runner

    @property
    def crashed(self) -> bool:
        """A harness crash, timeout or sandbox failure (the smoke test rejects on these)."""
        return self.error_class is not None


# --------------------------------------------------------------------------- optimizer


@dataclass
class Proposal:
    """What an optimizer returned: its summary and what it spent. Edits are in the view."""

    summary: str
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    stopped_by: str = "done"  # "done" | "turn_budget" | "token_budget" | "wall_clock" | "error" | "stopped"
    transcript_path: Path | None = None


class Optimizer(Protocol):
    """Edits files in a view directory per its brief; harnessopt copies back what is allowed."""

    name: str

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal: ...


# --------------------------------------------------------------------------- gate


@dataclass(frozen=True)
class Outcome:
    """One run of one task as the gate sees it."""

    score: float
    soft: float | None = None
    tokens: int = 0
    crashed: bool = False


Outcomes = Mapping[str, Sequence[Outcome]]  # task id -> one Outcome per epoch

# Rerun the given task ids; returns (candidate outcomes, incumbent outcomes) for those ids.
ConfirmFn = Callable[[Sequence[str]], tuple[Outcomes, Outcomes]]


@dataclass
class GateDecision:
    """The gate's verdict with every number that explains it (goes into the commit manifest)."""

    accept: bool
    reason: str
    n: int
    candidate_score: float
    incumbent_score: float
    delta: float  # mean paired difference candidate - incumbent
    dead_zone: float
    fixed: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    noise_flips: list[str] = field(default_factory=list)
    soft_delta: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


class GatePolicy(Protocol):
    """Decides whether a candidate replaces the incumbent, from paired val outcomes.

    A policy of your own subclasses this class: ``name`` and ``decide`` are required, ``futile``
    is optional and its default never stops validation early.
    """

    name: str
    bank_first_look: bool = False
    """True: ``decide`` and ``futile`` get every cached run of the incumbent (its bank) as
    ``incumbent``, and ``decide``'s ``confirm`` runs the candidate alone (its incumbent side is
    empty). False: they get the incumbent's first ``epochs`` runs, and ``confirm`` draws the
    incumbent's side from the bank (``harnessopt.gate.bank``)."""

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision: ...

    def futile(
        self, candidate: Outcomes, incumbent: Outcomes, remaining: Sequence[str], can_rerun: bool = True
    ) -> bool:
        """Can validation stop here: could no outcome of the ``remaining`` task ids make ``decide``
        accept? ``can_rerun``: ``decide`` will get a ``confirm``. Default: False (never stops)."""
        return False
