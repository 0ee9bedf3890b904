"""``.harnessopt/journal.jsonl``: one line per phase of every round, appended before git acts."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

STATE_DIR = ".harnessopt"


class Journal:
    """Append-only event log. Each line: {"t", "round", "phase", ...fields}."""

    def __init__(self, ws: Path):
        self.path = ws / STATE_DIR / "journal.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, round_no: int, phase: str, **fields: Any) -> None:
        entry = {"t": round(time.time(), 3), "round": round_no, "phase": phase, **fields}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True, default=str) + "\n")
            f.flush()

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a crash mid-write: skip it, keep the rest
        return out

    def last(self) -> dict[str, Any] | None:
        entries = self.entries()
        return entries[-1] if entries else None
