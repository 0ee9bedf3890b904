"""What copying the optimizer's view out of its container costs per tool call (``DockerShell``).

    python benchmarks/view_sync.py [--n 20] [--mb 0,2,20]

For a view of SKILL.md, harness/run.py and a trajectories/ directory of 40 incompressible files
adding up to --mb MB (each value in turn), times ``DockerShell.run("true")`` (one exec of the
runner's shell mode, the ``docker top`` check and the copy out: the container's ``tar -c``,
the host's strict untar into a fresh directory and the swap), the copy out alone
(``_sync_back``) and one ``edit`` (a write, then the copy out). Prints medians over --n calls,
and the time to make the container and seed its /view (the first call's extra). Needs Docker
and the image (``harnessopt sandbox build``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.config import RolloutConfig  # noqa: E402
from harnessopt.sandbox.docker.shell import DockerShell
from harnessopt.sandbox.image.build import docker_client


def _make_view(root: Path, mb: float) -> Path:
    view = root / "view"
    (view / "skill").mkdir(parents=True)
    (view / "skill" / "SKILL.md").write_text("---\nname: b\ndescription: bench\n---\nbody\n" * 20)
    (view / "harness").mkdir()
    (view / "harness" / "run.py").write_text("print('run')\n" * 50)
    (view / "trajectories").mkdir()
    each = int(mb * (1 << 20) / 40)
    for i in range(40 if each else 0):
        (view / "trajectories" / f"t{i:02d}.md").write_bytes(os.urandom(each))
    return view


def _median_ms(f: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _measure(client: object, cfg: RolloutConfig, mb: float, n: int) -> tuple[float, float, float, float]:
    """(first call, run("true"), copy out, edit) in ms for a view of ``mb`` MB."""
    private = Path(tempfile.mkdtemp(prefix="ho-bench-sync-"))
    try:
        sh = DockerShell(_make_view(private, mb), cfg, client=client)
        try:
            t0 = time.perf_counter()
            sh.run("true", 30)
            first = (time.perf_counter() - t0) * 1000
            run = _median_ms(lambda: sh.run("true", 30), n)
            with sh._lock:
                sync = _median_ms(sh._sync_back, n)
            write = {"op": "write", "path": "skill/notes.md", "text": "x\n"}
            edit = _median_ms(lambda: sh.edit(write), n)
        finally:
            sh.close()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return first, run, sync, edit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--mb", default="0,2,20")
    args = ap.parse_args()
    client = docker_client()
    cfg = RolloutConfig(memory_mb=512)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'view MB':>8} {'first call ms':>14} {'run(true) ms':>13} {'copy out ms':>12} {'edit ms':>8}")
    for mb in (float(x) for x in args.mb.split(",")):
        first, run, sync, edit = _measure(client, cfg, mb, args.n)
        print(f"{mb:>8g} {first:>14.0f} {run:>13.0f} {sync:>12.0f} {edit:>8.0f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
