"""Where a batch of rollouts runs: ``local`` (a thread pool on this machine) or ``ray`` (a cluster).

The runner (rollout.runner) keeps the head's part of every job: the lease, the gateway record and
the scorer. An executor (``protocols.Executor``) supplies the rest: how many jobs are in flight at
once (``submit``/``gather``, ``map``) and where the sandbox runs each one (``sandbox_for``: the
local sandbox, or a Ray task on some node). Executors are registry parts (``rollout.executor``:
``local``, ``ray`` or ``package.module:Factory``); Ray is imported only when ``ray`` is built.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harnessopt.errors import HarnessoptError
from harnessopt.protocols import Executor, Sandbox, SandboxCall
from harnessopt.util import interrupts

if TYPE_CHECKING:
    from harnessopt.config import Config

J = TypeVar("J")
R = TypeVar("R")


class WorkerLost(HarnessoptError):
    """The node or worker process running a task died; the runner may run the task again."""


class ClusterLost(HarnessoptError):
    """The cluster is gone (or no node could take a task in time): the round fails, the incumbent stays."""


class PooledExecutor(Executor):
    """``concurrency`` worker threads on this machine bound the jobs in flight (for ``ray``:
    cluster-wide). Jobs come from one queue, so batches that overlap share the bound: a job
    submitted ``ahead`` runs only in a slot no ordinary job is waiting for (``Runner.prefetch``)."""

    def __init__(self, concurrency: int):
        self.concurrency = concurrency
        self._queue: list[tuple[int, int, Future, Callable[[], object]]] = []  # (ahead?, seq, ...)
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[[J], R], job: J, *, ahead: bool = False) -> Future[R]:
        """Queue ``fn(job)``; ``ahead`` jobs wait behind every ordinary one (``hurry`` lifts that)."""
        fut: Future[R] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the executor is closed")
            heapq.heappush(self._queue, (int(ahead), next(self._seq), fut, lambda: fn(job)))
            while len(self._workers) < self.concurrency:
                t = threading.Thread(target=self._work, name=f"ho-job-{len(self._workers)}", daemon=True)
                t.start()
                self._workers.append(t)
            self._cond.notify()
        return fut

    def hurry(self, fut: Future) -> None:
        """A job submitted ``ahead`` and still queued goes before the ordinary ones queued after it."""
        with self._cond:
            for i, (ahead, seq, f, call) in enumerate(self._queue):
                if f is fut and ahead:
                    self._queue[i] = (0, seq, f, call)
                    heapq.heapify(self._queue)
                    return

    def gather(self, futures: Sequence[Future[R]]) -> Generator[R, None, None]:
        """Their results in order as they come; Ctrl-C or an error drops the queued ones."""
        try:
            for fut in futures:
                yield fut.result()
        except BaseException:
            # Ctrl-C or a failure: queued jobs never start; running ones end when the sandbox closes.
            for fut in futures:
                fut.cancel()
            self._stop_running()
            raise
        interrupts.check()  # a Ctrl-C swallowed while the last job finished

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """``fn`` of each job, results in the jobs' order as they come (``gather``)."""
        return self.gather([self.submit(fn, job) for job in jobs])

    def shutdown(self) -> None:
        """Queued jobs are dropped and the workers end once their running job returns."""
        with self._cond:
            self._closed = True
            for *_, fut, _call in self._queue:
                fut.cancel()
            self._queue.clear()
            self._cond.notify_all()

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` in all for the worker threads to end: after ``shutdown`` each
        ends once its running job returns, and a job whose task the sandbox stopped returns at once,
        through its own clean-up (its task's temporary folder, its container's slot). The process
        exits after this, and would stop a thread still cleaning up where it stood."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            workers = list(self._workers)
        for t in workers:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                *_, fut, call = heapq.heappop(self._queue)
            if not fut.set_running_or_notify_cancel():  # cancelled while it waited
                continue
            try:
                fut.set_result(call())
            except BaseException as e:
                fut.set_exception(e)

    def _stop_running(self) -> None:
        """Hook for executors whose running jobs live elsewhere (Ray cancels its tasks here)."""


class LocalExecutor(PooledExecutor):
    """Today's executor: a thread pool on this machine, each job in the run's one sandbox."""

    name = "local"
    max_retries = 0  # nothing here dies on its own: a sandbox's failure is the run's outcome
    uses_run_sandbox = True

    def __init__(self, sandbox: Sandbox, concurrency: int):
        super().__init__(concurrency)
        self.sandbox = sandbox

    def sandbox_for(self, root: Path) -> SandboxCall:
        """The local sandbox mounts the candidate where it is."""
        return self.sandbox.run

    def close(self) -> None:
        """Stop the workers; the sandbox belongs to whoever made it."""
        self.shutdown()


def local_executor(cfg: Config, *, sandbox: Sandbox, gateway_url: str) -> Executor:
    """``local``: ``rollout.concurrency`` threads here, each job in the run's one sandbox."""
    return LocalExecutor(sandbox, cfg.rollout.concurrency)
