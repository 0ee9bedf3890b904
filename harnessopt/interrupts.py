"""Ctrl-C that is never lost, and held while main moves.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a garbage
collector finalizer (a weakref callback), the exception is printed and swallowed, and the run
would go on. The handler here also sets a flag, and the loop checks it between steps and tasks.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_interrupted = threading.Event()


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def _unraisable(info: Any) -> None:
    # A KeyboardInterrupt dropped in a finalizer is kept by the flag: no "Exception ignored" traceback.
    if isinstance(info.exc_value, KeyboardInterrupt) and _interrupted.is_set():
        return
    sys.__unraisablehook__(info)


def install() -> None:
    """Route SIGINT through the flag (main thread only; a no-op elsewhere)."""
    _interrupted.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        sys.unraisablehook = _unraisable


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came, even if its first raise was swallowed."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM) until the block is done: used around the one atomic git update."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    old = {s: signal.signal(s, lambda n, _f: received.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if received:
            _interrupted.set()
            raise KeyboardInterrupt
