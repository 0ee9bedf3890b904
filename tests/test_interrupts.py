"""Ctrl-C is never lost: a KeyboardInterrupt swallowed by a finalizer is raised at the next check."""

from __future__ import annotations

import gc
import os
import signal
import sys
import weakref

import pytest

from harnessopt import interrupts


@pytest.fixture(autouse=True)
def restore_sigint():
    yield
    signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts._interrupted.clear()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_at_the_next_check() -> None:
    hook = sys.unraisablehook
    interrupts.install()
    interrupts.check()  # nothing pending

    class Holder:
        pass

    obj = Holder()
    # The signal handler's KeyboardInterrupt lands inside the finalizer, where Python prints and drops it.
    weakref.finalize(obj, os.kill, os.getpid(), signal.SIGINT)
    try:
        del obj
        gc.collect()
        for _ in range(1000):  # give the handler its bytecode boundary
            pass
    except KeyboardInterrupt:
        pass  # delivered outside the finalizer this time: the flag must be set all the same
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
    sys.unraisablehook = hook


def _finalizer_raises(exc: BaseException) -> None:
    class Holder:
        pass

    def raiser() -> None:
        raise exc

    obj = Holder()
    weakref.finalize(obj, raiser)
    del obj
    gc.collect()


def test_the_dropped_interrupt_prints_no_traceback_but_other_errors_still_print(capfd) -> None:
    hook = sys.unraisablehook
    interrupts.install()
    try:
        interrupts._interrupted.set()
        _finalizer_raises(KeyboardInterrupt())
        assert capfd.readouterr().err == ""
        _finalizer_raises(ValueError("real bug"))
        assert "real bug" in capfd.readouterr().err
    finally:
        sys.unraisablehook = hook


def test_deferred_holds_the_interrupt_until_the_block_ends() -> None:
    interrupts.install()
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("block finished")
    assert done == ["block finished"]
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
