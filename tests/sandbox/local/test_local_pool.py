"""local_pool.WarmPool's life: when it fills, what a new key and close() discard, dying slots."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from harnessopt.sandbox.local.pool import MAX_LOST, Key, Slot, WarmPool
from harnessopt.util.proc import Prestarted

SPEC: Any = object()  # what a task's RunSpec would be; the pool only hands it to start()


def _key(name: str) -> Key:
    return Key(Path(name), Path(name), name, (), ())


class Starts:
    """start(key, spec) for the pool: real children (``code`` run by python), every call recorded."""

    def __init__(self, code: str = "import os; os.read(3, 10)", delay: float = 0.0):
        self.code, self.delay = code, delay
        self.made: list[Slot] = []
        self.closed: list[Slot] = []
        self.lock = threading.Lock()

    def __call__(self, key: Key, spec: Any) -> Slot:
        time.sleep(self.delay)
        child = Prestarted([sys.executable, "-c", self.code], cap=100, env={"PATH": "/usr/bin:/bin"})
        if self.code == "pass":  # a slot that dies while it waits: dead before anyone looks
            child.proc.wait(30)
        slot = Slot(key, Path("/nonexistent"), Path("/nonexistent"), child, lambda: None)

        def cleanup() -> None:
            child.discard()
            with self.lock:
                self.closed.append(slot)

        slot._cleanup = cleanup
        with self.lock:
            self.made.append(slot)
        return slot


def _until(cond: Any, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_fills_from_the_second_task_of_a_key_and_a_new_key_discards_the_old_slots() -> None:
    starts = Starts()
    pool = WarmPool(2, starts, settle_s=0.0)
    try:
        assert pool.take(_key("a"), SPEC) is None
        time.sleep(0.3)
        assert starts.made == [] and pool._thread is None  # one task (an import check, say): nothing
        assert pool.take(_key("a"), SPEC) is None
        assert _until(lambda: len(pool.idle()) == 2)
        got = pool.take(_key("a"), SPEC)
        assert got is not None and got.key == _key("a") and pool.taken == 1
        assert _until(lambda: len(pool.idle()) == 2)  # refilled
        old = pool.idle()
        assert pool.take(_key("b"), SPEC) is None  # another candidate: the old slots go
        assert _until(lambda: all(s in starts.closed and s.child.proc.returncode is not None for s in old))
        time.sleep(0.3)
        assert pool.idle() == []  # b asked for once: nothing made for it yet
        got.close()
    finally:
        pool.close()
    assert set(starts.made) - {got} <= set(starts.closed)


def test_slots_that_keep_dying_are_not_made_forever() -> None:
    starts = Starts(code="pass")  # exits at once, before any job
    pool = WarmPool(1, starts, settle_s=0.0)
    try:
        for _ in range(12):
            assert pool.take(_key("a"), SPEC) is None
            time.sleep(0.15)
        assert MAX_LOST <= len(starts.made) <= MAX_LOST + 1
    finally:
        pool.close()
    assert set(starts.made) == set(starts.closed)


def test_close_removes_a_slot_still_being_made_and_waits_settle_after_a_take() -> None:
    starts = Starts(delay=0.5)
    pool = WarmPool(1, starts, settle_s=0.0)
    pool.take(_key("a"), SPEC)
    pool.take(_key("a"), SPEC)
    time.sleep(0.2)  # the thread is inside start()
    assert starts.made == []
    pool.close()  # waits for that start, then removes what it made
    assert len(starts.made) == 1 and starts.made == starts.closed
    assert pool.take(_key("a"), SPEC) is None and pool.idle() == []

    slow = Starts()
    pool = WarmPool(1, slow, settle_s=1.0)
    try:
        pool.take(_key("a"), SPEC)
        pool.take(_key("a"), SPEC)
        assert _until(lambda: len(pool.idle()) == 1)
        assert pool.take(_key("a"), SPEC) is not None
        time.sleep(0.5)
        assert pool.idle() == []  # still settling: the task just handed out starts alone
        assert _until(lambda: len(pool.idle()) == 1, within=5)
    finally:
        pool.close()
