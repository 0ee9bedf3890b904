"""Optimizer backend ``manual``: a person or an IDE agent edits the view; gating starts when edits settle."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from harnessopt.protocols import Proposal

DONE_NAME = "DONE"
SUMMARY_NAME = "SUMMARY.md"
# Opening or reading a file is not an edit (inotify reports those too).
_EDIT_EVENTS = {"created", "modified", "deleted", "moved", "closed"}


class _EditClock(FileSystemEventHandler):
    """Remembers when the view last changed, and whether it changed at all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_edit: float | None = None
        self.changed = threading.Event()

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _EDIT_EVENTS:
            return
        if event.event_type == "modified" and event.is_directory:
            return  # a directory's mtime follows its files' events, which we already count
        with self.lock:
            self.last_edit = time.monotonic()
        self.changed.set()


class ManualOptimizer:
    """Waits for a person to edit the view.

    Returns once edits have been quiet for ``settle_s`` seconds, once a file ``DONE`` appears in
    the view, or after ``timeout_s`` (summary "no edits" when nothing changed). The summary is
    the person's ``SUMMARY.md`` when written, else "manual edit". ``DONE`` and ``SUMMARY.md`` are
    control files: they are removed from the view before copy-back.
    """

    name = "manual"

    def __init__(
        self, settle_s: float, timeout_s: float, announce: Callable[[str], None], poll_s: float = 0.1
    ):
        self.settle_s = settle_s
        self.timeout_s = timeout_s
        # set by the run (round.services): the STOP file ends the wait, not only the next batch
        self.stop_requested: Callable[[], bool] = lambda: False
        self.announce = announce
        self.poll_s = poll_s

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal:
        """Announce the view, watch it, and return when the person is done."""
        view = Path(view).resolve()
        self.announce(
            f"Round {round_no}: edit the files in {view} (the brief is {view / 'OPTIMIZE.md'}).\n"
            f"Your turn ends {self.settle_s:g} s after your last edit, or as soon as you create {view / DONE_NAME}.\n"
            f"Optionally write {view / SUMMARY_NAME}; its first line becomes the commit title."
        )
        clock = _EditClock()
        observer = Observer()
        observer.schedule(clock, str(view), recursive=True)
        observer.start()
        started = time.monotonic()
        try:
            stopped_by = self._wait(view, clock, started)
        finally:
            observer.stop()
            observer.join(timeout=5)
        summary = _take_summary(view)
        (view / DONE_NAME).unlink(missing_ok=True)
        if clock.last_edit is None and not summary:
            return Proposal(summary="no edits", stopped_by=stopped_by)
        return Proposal(summary=summary or "manual edit", stopped_by=stopped_by)

    def _wait(self, view: Path, clock: _EditClock, started: float) -> str:
        while True:
            now = time.monotonic()
            if self.stop_requested():  # STOP: the turn ends with the edits made so far, and the
                return "stopped"  # round at its next boundary (its candidate kept on its ref)
            if (view / DONE_NAME).exists():
                return "done"
            with clock.lock:
                last = clock.last_edit
            if last is not None and now - last >= self.settle_s:
                return "done"
            if now - started >= self.timeout_s:
                return "wall_clock"
            time.sleep(self.poll_s)


def _take_summary(view: Path) -> str:
    path = view / SUMMARY_NAME
    if not path.is_file() or path.is_symlink():
        path.unlink(missing_ok=True)
        return ""
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    path.unlink()
    return text
