"""``.harnessopt/spend-live.json``: what the rounds in progress have spent so far.

A round writes what it spent to the journal (a ``spend`` line) on its way out, Ctrl-C and SIGTERM
included; ``status`` shows the spend of rounds that never recorded. SIGKILL (the OOM killer,
``kill -9``) runs no way out, so a killed round's model calls, the optimizer's among them, were
shown nowhere. While a run goes, ``Keeper`` rewrites this file every ``EVERY_S`` seconds with the
spend of each round in progress (when it changed); a round that writes its ``spend`` line leaves
the file in the same step, under one lock, so no spend is in both. The file a killed run left is
what it had spent at its last write (up to ``EVERY_S`` older than the kill): ``status`` adds it
to the interrupted rounds, and the next ``run`` moves it into the journal as those rounds' spend
lines (``fold``) before it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harnessopt.ledger.journal import STATE_DIR, Journal

NAME = "spend-live.json"
EVERY_S = 2.0

Usage = Callable[[int], tuple[float, dict[str, dict[str, int]]]]  # round -> (dollars, tokens by role)


def path(root: Path) -> Path:
    return root / STATE_DIR / NAME


def left(root: Path) -> dict[int, dict[str, Any]]:
    """Round -> {"cost_usd", "tokens"} from the file a run left, or {} (none, or unreadable)."""
    try:
        data = json.loads(path(root).read_text(encoding="utf-8"))
        return {int(k): dict(v) for k, v in data["rounds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def fold(root: Path, journal: Journal) -> str | None:
    """Move a killed run's file into the journal as its rounds' spend lines, and say so in a line
    (None without one). Call it holding the workspace's lock (no run writes the file then)."""
    rounds = left(root)
    for k, spent in sorted(rounds.items()):
        journal.write(
            k, "spend", cost_usd=spent.get("cost_usd", 0.0), tokens=spent.get("tokens", {}), killed=True
        )
    path(root).unlink(missing_ok=True)
    if not rounds:
        return None
    usd = sum(float(s.get("cost_usd") or 0.0) for s in rounds.values())
    which = ", ".join(map(str, sorted(rounds)))
    return f"a run killed in round {which} had spent ${usd:.4f} there (at its last count); `status` shows it"


class Keeper:
    """The run's writer of the file: ``begin(k)`` when round ``k`` starts, ``ending(k)`` around its
    spend line; a thread rewrites the file meanwhile."""

    def __init__(self, root: Path, usage: Usage, every_s: float = EVERY_S):
        self.root, self.usage, self.every_s = root, usage, every_s
        self._lock = threading.Lock()
        self._rounds: set[int] = set()
        self._written: dict[int, Any] = {}  # nothing written yet: a file a killed run left stays for `run`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ho-spend", daemon=True)
        self._thread.start()

    def begin(self, k: int) -> None:
        with self._lock:
            self._rounds.add(k)

    def tracks(self, k: int) -> bool:
        """Is round ``k`` in progress (begun, not yet ended)?"""
        with self._lock:
            return k in self._rounds

    @contextmanager
    def ending(self, k: int) -> Iterator[None]:
        """Round ``k`` writes its spend line in this block: it leaves the file in the same step."""
        with self._lock:
            yield
            self._rounds.discard(k)
            self._write()

    def write(self) -> None:
        """The file as the rounds in progress stand now (no file when none is)."""
        with self._lock:
            self._write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self._rounds.clear()
            self._write()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(OSError):  # a full disk, a removed folder: the spend line still comes
                self.write()

    def _write(self) -> None:
        now: dict[int, Any] = {}
        for k in sorted(self._rounds):
            cost, tokens = self.usage(k)
            now[k] = {"cost_usd": cost, "tokens": tokens}
        if now == self._written:
            return
        target = path(self.root)
        if not now:
            target.unlink(missing_ok=True)
        else:
            tmp = target.with_name(f".{NAME}.{os.getpid()}")
            tmp.write_text(json.dumps({"pid": os.getpid(), "rounds": now}, sort_keys=True), encoding="utf-8")
            os.replace(tmp, target)
        self._written = now
