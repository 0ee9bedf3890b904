"""The signal policy: Ctrl-C that is never lost, SIGTERM that still cleans up, and exit cleanup.

Python raises KeyboardInterrupt wherever the main thread happens to be; when that is a garbage
collector finalizer (a weakref callback), the exception is printed and swallowed, and the run
would go on. The handler here also sets a flag, and the loop checks it between steps and tasks;
the sandboxes' waits, which come back to Python every slice for an interrupt that comes without a
signal (a Ray cancel), check it there too (``check_on_main``). The CLI and a Ray worker's job
install it.

SIGTERM and SIGHUP (a closed terminal) become ``Terminated``, a ``SystemExit`` (when nobody else
handles them), so the interpreter exits through its normal path: every ``finally`` and context
manager of the round unwinds (temporary folders, containers, the gateway) and then the callbacks
registered with ``on_exit`` run, which is how containers left by a killed run are removed. Like
Ctrl-C, the signal is also kept in a flag, so one whose exception a finalizer swallowed is raised
at the next ``check``. Nothing else in the package installs signal handlers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_interrupted = threading.Event()
_terminated: list[int] = []  # the stop signal that came (SIGTERM, SIGHUP), once it came
_deferring: list[bool] = []  # [True] while the main thread is inside ``deferred``
_quiet_registered: list[bool] = []  # [True] once ``_quiet_teardown`` is an atexit callback
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(SystemExit):
    """The process was asked to stop (SIGTERM, SIGHUP): exits with 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


_exit_callbacks: list[Callable[[], None]] = []
_exit_lock = threading.Lock()


def _on_sigint(_signum: int, _frame: FrameType | None) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def _unraisable(info: Any) -> None:
    # A KeyboardInterrupt dropped in a finalizer is kept by the flag: no "Exception ignored" traceback.
    if isinstance(info.exc_value, KeyboardInterrupt) and _interrupted.is_set():
        return
    if isinstance(info.exc_value, Terminated) and _terminated:
        return
    # Once a stop came, nor is the ``__del__`` of an object it cut short while being built (the
    # anthropic client's: "'SyncHttpxClientWrapper' object has no attribute '_state'", after the
    # run's own line: QA); any other finalizer's error is printed as Python does.
    if (_interrupted.is_set() or _terminated) and getattr(info.object, "__name__", "") == "__del__":
        return
    sys.__unraisablehook__(info)


def _stop(signum: int) -> Terminated:
    """A stop signal that came: kept in the flag (the first one), and the exception it raises."""
    if not _terminated:
        _terminated.append(signum)
    return Terminated(signum)


def _on_terminate(signum: int, _frame: FrameType | None) -> None:
    raise _stop(signum)


def install() -> None:
    """Route SIGINT through the flag; SIGTERM and SIGHUP exit cleanly, through the flag too (main
    thread only; a no-op elsewhere). A stop signal someone else handles, or ignores (``nohup``
    ignores SIGHUP), is left to them."""
    _interrupted.clear()
    _terminated.clear()
    if not _quiet_registered:  # first, so it runs last of all atexit callbacks
        atexit.register(_quiet_teardown)
        _quiet_registered.append(True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        for signum in TERMINATING:
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, _on_terminate)
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
    stop: KeyboardInterrupt | Terminated | None = None
    for callback in callbacks:  # a stop signal as one runs does not cut the others short
        try:
            callback()
        except (KeyboardInterrupt, Terminated) as e:
            stop = stop or e
        except Exception:
            pass
    if stop is not None:
        raise stop


def last_words() -> None:
    """After the command and its exit callbacks, as the interpreter tears down: a stop signal
    then ends the process at once with a line and 128 + its number, until the last ``atexit``
    callback; after that (modules are torn down, and Python puts a signal's default action back)
    it is ignored, and the process ends with the command's own code a moment later. A stop there
    raised ``Terminated`` into the teardown, said nowhere (exit 0), or killed the finished process
    (exit -15) with no line: QA. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in TERMINATING:
        if signal.getsignal(signum) is _on_terminate:
            signal.signal(signum, _late_stop)


def _late_stop(signum: int, _frame: FrameType | None) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    name = signal.Signals(signum).name
    with contextlib.suppress(OSError):
        os.write(2, f"harnessopt: stopped by {name} as it exited; the command had finished\n".encode())
    os._exit(128 + signum)


def _quiet_teardown() -> None:
    """The last ``atexit`` callback (registered first, by ``install``): from here on a stop signal
    is ignored rather than left to the default action Python restores before it tears its modules
    down."""
    for signum in TERMINATING:
        if signal.getsignal(signum) is _late_stop:
            signal.signal(signum, signal.SIG_IGN)


def check() -> None:
    """Raise ``Terminated`` if a stop signal came, else KeyboardInterrupt if Ctrl-C came, even if
    its first raise was swallowed."""
    if _terminated:
        raise Terminated(_terminated[0])
    if _interrupted.is_set():
        raise KeyboardInterrupt


def stopping() -> bool:
    """Whether a stop signal or Ctrl-C came (whatever became of its exception)."""
    return bool(_terminated) or _interrupted.is_set()


def check_on_main() -> None:
    """``check``, on the main thread only (the thread an interrupt is for): for the waits that come
    back to Python every slice to see an interrupt that came without a signal (a Ray cancel is
    ``_thread.interrupt_main()``), so that one swallowed by a finalizer meanwhile ends them too.
    Elsewhere a no-op: a worker thread ends as the pool it runs in is stopped."""
    if threading.current_thread() is threading.main_thread():
        check()


@contextmanager
def deferred() -> Iterator[None]:
    """Hold Ctrl-C (and SIGTERM, SIGHUP) until the block is done: used around the one atomic git
    update. A stop signal held is then raised as ``Terminated``, a Ctrl-C as KeyboardInterrupt.
    Inside another such block it holds nothing of its own: the outer one raises at its end."""
    if threading.current_thread() is not threading.main_thread() or _deferring:
        yield
        return
    received: list[int] = []
    held = [s for s in (signal.SIGINT, *TERMINATING) if signal.getsignal(s) is not signal.SIG_IGN]
    old: dict[int, Any] = {}
    _deferring.append(True)
    try:
        for sig in held:  # a signal before its turn here is raised as usual; the finally undoes the rest
            old[sig] = signal.signal(sig, lambda n, _f: received.append(n))
        yield
    finally:
        _deferring.clear()
        for s, handler in old.items():
            signal.signal(s, handler)
        stops = [n for n in received if n in TERMINATING]
        if stops:
            raise _stop(stops[0])
        if received:
            _interrupted.set()
            raise KeyboardInterrupt
