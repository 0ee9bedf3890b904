"""The signal policy: Ctrl-C that is never lost, SIGTERM that still cleans up, and exit cleanup.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a garbage
collector finalizer (a weakref callback), the exception is printed and swallowed, and the run
would go on. The handler here also sets a flag, and the loop checks it between steps and tasks;
the sandboxes' waits, which come back to Python every slice for an interrupt that comes without a
signal (a Ray cancel), check it there too (``check_on_main``). The CLI and a Ray worker's job
install it.

SIGTERM becomes ``SystemExit`` (when nobody else handles it), so the interpreter exits through
its normal path and the callbacks registered with ``on_exit`` run: that is how containers left
by a killed run are removed. Nothing else in the package installs signal handlers.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_interrupted = threading.Event()
_exit_callbacks: list[Callable[[], None]] = []
_exit_lock = threading.Lock()


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def _unraisable(info: Any) -> None:
    # A KeyboardInterrupt dropped in a finalizer is kept by the flag: no "Exception ignored" traceback.
    if isinstance(info.exc_value, KeyboardInterrupt) and _interrupted.is_set():
        return
    sys.__unraisablehook__(info)


def _on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def install() -> None:
    """Route SIGINT through the flag; SIGTERM exits cleanly (main thread only; a no-op elsewhere)."""
    _interrupted.clear()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_sigterm)
        sys.unraisablehook = _unraisable


def on_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` when the interpreter exits (also after SIGTERM once ``install`` ran).

    Registering the same callback again is a no-op. Callbacks run newest first; one that raises
    does not stop the others.
    """
    with _exit_lock:
        if callback in _exit_callbacks:
            return
        if not _exit_callbacks:
            atexit.register(run_exit_callbacks)
        _exit_callbacks.append(callback)


def run_exit_callbacks() -> None:
    """Run (and forget) every ``on_exit`` callback now; ``atexit`` calls this at the end."""
    with _exit_lock:
        callbacks = _exit_callbacks[::-1]
        _exit_callbacks.clear()
        atexit.unregister(run_exit_callbacks)
    for callback in callbacks:
        with contextlib.suppress(Exception):
            callback()


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came, even if its first raise was swallowed."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


def check_on_main() -> None:
    """``check``, on the main thread only (the thread an interrupt is for): for the waits that come
    back to Python every slice to see an interrupt that came without a signal (a Ray cancel is
    ``_thread.interrupt_main()``), so that one swallowed by a finalizer meanwhile ends them too.
    Elsewhere a no-op: a worker thread ends as the pool it runs in is stopped."""
    if threading.current_thread() is threading.main_thread():
        check()


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
