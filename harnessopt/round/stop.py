"""``touch WS/.harnessopt/STOP``: end a run at the next phase boundary, cleanly.

A boundary is the start of a batch of task runs (rollout, incumbent val, smoke, validation,
reruns) or the start of a round. The round in progress is recorded as ``failed`` with reason
``stopped`` (its candidate, if there is one, kept on its ref); ``main`` stays on the incumbent
and the file is removed once the stop is honoured.

Whatever ``STOP`` is (a file, a directory, a FIFO, a symlink, dangling or not, an entry we may not
read) it is a request: only its name is looked at (``lstat``), never its content, so a FIFO
cannot block the run, and it is removed whatever its kind (a directory with what it holds: it is
in harnessopt's own state directory).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harnessopt.ledger.journal import STATE_DIR

STOP_NAME = "STOP"
REASON = "stopped"
OUT_OF_TIME = "stopped: the run's wall-clock budget (budget.max_hours) is spent"


class StopRequested(Exception):
    """The STOP file was found at a phase boundary."""


def stop_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / STOP_NAME


def requested(root: Path) -> bool:
    """Whether an entry named STOP is there, of any kind; one we cannot even stat counts too."""
    try:
        os.lstat(stop_path(root))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def remove(root: Path) -> str | None:
    """Remove the STOP entry whatever its kind (never opening it); why it could not be, or None."""
    path = stop_path(root)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path} could not be removed ({e.strerror or type(e).__name__}); remove it yourself"
    return None


def honour(root: Path) -> str:
    """Remove the STOP file; the line that tells the user what happened."""
    if (problem := remove(root)) is not None:
        return f"stopped at your request; {problem} before the next run; main is on the incumbent"
    return f"stopped at your request ({stop_path(root)} found and removed); main is on the incumbent"


class StopWatch:
    """A Runner observer that raises ``StopRequested`` before a batch starts when the file exists
    or the run's wall-clock deadline (``time.monotonic()``, from ``budget.max_hours``) has passed."""

    def __init__(self, root: Path, deadline: float | None = None):
        self.root = Path(root)
        self.deadline = deadline

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def started(self, label: str, tasks: Sequence[Any], round_no: int, epochs: Sequence[int]) -> None:
        if requested(self.root):
            raise StopRequested(REASON)
        if self.out_of_time():
            raise StopRequested(OUT_OF_TIME)

    def finished(self, label: str, result: Any, done: int, total: int) -> None:
        return None
