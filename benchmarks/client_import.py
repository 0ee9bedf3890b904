"""The interpreter start-up a task pays for its model client (issue 15), in the sandbox image and
on this host, side by side.

    python benchmarks/client_import.py [--n 5]

Each row starts a fresh ``python3`` (``-c``) N times and prints the median wall time and CPU
time (user + sys of the child) of: a bare interpreter; the ``chat`` template's client (the
standard library's ``http.client``, ``json``, ``urllib.parse``); ``import anthropic`` and building
``anthropic.Anthropic()`` (the ``chat-sdk`` template's client). In Docker the command runs by
``docker exec`` in one long-lived container of the sandbox image with the task limits, so
container start is not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CLIENTS = {
    "bare interpreter": "pass",
    "stdlib client (chat)": "import http.client, json, urllib.parse",
    "anthropic SDK (chat-sdk)": "import anthropic; anthropic.Anthropic(api_key='x', base_url='http://127.0.0.1:9')",
}
# Prints the child's own CPU seconds, measured by the child around the import.
PROBE = (
    "import os, time; t = time.perf_counter(); c = os.times()\n{code}\n"
    "d = os.times(); print(time.perf_counter() - t, d.user - c.user + d.system - c.system)"
)
IMAGE = "harnessopt-sandbox:latest"


def run(argv: list[str], n: int) -> tuple[float, float, float]:
    """(median wall of the whole command, median wall inside, median CPU inside)."""
    walls, inside, cpu = [], [], []
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
        walls.append(time.perf_counter() - t)
        inside.append(float(out[0]))
        cpu.append(float(out[1]))
    return statistics.median(walls), statistics.median(inside), statistics.median(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    a = ap.parse_args()
    name = f"ho-bench-import-{os.getpid()}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            "--label",
            "harnessopt.bench=1",
            "--network",
            "none",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--user",
            "65534:65534",
            "--cpus",
            "1",
            "--memory",
            "512m",
            "-e",
            "PYTHONPATH=/opt/ho/site",
            "-e",
            "PYTHONDONTWRITEBYTECODE=1",
            "--entrypoint",
            "sleep",
            IMAGE,
            "3600",
        ],
        check=True,
        capture_output=True,
    )
    print(
        f"client_import: median of {a.n} fresh interpreters; wall s of the command / wall s of the import / CPU s of the import"
    )
    try:
        for where, prefix in (
            ("docker exec", ["docker", "exec", name, "python3", "-c"]),
            ("host", [sys.executable, "-c"]),
        ):
            for label, code in CLIENTS.items():
                w, i, c = run([*prefix, PROBE.format(code=code)], a.n)
                print(f"  {where:11} {label:26} {w:6.3f} {i:6.3f} {c:6.3f}")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
