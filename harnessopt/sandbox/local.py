"""LocalSandbox: a subprocess per task, for machines without Docker. Weaker isolation.

What it does: private copies of skill/harness in a temp dir (the workspace is never touched), a
scrubbed environment (nothing from the host but PATH and LANG: no real API key), its own session
(so the timeout kills the whole process group), rlimits (address space, file size, CPU time, no
core files), capped stdout/stderr. What it cannot do: hide the host file system or the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harnessopt.config import RolloutConfig
from harnessopt.protocols import RunOutput, RunSpec
from harnessopt.textutil import head_tail_of_file

KILL_GRACE_S = 2.0


class LocalSandbox:
    """Runs ``python harness/run.py`` in a subprocess with limits; thread-safe."""

    name = "local"

    def __init__(self, cfg: RolloutConfig):
        self.cfg = cfg
        self._live: set[int] = set()  # process groups of running tasks, killed by close()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        """Run the harness on ``spec.task``; its ``--out`` directory is ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ho-local-") as tmp:
            root = Path(tmp)
            shutil.copytree(spec.skill_dir, root / "skill", ignore=shutil.ignore_patterns(".git"))
            shutil.copytree(spec.harness_dir, root / "harness", ignore=shutil.ignore_patterns(".git"))
            (root / "task.json").write_text(json.dumps(spec.task))
            (root / "home").mkdir()
            argv = [
                sys.executable,
                str(root / "harness" / "run.py"),
                "--task",
                str(root / "task.json"),
                "--skill",
                str(root / "skill"),
                "--out",
                str(out_dir.resolve()),
            ]
            stdout_p, stderr_p = root / "stdout.log", root / "stderr.log"
            t0 = time.monotonic()
            with stdout_p.open("wb") as so, stderr_p.open("wb") as se:
                proc = subprocess.Popen(
                    argv,
                    cwd=root,
                    env=self._env(spec, root),
                    stdin=subprocess.DEVNULL,
                    stdout=so,
                    stderr=se,
                    start_new_session=True,
                    preexec_fn=self._limits,
                )
                with self._lock:
                    self._live.add(proc.pid)
                    closed = self._closed
                if closed:  # close() ran while this task was starting: do not let it run on
                    _kill_group(proc.pid)
                try:
                    timed_out = _wait_or_kill_group(proc, spec.timeout_s)
                finally:
                    with self._lock:
                        self._live.discard(proc.pid)
            wall = time.monotonic() - t0
            cap = self.cfg.output_cap_kb * 1024
            return self._output(proc.returncode, timed_out, wall, out_dir, stdout_p, stderr_p, cap)

    def close(self) -> None:
        """Kill the process groups of tasks still running (Ctrl-C, a crash): nothing outlives the run."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for pgid in live:
            _kill_group(pgid)

    def _env(self, spec: RunSpec, root: Path) -> dict[str, str]:
        # Built from nothing: the host's ANTHROPIC_API_KEY and the rest of its environment stay out.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root / "home"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(root / "home"),
        }
        env.update(spec.env)
        env["ANTHROPIC_BASE_URL"] = spec.gateway.base_url
        env["ANTHROPIC_API_KEY"] = spec.gateway.token
        return env

    def _limits(self) -> None:
        """In the child before exec: rlimits (the process group comes from start_new_session)."""
        mem = self.cfg.memory_mb * 1024 * 1024
        fsize = self.cfg.out_mb * 1024 * 1024
        # CPU seconds: the wall limit bounds it anyway; this stops a spinning orphan.
        cpu = int(max(self.cfg.timeout_s, 1) * 2) + 5
        for which, value in (
            (resource.RLIMIT_AS, mem),
            (resource.RLIMIT_FSIZE, fsize),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_CORE, 0),
        ):
            with contextlib.suppress(ValueError, OSError):  # a lower hard limit already applies
                resource.setrlimit(which, (value, value))

    def _output(
        self,
        code: int | None,
        timed_out: bool,
        wall: float,
        out_dir: Path,
        stdout_p: Path,
        stderr_p: Path,
        cap: int,
    ) -> RunOutput:
        fsize = self.cfg.out_mb * 1024 * 1024
        sizes = [p.stat().st_size for p in out_dir.rglob("*") if p.is_file() and not p.is_symlink()]
        sizes += [stdout_p.stat().st_size, stderr_p.stat().st_size]
        # RLIMIT_FSIZE stops each file at the cap (Python gets EFBIG, others SIGXFSZ); the total is
        # only checked afterwards, the local sandbox cannot bound it.
        capped = code == -signal.SIGXFSZ or max(sizes) >= fsize or sum(sizes) > fsize
        if timed_out:
            error, note, code = "timeout", f"killed after the {wall:.0f}s wall-clock limit", None
        elif capped:
            error, note = "output_cap", f"output cap hit ({self.cfg.out_mb} MB per file or in total)"
        elif code != 0:
            error, note = "crash", f"harness exited with code {code}"
        else:
            error, note = None, ""
        notes = ["local sandbox: no file-system or network isolation"] + ([note] if note else [])
        return RunOutput(
            code,
            wall,
            out_dir,
            head_tail_of_file(stdout_p, cap).rstrip("\n"),
            head_tail_of_file(stderr_p, cap),
            error,
            notes,
        )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait_or_kill_group(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the harness; on timeout kill its whole process group. Returns timed_out."""
    try:
        proc.wait(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    # Also when it exited in time: background processes it left behind must not outlive the task.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if sig == signal.SIGTERM:
            time.sleep(0.05 if not timed_out else 0.2)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)
    return timed_out
