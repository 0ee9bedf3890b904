"""The interpreter start-up a task pays for its model client, in the sandbox image and
on this host, side by side; and ``harnessopt run``'s own start-up with and without the SDKs.

    python benchmarks/client_import.py [--n 5] [--no-docker]

Each client row starts a fresh ``python3`` (``-c``) N times and prints the median wall time and
CPU time (user + sys of the child) of: a bare interpreter; loading each standard-library
template's ``run.py`` as a module (``chat``, ``openai-chat``, ``tool-agent``: every import the
task pays, the client included, its ``main`` not run); ``import anthropic`` and building
``anthropic.Anthropic()`` (the ``chat-sdk`` template's client, and what ``tool-agent`` imported
before); ``import openai`` and building ``openai.OpenAI()`` (``openai-chat-sdk``, and what
``openai-chat`` and ``tool-agent`` on the chat API imported before). In Docker the command runs
by ``docker exec`` in one long-lived container of the sandbox image with the task limits, so
container start is not counted.

Then, on this host, the best of N fresh ``python -m harnessopt`` runs of ``run WS --dry-run``
(run's start-up: config, workspace, ledger, projection) and ``log WS`` on a new demo workspace,
and ``run --dry-run`` again with ``import anthropic`` first: what its start-up cost while
``harnessopt.round.services`` imported the SDK at module import.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "workspace_templates"
# Loads a template's run.py under another name (its main guard keeps the task from running).
LOAD = "src = {src!r}\nexec(compile(src, 'run.py', 'exec'), {{'__name__': 'template'}})"
CLIENTS = {
    "bare interpreter": "pass",
    "stdlib template chat": LOAD.format(src=(TEMPLATES / "chat" / "run.py").read_text()),
    "stdlib template openai-chat": LOAD.format(src=(TEMPLATES / "openai-chat" / "run.py").read_text()),
    "stdlib template tool-agent": LOAD.format(src=(TEMPLATES / "tool-agent" / "run.py").read_text()),
    "anthropic SDK (chat-sdk)": "import anthropic; anthropic.Anthropic(api_key='x', base_url='http://127.0.0.1:9')",
    "openai SDK (openai-chat-sdk)": "import openai; openai.OpenAI(api_key='x', base_url='http://127.0.0.1:9/v1')",
}
# Prints the child's own CPU seconds, measured by the child around the import.
PROBE = (
    "import os, time; t = time.perf_counter(); c = os.times()\n{code}\n"
    "d = os.times(); print(time.perf_counter() - t, d.user - c.user + d.system - c.system)"
)
IMAGE = "harnessopt-sandbox:latest"
# `harnessopt ARGS` in a fresh interpreter, the anthropic SDK imported first (the old start-up).
WITH_SDK = "import sys, anthropic, runpy; sys.argv = ['harnessopt', *sys.argv[1:]]; runpy.run_module('harnessopt', run_name='__main__')"


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


def start_container() -> str:
    """A long-lived container of the sandbox image with the task limits; its name."""
    name = f"ho-bench-import-{os.getpid()}"
    limits = ["--network", "none", "--read-only", "--tmpfs", "/tmp", "--user", "65534:65534"]
    limits += ["--cpus", "1", "--memory", "512m"]
    env = ["-e", "PYTHONPATH=/opt/ho/site", "-e", "PYTHONDONTWRITEBYTECODE=1"]
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--label", "harnessopt.bench=1", *limits, *env]
        + ["--entrypoint", "sleep", IMAGE, "3600"],
        check=True,
        capture_output=True,
    )
    return name


def best_of(argv: list[str], n: int) -> float:
    """Best wall time of ``argv`` over n runs; exits on a failure."""
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv[-3:])} failed: {r.stderr.strip()[-500:]}")
    return best


def startup(n: int) -> None:
    """harnessopt run --dry-run / log on a fresh demo workspace, and run with the SDK imported first."""
    sys.path.insert(0, str(ROOT))
    from harnessopt.commands.demo import DEMO_DATA, demo_config

    def _local_config() -> Any:  # its optimizer may run on this host: the dry run refuses one without that
        cfg = demo_config("local")
        return cfg.model_copy(update={"optimizer": cfg.optimizer.model_copy(update={"unsafe_host": True})})

    from harnessopt.workspace.core import init_workspace

    tmp = Path(tempfile.mkdtemp(prefix="ho-bench-startup-"))
    try:
        ws = tmp / "ws"
        init_workspace(
            ws,
            DEMO_DATA / "skill",
            DEMO_DATA / "tasks.jsonl",
            config=_local_config(),
            extra_files={"scripted_model.yaml": DEMO_DATA / "model.yaml"},
            announce=lambda _m: None,
        )
        print(f"harnessopt start-up on a new demo workspace: best of {n} fresh interpreters, wall s")
        rows = [
            ("run --dry-run", [sys.executable, "-m", "harnessopt", "run", str(ws), "--dry-run"]),
            (
                "run --dry-run, anthropic imported first",
                [sys.executable, "-c", WITH_SDK, "run", str(ws), "--dry-run"],
            ),
            ("log", [sys.executable, "-m", "harnessopt", "log", str(ws)]),
        ]
        for label, argv in rows:
            print(f"  {label:42} {best_of(argv, n):6.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--no-docker", action="store_true", help="host rows only")
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]} at the start")
    print(
        f"client_import: median of {a.n} fresh interpreters; wall s of the command / wall s of the import / CPU s of the import"
    )
    name = None if a.no_docker else start_container()
    try:
        places = [("host", [sys.executable, "-c"])]
        if name:
            places.insert(0, ("docker exec", ["docker", "exec", name, "python3", "-c"]))
        for where, prefix in places:
            for label, code in CLIENTS.items():
                w, i, c = run([*prefix, PROBE.format(code=code)], a.n)
                print(f"  {where:11} {label:29} {w:6.3f} {i:6.3f} {c:6.3f}")
    finally:
        if name:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    startup(a.n)
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
