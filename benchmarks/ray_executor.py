"""A batch of rollouts on the local executor and on the Ray executor, against the ideal.

    python benchmarks/ray_executor.py [--tasks 16] [--concurrency 2 4] [--latency 1] [--sandbox local]

The model is the fake Messages server at a fixed latency (benchmarks/roundbench.py), behind the
real gateway; the harness is the chat template (one call per task). For each concurrency C, the
same N val tasks run through harnessopt's Runner, first with the local executor (a thread pool),
then with the Ray executor on Ray's own two-node test cluster on this machine
(``ray.cluster_utils.Cluster``, C/2 CPUs a node, so the cluster takes C tasks at once): each run
in the node's sandbox, its call through the worker's relay and the head's ingress to the gateway.
Prints wall time / (calls x latency / C), the ideal. ``cold`` is the first batch (Ray starts its
worker processes, each imports harnessopt and makes its relay and sandbox); ``warm`` the next.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time

import roundbench

from harnessopt.rollout.ray.executor import RayExecutor, import_ray


def batch(svc, cand, tasks, round_no: int) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    results = svc.runner.run(cand, tasks, round_no, phase="validation")
    wall = time.perf_counter() - t0
    return wall, sum(len(r.exchanges) for r in results), sum(r.error_class is not None for r in results)


def one_cell(executor: str, c: int, n: int, latency: float, sandbox: str) -> str:
    tmp = roundbench.new_tmp("ho-bench-ray-")
    try:
        with roundbench.bench_services(
            tmp, sandbox=sandbox, concurrency=c, n_train=2, n_val=n, latency_s=latency
        ) as (ws, svc):
            if executor == "ray":
                cfg = svc.cfg.model_copy(deep=True)
                cfg.rollout = cfg.rollout.model_copy(update={"executor": "ray"})
                svc.runner.executor = RayExecutor(cfg, svc.gateway.base_url)
            inc = roundbench.candidate_copy(ws, tmp / "incumbent")
            val = sorted(ws.tasks("val"), key=lambda t: t.id)
            time.sleep(1.0)  # a warm pool fills, as it does while a round's optimizer works
            cold = batch(svc, inc, val, 1)
            warm = batch(svc, inc, val, 2)
            svc.runner.executor.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cells = []
    for wall, calls, failed in (cold, warm):
        ideal = calls * latency / c
        per_slot = math.ceil(n / c) * latency
        note = f" ({failed} failed)" if failed else ""
        cells.append(f"{wall:>6.1f} {ideal:>5.1f} {wall / ideal:>5.2f} {wall / per_slot:>5.2f}{note}")
    return f"{executor:5} {c:>2} {n:>3}  " + "   ".join(cells)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--sandbox", default="local")
    a = ap.parse_args()
    ray = import_ray()
    from ray.cluster_utils import Cluster

    print(
        f"ray_executor: {a.tasks} tasks, model latency {a.latency:g} s, sandbox {a.sandbox}, "
        f"{os.cpu_count()} cores; ratio = wall / (calls x latency / C); /slot = wall / (ceil(N/C) x latency)"
    )
    print(
        f"{'exec':5} {'C':>2} {'N':>3}  {'cold s':>6} {'ideal':>5} {'ratio':>5} {'/slot':>5}   "
        f"{'warm s':>6} {'ideal':>5} {'ratio':>5} {'/slot':>5}"
    )
    for c in a.concurrency:
        print(one_cell("local", c, a.tasks, a.latency, a.sandbox), flush=True)
        cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": c // 2 or 1, "include_dashboard": False}
        )
        cluster.add_node(num_cpus=max(1, c - c // 2))
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            print(one_cell("ray", c, a.tasks, a.latency, a.sandbox), flush=True)
        finally:
            ray.shutdown()
            cluster.shutdown()
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
