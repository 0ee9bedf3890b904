"""What a lease's own gateway socket costs: ``Gateway.lease`` + ``release`` with a socket dir.

    python benchmarks/lease_sockets.py [--n 200]

Each lease binds, chmods and serves its own Unix socket, and its release removes it (the
listener stops in the background); this prints the median time of the pair.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="leases made and released")
    a = ap.parse_args()
    sock_dir = Path(tempfile.mkdtemp(prefix="ho-bls-"))
    try:
        model = ScriptedModel.from_dict({"rules": [], "default": "ok"})
        with Gateway(model, BudgetConfig(), socket_dir=sock_dir) as gw:
            times = []
            for _ in range(a.n):
                t0 = time.perf_counter()
                gw.release(gw.lease("target", 1, "t").token)
                times.append(time.perf_counter() - t0)
        print(
            f"lease + release with its own socket: median {statistics.median(times) * 1000:.2f} ms (n={a.n})"
        )
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
