"""Run a candidate (skill + harness) on a batch of tasks: sandbox, gateway record, scorer."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harnessopt import registry
from harnessopt.config import Config
from harnessopt.errors import BudgetExceeded, HarnessoptError
from harnessopt.gateway.server import SHARED_REFUSED, Gateway
from harnessopt.objective.trigger import is_trigger_task, skill_name
from harnessopt.objective.trigger import score as trigger_score
from harnessopt.protocols import Executor, Outcome, RunOutput, RunSpec, Sandbox, SandboxCall, Task, TaskResult
from harnessopt.rollout.executors import LocalExecutor, WorkerLost
from harnessopt.rollout.run_cache import RoundStore
from harnessopt.rollout.taxonomy import SCORER_ERROR, refused
from harnessopt.rollout.trajectory import safe_filename
from harnessopt.util import interrupts
from harnessopt.util.text import redact
from harnessopt.workspace import flags
from harnessopt.workspace.scorer_proc import ScorerProcess
from harnessopt.workspace.scoring import run_scorer

ANSWER_CAP = 64 * 1024
REFUSED_RERUNS = 2  # times a run is run again after the gateway refused one of its connections
OUT_DIRS = "task-out"  # scratch/round-K/task-out/<label>/<task>.<epoch>: no candidate is called that
EVENTS_CAP = 500


@dataclass(frozen=True)
class Candidate:
    """A skill + harness pair on the host, as the sandbox mounts it."""

    root: Path  # holds skill/ and harness/
    label: str  # "incumbent" or "candidate"
    commit: str  # the harness commit it came from (or "candidate-of-<sha>")
    flags: tuple[tuple[str, str], ...] = ()  # flag values over harnessopt.yaml's (harnessopt ablate)


class UpstreamDown(HarnessoptError):
    """The model's endpoint stopped answering mid-round (``Gateway.upstream_down``): the round's
    runs are no evidence, it fails and the run stops (``round.driver``)."""


class GatewayRefused(HarnessoptError):
    """A task's runs kept losing connections to the gateway: the round fails, nothing is scored 0."""


class RunObserver(Protocol):
    """Told, on the thread that called ``Runner.run``, when a batch starts (with its phase) and as
    each task ends (the result carries the phase too).

    ``started`` may raise to stop before the batch spends anything (the STOP file does).
    """

    def started(
        self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int], phase: str
    ) -> None: ...

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None: ...


class Runner:
    """Runs tasks concurrently through one sandbox and one gateway, and scores them."""

    def __init__(
        self,
        cfg: Config,
        sandbox: Sandbox,
        gateway: Gateway,
        scorer: Callable[..., Any] | ScorerProcess,
        scratch: Path,
        progress: Callable[[str, int, int], None] | None = None,
        store: RoundStore | None = None,
        executor: Executor | None = None,
    ):
        # Where jobs run and how many at once (executors.py); default: a thread pool here.
        self.executor: Executor = executor or LocalExecutor(sandbox, cfg.rollout.concurrency)
        self.store = store  # finished rollouts kept on disk: a rerun of the round reuses them
        self.notes: list[str] = []  # things the run should say once (a scorer failing, by kind)
        self.retried: list[dict[str, Any]] = []  # runs rerun after their worker died (WorkerLost)
        self._kinds: set[str] = set()
        self._notes_lock = threading.Lock()
        self.cfg = cfg
        self.sandbox = sandbox
        self.gateway = gateway
        self.scorer = scorer
        self.scratch = scratch
        self.progress = progress
        self.observers: list[RunObserver] = []  # progress display, per-round counts, the STOP file
        # prefetch()ed runs: (root, task, epoch, round) -> (the candidate's label, the run)
        self._ahead: dict[tuple[str, str, int, int], tuple[str, Future[TaskResult]]] = {}
        self._ahead_lock = threading.Lock()
        self._stopping = threading.Event()  # the run is being torn down: what ends now is not kept

    def stop(self) -> None:
        """The run is ending before its jobs do (Ctrl-C, SIGTERM, a failure): a run that returns from
        now on may have been ended by the teardown (its task killed, its gateway gone), so it is
        not kept for a rerun of the round, which runs it again."""
        self._stopping.set()

    def run(
        self,
        cand: Candidate,
        tasks: Sequence[Task],
        round_no: int,
        epochs: Sequence[int] = (0,),
        *,
        phase: str,
    ) -> list[TaskResult]:
        """Each task at each epoch (the run's identity in caches), as part of ``phase`` of the round
        (``phase_stats.PHASES``): the observers are told it and every result carries it."""
        jobs = [(t, e) for e in epochs for t in tasks]
        refused_before = self.gateway.refusals
        results: list[TaskResult] = []
        for o in list(self.observers):
            o.started(cand.label, tasks, round_no, epochs, phase)
        via = self.executor.sandbox_for(cand.root)  # ray: the candidate ships once, here
        futures = [self._claim(cand, task, round_no, epoch, via, phase) for task, epoch in jobs]
        # Ctrl-C or a failure: the executor drops queued jobs and stops running ones (closing()).
        with contextlib.closing(self.executor.gather(futures)) as done:
            for result in done:
                result.phase = phase  # a run made ahead is counted where it is claimed
                results.append(result)
                interrupts.check()
                if self.progress:
                    self.progress(cand.label, len(results), len(jobs))
                for o in list(self.observers):
                    o.finished(cand.label, results[-1], len(results), len(jobs))
                if down := self.gateway.upstream_down():  # the rest would wait out the retries too
                    raise UpstreamDown(down)
        # Runs whose calls were refused are no evidence (a run made ahead was refused before this
        # batch began: its exchanges say so).
        if self.gateway.refusals > refused_before or any(_refused(r) for r in results):
            raise BudgetExceeded(self.gateway.exhausted() or "the model budget is spent")
        return results

    def expect(self, round_no: int, phase: str, runs: int) -> None:
        """Tell the observers that care (the progress display: ``expect``) that ``runs`` runs of
        ``phase`` are planned, to be started in batches."""
        for o in list(self.observers):
            if (expect := getattr(o, "expect", None)) is not None:
                expect(round_no, phase, runs)

    def prefetch(
        self, cand: Candidate, jobs: Sequence[tuple[Task, int]], round_no: int, *, phase: str
    ) -> None:
        """Start these runs ahead, each only in a slot no ordinary run is waiting for; a later
        ``run`` of the same (candidate, task, epoch) takes its result instead of running it again,
        and tells the observers then. ``drop_prefetched`` forgets the ones never asked for (their
        results carry ``phase``, the one they were started for)."""
        via = self.executor.sandbox_for(cand.root)
        for task, epoch in jobs:
            key = (str(cand.root), task.id, epoch, round_no)
            with self._ahead_lock:
                if key not in self._ahead:
                    self._ahead[key] = (
                        cand.label,
                        self._submit(cand, task, round_no, epoch, via, phase, ahead=True),
                    )

    def drop_prefetched(self, wait: bool = True) -> list[tuple[str, TaskResult]]:
        """Forget the runs started ahead and never asked for: queued ones never start; running ones
        are waited for unless not ``wait`` (Ctrl-C: the sandbox's close ends them). Returns the
        (candidate label, result) of those that ran: spent, for the round's counts."""
        with self._ahead_lock:
            ahead, self._ahead = self._ahead, {}
        ran = [(label, fut) for label, fut in ahead.values() if not fut.cancel()]
        if not wait:
            ran = [(label, fut) for label, fut in ran if fut.done()]
        return [(label, fut.result()) for label, fut in ran if fut.exception() is None]

    def _claim(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall, phase: str
    ) -> Future[TaskResult]:
        """The run started ahead for this job (hurried if still queued), or a new one."""
        with self._ahead_lock:
            _label, fut = self._ahead.pop((str(cand.root), task.id, epoch, round_no), ("", None))
        if fut is not None and not fut.cancelled():
            self.executor.hurry(fut)
            return fut
        return self._submit(cand, task, round_no, epoch, via, phase)

    def _submit(
        self,
        cand: Candidate,
        task: Task,
        round_no: int,
        epoch: int,
        via: SandboxCall,
        phase: str,
        ahead: bool = False,
    ) -> Future[TaskResult]:
        job = (task, epoch)
        return self.executor.submit(
            lambda j: _in_phase(self.run_one(cand, j[0], round_no, j[1], via=via), phase), job, ahead=ahead
        )

    def run_one(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall | None = None
    ) -> TaskResult:
        """One task: its kept result, or a run (``via`` the executor's sandbox) scored here."""
        if self.store is not None and (kept := self.store.get(round_no, cand.root, task, epoch)) is not None:
            return kept
        via = via or self.executor.sandbox_for(cand.root)
        result = self._run_one(cand, task, round_no, epoch, via)
        # A refused run is no evidence, and one that ended as the run was torn down may have been
        # killed by it (a "crash" of exit -9): neither is kept for a rerun of the round.
        torn_down = self._stopping.is_set() or interrupts.stopping()
        if self.store is not None and not _refused(result) and not torn_down:
            self.store.put(round_no, cand.root, task, epoch, result)
        return result

    def _run_one(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall
    ) -> TaskResult:
        # Beside the round's candidate roots, never inside one: round.propose.check copies the incumbent's
        # root, and what a harness left in /out (say a symlink loop) must not be part of that copy.
        name = f"{safe_filename(task.id)}.{epoch}"
        out_dir = self.scratch / f"round-{round_no}" / OUT_DIRS / cand.label / name
        if cand.root.resolve() in out_dir.resolve().parents:
            raise RuntimeError(f"task output {out_dir} would be inside the candidate root {cand.root}")
        lost = refused = 0
        while True:
            if out_dir.exists():
                shutil.rmtree(out_dir)
            out_dir.mkdir(parents=True)
            lease = self.gateway.lease("target", round_no, task.id)
            spec = RunSpec(
                task=task.public(),
                skill_dir=cand.root / "skill",
                harness_dir=cand.root / "harness",
                env=self._env(cand),
                gateway=lease,
                timeout_s=self.cfg.rollout.timeout_s,
            )
            try:
                out = via(spec, out_dir)
            except WorkerLost as e:  # its calls stay spent; a fresh lease and run, on another node
                last = lost == self.executor.max_retries
                self._lost(round_no, task.id, epoch, lost, str(e), last)
                lost += 1
                if last:
                    raise
                continue
            finally:
                exchanges = self.gateway.release(lease.token)
            if any((x.error or "").startswith(SHARED_REFUSED) for x in exchanges):
                # Another run may have taken the slots its calls needed: no evidence about it.
                refused += 1
                if refused > REFUSED_RERUNS:
                    raise GatewayRefused(
                        f"the gateway refused connections of task {task.id} on {refused} runs in a row "
                        "(its shared listener was full); raise gateway.max_connections or lower "
                        "rollout.concurrency"
                    )
                continue
            return self._score(task, round_no, epoch, out, exchanges, cand.root / "skill")

    def _lost(self, round_no: int, task_id: str, epoch: int, attempt: int, why: str, last: bool) -> None:
        """A run whose worker died, in harnessopt's words: a note (the manifest keeps it, ``run``
        says it) and an entry in ``retried`` (the journal keeps it)."""
        then = "the round fails" if last else "ran it again on another node"
        with self._notes_lock:
            self.retried.append(
                {"round": round_no, "task": task_id, "epoch": epoch, "attempt": attempt + 1, "why": why}
            )
            self.notes.append(f"round {round_no}: task {task_id} (attempt {attempt + 1}): {why}; {then}")

    def _warn_once(self, error: str) -> None:
        """One run-level note per kind of scorer error (the kind: its words before any number)."""
        kind = " ".join(w for w in error.split()[:4] if not any(c.isdigit() for c in w))
        with self._notes_lock:
            if kind not in self._kinds:
                self._kinds.add(kind)
                self.notes.append(f"the scorer failed, and each run it failed on scored 0: {error[:200]}")

    def _env(self, cand: Candidate) -> dict[str, str]:
        """The target model, and ``HO_FLAG_*``: harness/flags.yaml < harnessopt.yaml < the candidate's."""
        flag_env = flags.environment(cand.root / "harness", self.cfg.flags, cand.flags)
        return {"HARNESSOPT_TARGET_MODEL": self.cfg.model.target, **flag_env}

    def _score(
        self, task: Task, round_no: int, epoch: int, out: RunOutput, exchanges: list, skill_dir: Path
    ) -> TaskResult:
        answer = _read_capped(out.out_dir / "answer.txt", ANSWER_CAP)
        notes = list(out.notes)
        if out.error_class is not None:
            score, soft, passed = 0.0, None, False
            feedback = f"harness failed ({out.error_class}, exit code {out.exit_code}); no score"
        elif is_trigger_task(task):  # the built-in trigger score, from the gateway's record
            score, feedback = trigger_score(task, skill_name(skill_dir), exchanges)
            soft, passed = None, score >= 1.0
        else:
            task_dict = {**task.public(), "answer": task.answer}
            if isinstance(self.scorer, ScorerProcess):  # its own process: the host enforces its limits
                sr = self.scorer.score(task_dict, answer, out.out_dir)
            else:
                timeout = self.cfg.rollout.scorer_timeout_s
                sr = run_scorer(self.scorer, task_dict, answer, out.out_dir, timeout_s=timeout)
            score, soft, feedback, passed = sr.score, sr.soft, sr.feedback, sr.passed
            if self.cfg.optimizer.feedback == "no_expected":  # enforced here, whatever scorer.py says
                feedback = _without_answer(feedback, task.answer)
            if sr.error:
                notes.append(f"{SCORER_ERROR}: {sr.error}")
                self._warn_once(sr.error)
        return TaskResult(
            task_id=task.id,
            split=task.split,
            round=round_no,
            epoch=epoch,
            score=score,
            passed=passed,
            soft=soft,
            feedback=feedback,
            answer=answer,
            exit_code=out.exit_code,
            error_class=out.error_class,
            wall_s=round(out.wall_s, 3),
            input_tokens=sum(x.input_tokens for x in exchanges),
            output_tokens=sum(x.output_tokens for x in exchanges),
            steps=len(exchanges),
            stderr_tail=out.stderr_tail,
            stdout_tail=out.stdout_tail,
            task_input=task.input,
            exchanges=list(exchanges),
            harness_events=_read_events(out.out_dir / "trajectory.jsonl"),
            notes=notes,
        )


def make_executor(cfg: Config, sandbox: Sandbox, gateway_url: str) -> Executor:
    """The executor ``cfg.rollout.executor`` names (registry); ``ray`` joins (or starts) the cluster now."""
    executor: Executor = registry.build(
        "executor", cfg.rollout.executor, cfg, sandbox=sandbox, gateway_url=gateway_url
    )
    return executor


def _in_phase(result: TaskResult, phase: str) -> TaskResult:
    result.phase = phase
    return result


def _without_answer(feedback: str, answer: Any) -> str:
    """The scorer's feedback with the gold answer (as text and as JSON) cut out."""
    forms = {str(answer), json.dumps(answer, ensure_ascii=False, sort_keys=True)}
    forms.add(json.dumps(answer, ensure_ascii=False, sort_keys=True, separators=(",", ":")))
    for form in sorted(forms, key=len, reverse=True):
        feedback = redact(feedback, form)
    return feedback


def outcomes(results: Sequence[TaskResult]) -> dict[str, list[Outcome]]:
    """Per-task outcomes (one per epoch) for the gate."""
    by_task: dict[str, list[Outcome]] = {}
    for r in sorted(results, key=lambda r: (r.task_id, r.epoch)):
        by_task.setdefault(r.task_id, []).append(
            Outcome(
                score=r.score,
                soft=r.soft,
                tokens=r.input_tokens + r.output_tokens,
                crashed=r.crashed,
            )
        )
    return by_task


def _refused(result: TaskResult) -> bool:
    """A run one of whose calls the gateway refused for the budget (``taxonomy.refused``: its
    refusal names the harnessopt budget, and no model answered): no evidence, never kept. Not a
    policy refusal (a 400: ``max_tokens`` over ``budget.target_max_output_tokens`` names a budget
    setting too), which is the harness's error to see, not a spent budget. (It looked for a "429 "
    the gateway's transcript of its own refusal does not start with, so a probe the budget refused
    after its wait was kept, and read again, as a crash: QA.)"""
    return any(refused(x) for x in result.exchanges)


def _read_capped(path: Path, cap: int) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(cap + 1)
    except OSError:
        return ""
    text = data[:cap].decode("utf-8", errors="replace")
    return text.strip()


def _read_events(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if len(events) >= EVENTS_CAP:
                    events.append({"event": "elided", "note": f"more than {EVENTS_CAP} events"})
                    break
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(item, dict):
                    events.append(item)
    except OSError:
        pass
    return events
