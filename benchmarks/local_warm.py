"""Per-task overhead of the local sandbox, cold against warm (``rollout.warm_interpreter``), side by side.

    python benchmarks/local_warm.py [--n 24] [--concurrency 1 4] [--latency 0 2] [--modes bwrap session]
    python benchmarks/local_warm.py --round [--concurrency 4] [--round-n 20] [--repeat 2]

Each task is the ``chat`` template's harness (workspace_templates/chat/run.py, the demo's skill)
making its one Messages call to a fake model that answers after ``--latency`` seconds
(benchmarks/roundbench.py's model, reached directly at its loopback port). For each isolation
mode, concurrency C and latency, N tasks run through ``LocalSandbox.run`` from C threads, cold
(``warm_interpreter`` off: the wrapper and the interpreter start when the task arrives) and warm
(the next tasks' wrapped interpreters pre-started while the current ones wait on the model),
alternating cold, warm, cold, warm (``--repeat`` pairs) so that both see the same load. Before
each batch the candidate's first tasks have run and the pool had a second to fill, as it has
while a round's optimizer works. Prints per variant: the median overhead of a task (the caller's
time in ``run`` minus the model's latency), the wall time per task against the ideal
latency x N / C (``ratio``), and the load average.

``--round``: instead, whole rounds through harnessopt's Runner and gateway, the cells of
benchmarks/round_vs_ideal.py (rollout of N train tasks, smoke test, validation; 2 s model) with
``--sandbox local``, cold and warm alternately, printed as that script prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import round_vs_ideal
import roundbench

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import LocalSandbox

TEMPLATE = roundbench.ROOT / "workspace_templates" / "chat" / "run.py"


def candidate(tmp: Path) -> tuple[Path, Path]:
    """skill/ (the demo's) and harness/ (the chat template's run.py) in a fresh directory."""
    shutil.copytree(roundbench.DEMO_DATA / "skill", tmp / "skill")
    (tmp / "harness").mkdir()
    shutil.copy(TEMPLATE, tmp / "harness" / "run.py")
    return tmp / "skill", tmp / "harness"


def batch(
    sb: LocalSandbox, skill: Path, harness: Path, base_url: str, n: int, c: int, scratch: Path
) -> list[float]:
    """Seconds of each of ``n`` tasks' ``run`` calls, ``c`` at a time; raises on a failed task."""

    def one(i: int) -> float:
        task = {"id": f"t{i}", "input": "What is the capital of France?", "split": "train", "metadata": {}}
        lease = GatewayLease(token="bench-token", base_url=base_url, socket_path=scratch / "no.sock")
        spec = RunSpec(task, skill, harness, {"HARNESSOPT_TARGET_MODEL": "bench-target"}, lease, 120.0)
        out_dir = Path(tempfile.mkdtemp(prefix="o-", dir=scratch))
        t0 = time.perf_counter()
        out = sb.run(spec, out_dir)
        took = time.perf_counter() - t0
        if out.error_class is not None or not (out_dir / "answer.txt").read_text().strip():
            raise RuntimeError(f"task failed: {out.error_class} {out.stderr_tail[-500:]}")
        return took

    with ThreadPoolExecutor(c) as ex:
        return list(ex.map(one, range(n)))


def cell(mode: str, warm: bool, c: int, latency: float, n: int, base_url: str) -> tuple[float, float, int]:
    """(median overhead s, wall s, tasks run warm) of ``n`` tasks in a fresh sandbox."""
    scratch = Path(tempfile.mkdtemp(prefix="ho-bench-warm-"))
    cfg = RolloutConfig(sandbox="local", concurrency=c, timeout_s=120, warm_interpreter=warm)
    sb = LocalSandbox(cfg, isolation_mode=mode)
    try:
        skill, harness = candidate(scratch)
        batch(sb, skill, harness, base_url, 2, 1, scratch)  # the candidate's first tasks (cold)
        time.sleep(1.0)  # the pool fills, as while the optimizer works
        before = sb._pool.taken if sb._pool is not None else 0
        t0 = time.perf_counter()
        took = batch(sb, skill, harness, base_url, n, c, scratch)
        wall = time.perf_counter() - t0
        warm_runs = (sb._pool.taken if sb._pool is not None else 0) - before
    finally:
        sb.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return statistics.median(took) - latency, wall, warm_runs


@contextlib.contextmanager
def warm_setting(warm: bool) -> Iterator[None]:
    """roundbench's workspaces opened with ``rollout.warm_interpreter`` set to ``warm``."""
    real = roundbench.Workspace.open

    def open_with(root: Any, overrides: dict[str, Any] | None = None, *a: Any, **kw: Any) -> Any:
        return real(root, {**(overrides or {}), "rollout.warm_interpreter": warm}, *a, **kw)

    roundbench.Workspace.open = open_with
    try:
        yield
    finally:
        roundbench.Workspace.open = real


def rounds(concurrency: list[int], n: int, repeat: int) -> None:
    """round_vs_ideal's local cells, cold and warm alternately."""
    print(f"load average at start: {os.getloadavg()[0]:.2f}; round_vs_ideal cells, chat template, 2 s model")
    print(
        f"variant {'mode':7} {'C':>2} {'N':>3} {'calls':>5} {'wall s':>7} {'ideal':>6} {'ratio':>6} {'/phase':>6}   "
        f"{'model':>5} {'h-m':>6} {'outside':>6}"
    )
    for c in concurrency:
        for _ in range(repeat):
            for warm in (False, True):
                with warm_setting(warm):
                    line = round_vs_ideal.one_cell("local", c, n, 2.0, "chat")
                print(f"{'warm' if warm else 'cold':7} {line}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--latency", type=float, nargs="+", default=[0.0, 2.0])
    ap.add_argument("--modes", nargs="+", default=[m for m in isolation.MODES if isolation.available(m)])
    ap.add_argument("--repeat", type=int, default=2, help="cold/warm pairs per cell")
    ap.add_argument("--round", action="store_true", help="whole rounds (round_vs_ideal's cells) instead")
    ap.add_argument("--round-n", type=int, default=20, help="--round: N train and N val tasks")
    args = ap.parse_args()
    if args.round:
        rounds(args.concurrency, args.round_n, args.repeat)
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}; N = {args.n} tasks per batch")
    print("mode     C  latency  variant  overhead s (median of batches)  wall s  ideal s  ratio  warm runs")
    for mode in args.modes:
        for c in args.concurrency:
            for latency in args.latency:
                with roundbench.FakeAnthropicServer(roundbench.latency_model(latency)) as fake:
                    rows: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
                    for _ in range(args.repeat):
                        for warm in (False, True):
                            rows[warm].append(cell(mode, warm, c, latency, args.n, fake.base_url))
                ideal = latency * args.n / c
                for warm in (False, True):
                    over = statistics.median(r[0] for r in rows[warm])
                    wall = statistics.median(r[1] for r in rows[warm])
                    ratio = f"{wall / ideal:5.2f}" if ideal else "    -"
                    used = "/".join(str(r[2]) for r in rows[warm])
                    name = "warm" if warm else "cold"
                    print(
                        f"{mode:8} {c:>2} {latency:>6.1f}   {name:7}  {over:>8.3f}"
                        f"                      {wall:>7.2f} {ideal:>7.1f}  {ratio}  {used}"
                    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
