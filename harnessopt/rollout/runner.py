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

from harnessopt.config import Config
from harnessopt.errors import BudgetExceeded, HarnessoptError
from harnessopt.gateway.server import SHARED_REFUSED, Gateway
from harnessopt.protocols import Outcome, RunOutput, RunSpec, Sandbox, Task, TaskResult
from harnessopt.rollout.executors import Executor, LocalExecutor, SandboxCall, WorkerLost
from harnessopt.rollout.run_cache import RoundStore
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


class GatewayRefused(HarnessoptError):
    """A task's runs kept losing connections to the gateway: the round fails, nothing is scored 0."""


class RunObserver(Protocol):
    """Told, on the thread that called ``Runner.run``, when a batch starts and as each task ends.

    ``started`` may raise to stop before the batch spends anything (the STOP file does).
    """

    def started(self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int]) -> None: ...

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

    def run(
        self, cand: Candidate, tasks: Sequence[Task], round_no: int, epochs: Sequence[int] = (0,)
    ) -> list[TaskResult]:
        jobs = [(t, e) for e in epochs for t in tasks]
        refused_before = self.gateway.refusals
        results: list[TaskResult] = []
        for o in list(self.observers):
            o.started(cand.label, tasks, round_no, epochs)
        via = self.executor.sandbox_for(cand.root)  # ray: the candidate ships once, here
        futures = [self._claim(cand, task, round_no, epoch, via) for task, epoch in jobs]
        # Ctrl-C or a failure: the executor drops queued jobs and stops running ones (closing()).
        with contextlib.closing(self.executor.gather(futures)) as done:
            for result in done:
                results.append(result)
                interrupts.check()
                if self.progress:
                    self.progress(cand.label, len(results), len(jobs))
                for o in list(self.observers):
                    o.finished(cand.label, results[-1], len(results), len(jobs))
        # Runs whose calls were refused are no evidence (a run made ahead was refused before this
        # batch began: its exchanges say so).
        if self.gateway.refusals > refused_before or any(_refused(r) for r in results):
            raise BudgetExceeded(self.gateway.exhausted() or "the model budget is spent")
        return results

    def prefetch(self, cand: Candidate, jobs: Sequence[tuple[Task, int]], round_no: int) -> None:
        """Start these runs ahead, each only in a slot no ordinary run is waiting for; a later
        ``run`` of the same (candidate, task, epoch) takes its result instead of running it again,
        and tells the observers then. ``drop_prefetched`` forgets the ones never asked for."""
        via = self.executor.sandbox_for(cand.root)
        for task, epoch in jobs:
            key = (str(cand.root), task.id, epoch, round_no)
            with self._ahead_lock:
                if key not in self._ahead:
                    self._ahead[key] = (
                        cand.label,
                        self._submit(cand, task, round_no, epoch, via, ahead=True),
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
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall
    ) -> Future[TaskResult]:
        """The run started ahead for this job (hurried if still queued), or a new one."""
        with self._ahead_lock:
            _label, fut = self._ahead.pop((str(cand.root), task.id, epoch, round_no), ("", None))
        if fut is not None and not fut.cancelled():
            self.executor.hurry(fut)
            return fut
        return self._submit(cand, task, round_no, epoch, via)

    def _submit(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall, ahead: bool = False
    ) -> Future[TaskResult]:
        job = (task, epoch)
        return self.executor.submit(
            lambda j: self.run_one(cand, j[0], round_no, j[1], via=via), job, ahead=ahead
        )

    def run_one(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall | None = None
    ) -> TaskResult:
        """One task: its kept result, or a run (``via`` the executor's sandbox) scored here."""
        if self.store is not None and (kept := self.store.get(round_no, cand.root, task, epoch)) is not None:
            return kept
        via = via or self.executor.sandbox_for(cand.root)
        result = self._run_one(cand, task, round_no, epoch, via)
        if self.store is not None and not _refused(result):  # a refused run is no evidence: never kept
            self.store.put(round_no, cand.root, task, epoch, result)
        return result

    def _run_one(
        self, cand: Candidate, task: Task, round_no: int, epoch: int, via: SandboxCall
    ) -> TaskResult:
        # Beside the round's candidate roots, never inside one: loop.check copies the incumbent's
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
            except WorkerLost:  # its calls stay spent; a fresh lease and run, on another node
                lost += 1
                if lost > self.executor.max_retries:
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
            return self._score(task, round_no, epoch, out, exchanges)

    def _warn_once(self, error: str) -> None:
        """One run-level note per kind of scorer error (the kind: its words before any number)."""
        kind = " ".join(w for w in error.split()[:4] if not any(c.isdigit() for c in w))
        with self._notes_lock:
            if kind not in self._kinds:
                self._kinds.add(kind)
                self.notes.append(f"the scorer failed on some tasks, which scored 0: {error[:200]}")

    def _env(self, cand: Candidate) -> dict[str, str]:
        """The target model, and ``HO_FLAG_*``: harness/flags.yaml < harnessopt.yaml < the candidate's."""
        flag_env = flags.environment(cand.root / "harness", self.cfg.flags, cand.flags)
        return {"HARNESSOPT_TARGET_MODEL": self.cfg.model.target, **flag_env}

    def _score(self, task: Task, round_no: int, epoch: int, out: RunOutput, exchanges: list) -> TaskResult:
        answer = _read_capped(out.out_dir / "answer.txt", ANSWER_CAP)
        notes = list(out.notes)
        if out.error_class is not None:
            score, soft, passed = 0.0, None, False
            feedback = f"harness failed ({out.error_class}, exit code {out.exit_code}); no score"
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
                notes.append(f"scorer error (scored 0, not a win): {sr.error}")
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
    """The executor ``cfg.rollout.executor`` names; ``ray`` joins (or starts) the cluster now."""
    if cfg.rollout.executor == "ray":
        from harnessopt.rollout.ray.executor import RayExecutor

        return RayExecutor(cfg, gateway_url)
    return LocalExecutor(sandbox, cfg.rollout.concurrency)


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
    """A run one of whose calls the gateway refused for the budget: no evidence, never kept."""
    return any(x.error and "budget" in x.error for x in result.exchanges)


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
