"""Per-task sandbox overhead: DockerSandbox (warm pool, fresh container per task) vs. the obvious ways.

Each variant runs the same harness N times, at concurrency 1 and 2, on the same image with the
same limits. The harness makes the ``chat`` template's imports (read from its run.py, so they
stay in step), sleeps ``--work`` seconds and writes answer.txt:

  ours, warm interpreter  DockerSandbox.run with rollout.warm_interpreter (the default): the
                          container's interpreter is started and warmed while it waits in the pool
  ours, cold interpreter  DockerSandbox.run with warm_interpreter false: ``python3 run.py`` starts
                          when the job arrives
  (a) run  docker-py ``containers.run(..., remove=True)`` per task (= ``docker run --rm``)
  (b) exec one long-lived container + ``exec_run`` per task (no isolation between tasks)

Ours is always create -> run -> collect /out -> remove, a fresh container per task. ``--work 0``
is a pure no-op; real tasks spend seconds on model calls, which is what lets the pool start the
next containers meanwhile. Prints the load average before and after, then, per variant, the
median overhead of one task (latency minus the work) and wall time per task (total / N), with
the ratio of the overhead to (a).
With ``--repeat R`` every variant is measured R times (in reversed order every other time, so a
load that drifts during the run weighs on all of them alike): the median is over the R x N tasks.
The last columns are the machine's CPU: busy CPU seconds of the whole machine (``/proc/stat``:
dockerd, containerd, the shims, runc, the containers and this process alike) from the first task to
the variant's clean-up (its containers removed), from before its 1 s warm-up, the containers the
engine created meanwhile (its live events), and that CPU per container: for ours the pool's spare containers, made and removed
unused, are among them (in a long run they are a few among thousands), so per container is the
figure that holds for a run. Anything else running counts too: it needs a quiet machine.
That CPU a container is then split three ways: ``in it``, what the processes inside the containers
spent (the engine's parent cgroup of its containers, which keeps a removed container's CPU: v1's
cpuacct or v2's cpu.stat with the cgroupfs driver; ``-`` with the systemd driver, where they have
no parent of their own); ``here``, this process (the pool's threads, the attach streams, the tar
of /out); ``rest``, the machine's busy CPU less both: dockerd, containerd, the shims, runc and the
kernel's work for them, and anything else that ran meanwhile.
Against the model-bound ideal, C tasks in flight of ``work`` seconds each need C / work tasks a
second: the machine's cores are what bounds the rate at which a sandbox can start them.
Usage: python benchmarks/sandbox_overhead.py [--n 20] [--work 0 1] [--repeat 1] [--concurrency 1 2]
(needs Docker and the image)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec
from harnessopt.sandbox.docker.pool import container_kwargs
from harnessopt.sandbox.docker.sandbox import DockerSandbox
from harnessopt.sandbox.image.build import LABEL, docker_client

TEMPLATE = Path(__file__).resolve().parents[1] / "workspace_templates" / "chat" / "run.py"


def template_imports(path: Path = TEMPLATE) -> str:
    """The top-level import statements of a template's run.py, as source lines."""
    source = path.read_text()
    nodes = [n for n in ast.parse(source).body if isinstance(n, ast.Import | ast.ImportFrom)]
    return "".join(f"{ast.get_source_segment(source, n)}\n" for n in nodes)


HARNESS = template_imports() + (
    "import argparse, os, time\n"
    "time.sleep(float(os.environ.get('WORK_S', '0')))  # stands in for the model calls of a real task\n"
    "p = argparse.ArgumentParser(); [p.add_argument(a) for a in ('--task', '--skill', '--out')]\n"
    "a = p.parse_args(); open(os.path.join(a.out, 'answer.txt'), 'w').write('ok')\n"
)
ARGV = ["python3", "/ho/harness/run.py", "--task", "/ho/task.json", "--skill", "/ho/skill", "--out", "/out"]


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``'s cpu line, less idle
    and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# The engine's parent cgroup of its containers with the cgroupfs driver (v1's cpuacct, v2's cpu.stat).
# A parent keeps the CPU of children that were removed, so it counts every container run meanwhile.
CONTAINERS_V1 = Path("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage")
CONTAINERS_V2 = Path("/sys/fs/cgroup/docker/cpu.stat")


def container_seconds() -> float | None:
    """CPU seconds spent inside the engine's containers (all of them, ours and any other), or None
    where the engine's containers have no parent cgroup of their own (the systemd driver)."""
    with contextlib.suppress(OSError, ValueError):
        return int(CONTAINERS_V1.read_text()) / 1e9
    with contextlib.suppress(OSError, ValueError, StopIteration):
        lines = CONTAINERS_V2.read_text().splitlines()
        return int(next(x for x in lines if x.startswith("usage_usec ")).split()[1]) / 1e6
    return None


def own_seconds() -> float:
    """CPU seconds of this process (its threads: the sandbox's pool, the attach streams, the tar of /out)."""
    t = os.times()
    return t.user + t.system


@dataclass
class Cpu:
    """CPU seconds of a measurement: the machine's, inside containers (None: not told apart) and ours."""

    machine: float
    inside: float | None
    own: float
    made: int

    @staticmethod
    def now() -> Cpu:
        return Cpu(busy_seconds(), container_seconds(), own_seconds(), 0)

    def since(self, start: Cpu, made: int) -> Cpu:
        inside = None if self.inside is None or start.inside is None else self.inside - start.inside
        return Cpu(self.machine - start.machine, inside, self.own - start.own, made)

    def __add__(self, other: Cpu) -> Cpu:
        inside = None if self.inside is None or other.inside is None else self.inside + other.inside
        return Cpu(self.machine + other.machine, inside, self.own + other.own, self.made + other.made)


class Creations:
    """Counts the containers of ours (label ``harnessopt``) the engine creates while it is open, from
    its live event stream (the engine keeps only its last 256 events: asking afterwards loses some)."""

    def __init__(self, client: Any):
        filters = {"type": "container", "event": "create", "label": LABEL}
        self.stream = client.events(filters=filters, decode=True)
        self.count = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(Exception):  # the stream closed under us
            for _ in self.stream:
                self.count += 1

    def close(self) -> int:
        time.sleep(0.5)  # the last events on their way
        self.stream.close()
        self.thread.join(5)
        return self.count


def measure(one: Callable[[int], None], n: int, concurrency: int) -> tuple[list[float], float]:
    """(seconds of each task call, wall seconds per task) over n tasks."""
    lat: list[float] = []

    def timed(i: int) -> None:
        t = time.perf_counter()
        one(i)
        lat.append(time.perf_counter() - t)

    one(-1)  # warm-up: image layers and page cache
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(timed, range(n)))
    return lat, (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--work", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every variant this many times, in reversed order every other time",
    )
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows: list[tuple[str, float, int, float, float, Cpu]] = []
    for work_s in args.work:
        rows += run_all(args.n, work_s, args.repeat, tuple(args.concurrency))
    load_after = os.getloadavg()
    print(f"harness: the chat template's imports ({', '.join(imported_names())}), then --work s of sleep")
    print(f"load average (1, 5, 15 min): before {_load(load_before)}, after {_load(load_after)}")
    print(
        f"{'variant':24} {'work s':>6} {'conc':>4} {'overhead s':>11} {'wall s/task':>12} {'overhead/(a)':>13}"
        f" {'CPU s':>6} {'containers':>10} {'CPU s/container':>15} {'in it':>6} {'here':>6} {'rest':>6}"
    )
    for name, work_s, conc, med, per, cpu in rows:
        base = next(r for r in rows if r[1:3] == (work_s, conc) and r[0].startswith("(a)"))
        print(
            f"{name:24} {work_s:>6.1f} {conc:>4} {med:>11.3f} {per:>12.3f} {med / base[3]:>13.2f}"
            f" {cpu.machine:>6.1f} {cpu.made:>10} {_per(cpu.machine, cpu.made):>15}"
            f" {_per(cpu.inside, cpu.made):>6} {_per(cpu.own, cpu.made):>6}"
            f" {_per(None if cpu.inside is None else cpu.machine - cpu.inside - cpu.own, cpu.made):>6}"
        )


def _per(seconds: float | None, made: int) -> str:
    return "-" if seconds is None or not made else f"{seconds / made:.3f}"


def _load(avg: tuple[float, float, float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg)


def imported_names() -> list[str]:
    tree = ast.parse(TEMPLATE.read_text())
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


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

    lease = GatewayLease("bench", "http://127.0.0.1:9", None)
    spec = RunSpec({"id": "b", "input": "x"}, slot / "skill", slot / "harness", env, lease, 60)
    found: dict[str, Any] = {
        "(a) docker run --rm": (docker_run, lambda: None),
        "(b) long-lived + exec": (docker_exec, lambda: long_lived.remove(force=True)),
    }
    for name, warm in (("ours, cold interpreter", False), ("ours, warm interpreter", True)):
        sandbox = DockerSandbox(cfg.model_copy(update={"warm_interpreter": warm}), client)
        found[name] = (_ours(sandbox, spec, work), sandbox.close)
    return found


def _ours(sandbox: DockerSandbox, spec: RunSpec, work: Path) -> Callable[[int], None]:
    def ours(i: int) -> None:
        out = sandbox.run(spec, work / f"out-{sandbox.run_id}-{i}-{time.monotonic_ns()}")
        assert out.error_class is None, out

    return ours


def run_all(
    n: int, work_s: float, repeat: int = 1, concurrencies: tuple[int, ...] = (1, 2)
) -> list[tuple[str, float, int, float, float, Cpu]]:
    """One row per (variant, concurrency): (name, work_s, concurrency, median overhead, wall/task,
    CPU and containers created) over ``repeat`` measurements of ``n`` tasks each."""
    client = docker_client()
    work = Path(tempfile.mkdtemp(prefix="ho-bench-"))
    work.chmod(0o755)
    slot = work / "slot"
    for d in ("skill", "harness"):
        (slot / d).mkdir(parents=True)
    (slot / "skill" / "SKILL.md").write_text("---\nname: b\ndescription: b\n---\n")
    (slot / "harness" / "run.py").write_text(HARNESS)
    (slot / "task.json").write_text('{"id": "b", "input": "x"}')
    for p in [work, *slot.rglob("*"), slot]:
        p.chmod(0o755)

    env = {"WORK_S": str(work_s)}
    lat: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[Cpu]] = {}
    for r in range(repeat):
        for conc in concurrencies:
            found = list(variants(client, RolloutConfig(concurrency=conc), slot, env, work).items())
            for name, (fn, done) in found if r % 2 == 0 else found[::-1]:  # the load drifts: both orders
                start, created = Cpu.now(), Creations(client)
                try:
                    time.sleep(1.0)  # let the pool warm up, as it does while the first tasks run
                    got, per = measure(fn, n, conc)
                    lat.setdefault((name, conc), []).extend(got)
                    walls.setdefault((name, conc), []).append(per)
                finally:
                    done()
                    made = created.close()
                    cpus.setdefault((name, conc), []).append(Cpu.now().since(start, made))
    order = sorted(lat, key=lambda key: (key[1], key[0]))
    return [
        (
            name,
            work_s,
            c,
            statistics.median(lat[name, c]) - work_s,
            statistics.mean(walls[name, c]),
            sum(cpus[name, c][1:], cpus[name, c][0]),
        )
        for name, c in order
    ]


if __name__ == "__main__":
    main()
