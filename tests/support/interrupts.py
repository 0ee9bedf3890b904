"""An interrupt without a signal (how Ray cancels a task) that lands in a finalizer and is lost."""

from __future__ import annotations

import _thread
import signal
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from harnessopt.util import interrupts


def swallow_an_interrupt_main() -> None:
    """``_thread.interrupt_main()`` from a weakref callback that then runs Python: the pending
    interrupt is raised inside the callback, where Python prints it and drops it, as it would in
    any finalizer the main thread runs when a Ray cancel comes."""

    class Holder:
        pass

    def callback(_ref: object) -> None:
        _thread.interrupt_main()
        for _ in range(100_000):  # bytecode boundaries: the handler runs here, inside the callback
            pass

    obj = Holder()
    ref = weakref.ref(obj, callback)
    del obj  # the callback runs now, on this thread
    assert ref() is None


@contextmanager
def handlers_restored() -> Iterator[None]:
    """The test process's SIGINT, SIGTERM and SIGHUP handlers, unraisable hook and interrupt flags
    as they were before the block (code under test may call ``interrupts.install()``)."""
    handled = (signal.SIGINT, *interrupts.TERMINATING)
    handlers, hook = {s: signal.getsignal(s) for s in handled}, sys.unraisablehook
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        sys.unraisablehook = hook
        interrupts._interrupted.clear()
        interrupts._terminated.clear()


@contextmanager
def flag_handler_installed() -> Iterator[None]:
    """``interrupts.install()`` for the block, as the CLI and a Ray worker's job run it."""
    with handlers_restored():
        interrupts.install()
        yield
