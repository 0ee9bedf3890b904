"""Ctrl-C is never lost: a KeyboardInterrupt swallowed by a finalizer is raised at the next check."""

from __future__ import annotations

import gc
import os
import signal
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


def test_deferred_holds_the_interrupt_until_the_block_ends() -> None:
    interrupts.install()
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("block finished")
    assert done == ["block finished"]
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
