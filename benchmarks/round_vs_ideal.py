"""A round's rollout + smoke + validation against the LLM-bound ideal.

    python benchmarks/round_vs_ideal.py [--quick] [--modes docker local] [--latency 2] [--template chat]

For each sandbox mode, concurrency C in {1, 4, 8} and N in {20, 40} (``--quick``: N = 20 only):
a fresh workspace of the template with N train and N val tasks, its target a model answering
every call after --latency seconds (benchmarks/roundbench.py), then the round's three phases:
rollout of the N train tasks through harnessopt's Runner, then the round's own steps: the smoke
test (``evaluate.smoke``, 5 val tasks) and the validation of the other N - 5 (``evaluate.validate``),
whose first runs start in the slots the smoke test leaves free. The incumbent's rerun the loop
makes while the optimizer works (one run a round) is not part of these phases. Prints wall time /
(calls x latency / C), the issue's ideal, and wall time / the phase-by-phase ideal (sum over
phases of ceil(tasks / C) x latency: what a scheduler with a barrier between phases could reach).

Where the rest goes, per task, from the runner's results: ``model`` is the time the gateway
spent on the task's calls (its exchange records), ``harness`` the sandbox's wall time of the
harness process (its start to its exit), ``outside`` what the runner spent on the task besides
the harness (phase wall x C / tasks - harness: container or process start, slot, scoring, /out),
``engine`` the CPU seconds Docker's daemons and shims (dockerd, containerd, the shims, runc) used
during the cell, per task: starting and removing a container per task, which competes with the
tasks for the cores.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time

import roundbench

from harnessopt.round import context, evaluate

SMOKE = 5  # gate.smoke's default


def _quiet(_message: str) -> None:
    return None


ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "docker-init")
TICK = os.sysconf("SC_CLK_TCK")


def engine_cpu_s() -> float:
    """CPU seconds used so far by the container engine's processes (Docker's daemons and shims)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            rest = fields[1].split()
        except (OSError, IndexError):
            continue
        if name in ENGINE or name.startswith("containerd-shim"):
            total += (
                int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
            )  # incl. waited-for children
    return total / TICK


def one_cell(mode: str, c: int, n: int, latency: float, template: str) -> str:
    tmp = roundbench.new_tmp("ho-bench-p2-")
    engine0 = engine_cpu_s()
    try:
        with roundbench.bench_services(
            tmp, sandbox=mode, concurrency=c, n_train=n, n_val=n, latency_s=latency, template=template
        ) as (ws, svc):
            inc = roundbench.candidate_copy(ws, tmp / "incumbent")
            cand = roundbench.candidate_copy(ws, tmp / "candidate", "candidate")
            val = sorted(ws.tasks("val"), key=lambda t: t.id)
            rc = context.RoundContext(k=1, scratch=tmp / "scratch", incumbent=inc, parent="bench", val=val)
            time.sleep(1.0)  # the warm pool fills, as it does while a round's optimizer works
            rollout = roundbench.timed_phase("rollout", svc, inc, ws.tasks("train"), 1)
            time.sleep(1.0)  # the optimizer's turn: the pool refills
            # The round's own steps (evaluate.smoke, evaluate.validate); no incumbent outcomes, so no
            # crash is checked against it and validation never stops for futility.
            smoke = roundbench.timed("smoke", lambda: evaluate.smoke(ws, svc, rc, cand, {}, _quiet)[0])
            validation = roundbench.timed(
                "validation", lambda: evaluate.validate(ws, svc, rc, cand, smoke.results, {}, _quiet)[SMOKE:]
            )
            phases = [rollout, smoke, validation]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    engine = engine_cpu_s() - engine0
    wall = sum(p.wall_s for p in phases)
    calls = sum(p.calls for p in phases)
    errors = [
        f"{r.error_class}: {(r.notes or [''])[-1][:80]}" for p in phases for r in p.results if r.error_class
    ]
    failed = len(errors)
    ideal = calls * latency / c
    per_phase = sum(math.ceil(len(p.results) / c) * latency for p in phases)
    tasks = sum(len(p.results) for p in phases)
    model = sum(p.model_s() * len(p.results) for p in phases) / tasks
    harness = sum(p.harness_s() * len(p.results) for p in phases) / tasks
    outside = sum(p.wall_s * min(c, len(p.results)) for p in phases) / tasks - harness
    note = f" ({failed} tasks failed; first: {errors[0]})" if failed else ""
    return (
        f"{mode:7} {c:>2} {n:>3} {calls:>5} {wall:>7.1f} {ideal:>6.1f} {wall / ideal:>6.2f} "
        f"{wall / per_phase:>6.2f}   {model:>5.2f} {harness - model:>6.2f} {outside:>6.2f} "
        f"{engine / tasks if mode == 'docker' else float('nan'):>7.2f}{note}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 20 only")
    ap.add_argument("--modes", nargs="+", default=["docker", "local"])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--template", default="chat")
    ap.add_argument("--sizes", type=int, nargs="+", help="the N to run (default 20 40; --quick: 20)")
    a = ap.parse_args()
    sizes = a.sizes or ([20] if a.quick else [20, 40])
    print(
        f"round_vs_ideal: template {a.template}, model latency {a.latency:g} s, {os.cpu_count()} cores; "
        f"per task: model = gateway time on its calls, harness-model = the harness's own time "
        f"(interpreter, imports, gateway hop), outside = the runner's time around the harness, "
        f"engine = CPU s of the container engine's processes per task (the whole cell, pool fill and "
        f"removal included; nan in local mode)"
    )
    print(
        f"{'mode':7} {'C':>2} {'N':>3} {'calls':>5} {'wall s':>7} {'ideal':>6} {'ratio':>6} {'/phase':>6}   "
        f"{'model':>5} {'h-m':>6} {'outside':>6} {'engine':>7}"
    )
    for mode in a.modes:
        for n in sizes:
            for c in a.concurrency:
                print(one_cell(mode, c, n, a.latency, a.template), flush=True)
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
