"""Where a batch of rollouts runs: ``local`` (a thread pool on this machine) or ``ray`` (a cluster).

The runner (rollout.py) keeps the head's part of every job: the lease, the gateway record and the
scorer. An executor supplies the rest: how many jobs are in flight at once (``map``) and where
the sandbox runs each one (``sandbox_for``: the local sandbox, or a Ray task on some node).
``rollout.make_executor`` never imports Ray unless ``rollout.executor`` is ``ray``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from harnessopt import interrupts
from harnessopt.errors import HarnessoptError
from harnessopt.protocols import RunOutput, RunSpec, Sandbox

J = TypeVar("J")
R = TypeVar("R")

# Runs one spec and puts the run's /out in the given directory (on the head).
SandboxCall = Callable[[RunSpec, Path], RunOutput]


class WorkerLost(HarnessoptError):
    """The node or worker process running a task died; the runner may run the task again."""


class ClusterLost(HarnessoptError):
    """The cluster is gone (or no node could take a task in time): the round fails, the incumbent stays."""


class Executor(Protocol):
    """Runs a batch of jobs at a bounded concurrency, each job's sandbox wherever it chooses."""

    name: str
    max_retries: int  # times a job whose worker died (WorkerLost) is run again

    def sandbox_for(self, root: Path) -> SandboxCall:
        """How to run a spec of the candidate at ``root`` (holding skill/ and harness/)."""
        ...

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """``fn`` of each job, in order, at most ``concurrency`` at once; stops them all on an error."""
        ...

    def close(self) -> None: ...


class PooledExecutor:
    """A thread pool on this machine bounds the jobs in flight (for ``ray``: cluster-wide)."""

    def __init__(self, concurrency: int):
        self.concurrency = concurrency

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[R]:
        """Results in the jobs' order as they come; Ctrl-C or an error drops the queued ones."""
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        try:
            futures = [pool.submit(fn, job) for job in jobs]
            for fut in futures:
                yield fut.result()
        except BaseException:
            # Ctrl-C or a failure: queued jobs never start; running ones end when the sandbox closes.
            self._stop_running()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
        interrupts.check()  # a Ctrl-C swallowed while the last job finished

    def _stop_running(self) -> None:
        """Hook for executors whose running jobs live elsewhere (Ray cancels its tasks here)."""


class LocalExecutor(PooledExecutor):
    """Today's executor: a thread pool on this machine, each job in the run's one sandbox."""

    name = "local"
    max_retries = 0  # nothing here dies on its own: a sandbox's failure is the run's outcome

    def __init__(self, sandbox: Sandbox, concurrency: int):
        super().__init__(concurrency)
        self.sandbox = sandbox

    def sandbox_for(self, root: Path) -> SandboxCall:
        """The local sandbox mounts the candidate where it is."""
        return self.sandbox.run

    def close(self) -> None:
        """Nothing to stop: the sandbox belongs to whoever made it."""
