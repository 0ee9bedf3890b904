"""Per-task sandbox overhead: DockerSandbox (warm pool, fresh container per task) vs. the obvious ways.

Each variant runs a no-op harness (``python3 run.py`` that writes answer.txt) N times, at
concurrency 1 and 2, on the same image with the same limits:

  ours     DockerSandbox.run: create -> run -> collect /out -> remove, a fresh container per task
  (a) run  docker-py ``containers.run(..., remove=True)`` per task (= ``docker run --rm``)
  (b) exec one long-lived container + ``exec_run`` per task (no isolation between tasks)

The harness sleeps ``--work`` seconds (0 = a pure no-op; real tasks spend seconds on model calls,
which is what lets the pool start the next containers meanwhile). Prints, per variant, the median
overhead of one task (latency minus the work) and wall time per task (total / N), with the
ratio of the overhead to (a).
Usage: python benchmarks/sandbox_overhead.py [--n 20] [--work 0 1]  (needs Docker and the image)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec
from harnessopt.sandbox.docker import DockerSandbox
from harnessopt.sandbox.image import docker_client
from harnessopt.sandbox.pool import container_kwargs

NOOP = (
    "import argparse, os, time\n"
    "time.sleep(float(os.environ.get('WORK_S', '0')))  # stands in for the model calls of a real task\n"
    "p = argparse.ArgumentParser(); [p.add_argument(a) for a in ('--task', '--skill', '--out')]\n"
    "a = p.parse_args(); open(os.path.join(a.out, 'answer.txt'), 'w').write('ok')\n"
)
ARGV = ["python3", "/ho/harness/run.py", "--task", "/ho/task.json", "--skill", "/ho/skill", "--out", "/out"]


def measure(one: Callable[[int], None], n: int, concurrency: int) -> tuple[float, float]:
    """(median seconds per task call, wall seconds per task) over n tasks."""
    lat: list[float] = []

    def timed(i: int) -> None:
        t = time.perf_counter()
        one(i)
        lat.append(time.perf_counter() - t)

    one(-1)  # warm-up: image layers and page cache
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(timed, range(n)))
    return statistics.median(lat), (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--work", type=float, nargs="+", default=[0.0, 1.0])
    args = ap.parse_args()
    rows: list[tuple[str, float, int, float, float]] = []
    for work_s in args.work:
        rows += run_all(args.n, work_s)
    print(
        f"{'variant':24} {'work s':>6} {'conc':>4} {'overhead s':>11} {'wall s/task':>12} {'overhead/(a)':>13}"
    )
    for name, work_s, conc, med, per in rows:
        base = next(r for r in rows if r[1:3] == (work_s, conc) and r[0].startswith("(a)"))
        print(f"{name:24} {work_s:>6.1f} {conc:>4} {med:>11.3f} {per:>12.3f} {med / base[3]:>13.2f}")


def variants(client: Any, cfg: RolloutConfig, slot: Path, env: dict[str, str], work: Path) -> dict[str, Any]:
    """name -> (run one task, clean up) for the three ways of running a task."""
    kw = container_kwargs(cfg, "bench")
    kw.pop("detach")
    kw.pop("log_config")  # containers.run reads the logs
    vols = {str(slot): {"bind": "/ho", "mode": "ro"}}

    def docker_run(_i: int) -> None:
        client.containers.run(cfg.image, ARGV, volumes=vols, remove=True, environment=env, **kw)

    long_lived = client.containers.run(cfg.image, ["sleep", "infinity"], volumes=vols, detach=True, **kw)

    def docker_exec(_i: int) -> None:
        long_lived.exec_run(ARGV, environment=env)

    sandbox = DockerSandbox(cfg, client)
    lease = GatewayLease("bench", "http://127.0.0.1:9", None)
    spec = RunSpec({"id": "b", "input": "x"}, slot / "skill", slot / "harness", env, lease, 60)

    def ours(i: int) -> None:
        out = sandbox.run(spec, work / f"out-{cfg.concurrency}-{i}-{time.monotonic_ns()}")
        assert out.error_class is None, out

    return {
        "(a) docker run --rm": (docker_run, lambda: None),
        "(b) long-lived + exec": (docker_exec, lambda: long_lived.remove(force=True)),
        "ours: DockerSandbox": (ours, sandbox.close),
    }


def run_all(n: int, work_s: float) -> list[tuple[str, float, int, float, float]]:
    """One row per (variant, concurrency): (name, work_s, concurrency, median overhead, wall/task)."""
    client = docker_client()
    work = Path(tempfile.mkdtemp(prefix="ho-bench-"))
    work.chmod(0o755)
    slot = work / "slot"
    for d in ("skill", "harness"):
        (slot / d).mkdir(parents=True)
    (slot / "skill" / "SKILL.md").write_text("---\nname: b\ndescription: b\n---\n")
    (slot / "harness" / "run.py").write_text(NOOP)
    (slot / "task.json").write_text('{"id": "b", "input": "x"}')
    for p in [work, *slot.rglob("*"), slot]:
        p.chmod(0o755)

    env = {"WORK_S": str(work_s)}
    rows = []
    for conc in (1, 2):
        for name, (fn, done) in variants(client, RolloutConfig(concurrency=conc), slot, env, work).items():
            try:
                time.sleep(1.0)  # let the pool warm up, as it does while the first tasks run
                med, per = measure(fn, n, conc)
                rows.append((name, work_s, conc, med - work_s, per))
            finally:
                done()
    return rows


if __name__ == "__main__":
    main()
