"""Wall time of `harnessopt demo` as a newcomer runs it (the README's first command).

    python benchmarks/demo_time.py [--sandbox auto|local|docker]

Runs the demo into a fresh temp directory through the real CLI and prints the wall time and the
rounds' statuses. Whatever else the machine is doing counts too: run it on a quiet machine for
the README's figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sandbox", default="auto")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ho-demo-time-") as tmp:
        target = Path(tmp) / "demo"
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "harnessopt", "demo", str(target), "--sandbox", a.sandbox],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        wall = time.monotonic() - t0
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:], sep="\n")
            return 1
        log = subprocess.run(
            [sys.executable, "-m", "harnessopt", "log", str(target), "--json"], capture_output=True, text=True
        )
        statuses = [row["status"] for row in json.loads(log.stdout)]
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"harnessopt demo --sandbox {a.sandbox}: {wall:.0f} s wall ({statuses}), load average {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
