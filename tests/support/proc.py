"""What tests ask of /proc about their own processes."""

from __future__ import annotations

import os
from pathlib import Path


def live_in_session(sid: int) -> list[int]:
    """The live (not zombie or dead) processes in session ``sid``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            if fields[0] not in (b"Z", b"X") and int(fields[3]) == sid:
                found.append(int(entry.name))
    return found
