"""``.harnessopt/journal.jsonl``: one line per phase of every round, appended before git acts."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_DIR = ".harnessopt"
# the steps a command's way out writes: a run's end, a rollback, a measuring command's record
FINISHED = ("recorded", "rollback", "run_end", "audit", "ablate", "replay")


# Called with the workspace before each line is written; one raises to refuse the write.
# ``ledger.lock`` adds its ``check_held`` (the lock module reads this one, not the reverse).
WRITE_GUARDS: list[Callable[[Path], None]] = []


class Journal:
    """Append-only event log. Each line: {"t", "round", "phase", ...fields}."""

    def __init__(self, ws: Path):
        # its folder is made by the first write: a command refused before it leaves no .harnessopt/
        self.path = ws / STATE_DIR / "journal.jsonl"

    def write(self, round_no: int, phase: str, **fields: Any) -> None:
        """Append one line and fsync it: a line the call returned for survives a crash or power loss."""
        entry = {"t": round(time.time(), 3), "round": round_no, "phase": phase, **fields}
        line = json.dumps(entry, sort_keys=True, default=str) + "\n"
        for guard in WRITE_GUARDS:  # .harnessopt removed mid-run: no new journal is written into it
            guard(self.path.parent.parent)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            if f.tell() and not self._ends_with_newline():
                line = "\n" + line  # a torn last line stays torn; this one starts clean
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def entries(self) -> list[dict[str, Any]]:
        return self.read()[0]

    def read(self) -> tuple[list[dict[str, Any]], int]:
        """(entries, torn): the lines that read as ours (an object with an int ``round`` and a
        ``phase``), and how many did not (cut by a crash mid-write, or edited by hand)."""
        if not self.path.exists():
            return [], 0
        out, torn = [], 0
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                torn += 1
                continue
            if (
                isinstance(entry, dict)
                and type(entry.get("round")) is int
                and isinstance(entry.get("phase"), str)
            ):
                out.append(entry)
            else:
                torn += 1
        return out, torn


def last_step(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The journal's last step but for a round's spend lines (its way out writes them after it)."""
    return next((e for e in reversed(entries) if e.get("phase") != "spend"), None)


def stopped_step(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The journal's last step (a round's spend line aside, which its way out writes) when it is
    not one a command's way out writes: where the last run stopped mid-round (Ctrl-C, a kill, a
    crash)."""
    last = last_step(entries)
    return last if last is not None and last["phase"] not in FINISHED else None


def last_run_start(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last run's ``run_start`` line (its settings and ``-c`` overrides), if any."""
    return next((e for e in reversed(entries) if e.get("phase") == "run_start"), None)
