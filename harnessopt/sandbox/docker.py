"""DockerSandbox: one fresh, locked-down container per task, started ahead of time by a pool.

What a task container gets (see ``pool.container_kwargs``): no network, read-only root, memory
(no swap), CPU and pids limits, no capabilities, no-new-privileges, uid 65534, a size-capped tmpfs
``/out`` and ``/tmp``, its private slot (task without answer, skill and harness copies) read-only at
``/ho``, and the gateway socket's directory read-only at ``/ho-gw``. The host enforces the
wall-clock limit, caps stdout/stderr while reading them, and always removes the container.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.utils.socket import frames_iter

from harnessopt.config import RolloutConfig
from harnessopt.protocols import RunOutput, RunSpec
from harnessopt.sandbox.capture import HeadTail
from harnessopt.sandbox.pool import GATEWAY_DIR, Warm, WarmPool
from harnessopt.sandbox.shell import DockerShell

__all__ = ["DockerSandbox", "DockerShell"]

STOP_GRACE_S = 5.0  # after SIGUSR1, time for the runner to send /out before a hard kill
FLOOD_FACTOR = 16  # stdout+stderr past this many times the cap counts as flooding: stop the task


@dataclass
class _Stream:
    """What came back on one task's attach stream."""

    stdout: HeadTail
    stderr: HeadTail
    meta: dict[str, Any] | None = None
    tar: bytearray = field(default_factory=bytearray)
    tar_overflow: bool = False
    flooded: bool = False


class DockerSandbox:
    """Runs each task in a fresh container; thread-safe; ``close()`` removes everything it made."""

    name = "docker"

    def __init__(
        self, cfg: RolloutConfig, client: Any, *, run_id: str | None = None, warm: int | None = None
    ):
        self.cfg = cfg
        self.client = client
        self.description = f"docker ({cfg.image}), a fresh container per task, no network"
        self.run_id = run_id or secrets.token_hex(6)
        self.pool = WarmPool(client, cfg, self.run_id, cfg.concurrency if warm is None else warm)

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        """Run ``harness/run.py`` on ``spec.task`` in a fresh container; /out lands in ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        lease = spec.gateway
        socket_dir = str(lease.socket_path.parent) if lease.socket_path else None
        t0 = time.monotonic()
        try:
            warm = self.pool.take(socket_dir)
        except Exception as e:
            return RunOutput(
                None,
                time.monotonic() - t0,
                out_dir,
                error_class="sandbox_error",
                stderr_tail=f"could not start a container: {e}",
            )
        try:
            nonce = secrets.token_hex(8)
            self._write_slot(warm, spec, nonce)
            t0 = time.monotonic()
            (warm.slot / "go").touch()
            stream, timed_out = self._collect(warm, nonce, spec.timeout_s)
            wall = time.monotonic() - t0
            meta = stream.meta or {}
            clean = not timed_out and meta.get("exit_code") is not None and meta["exit_code"] >= 0
            # Only a signal death needs the engine's word on OOM: skip two API calls otherwise.
            state = {} if clean else _final_state(warm.container)
            return self._output(stream, timed_out, state, wall, out_dir)
        except Exception as e:  # the engine failed us mid-task: a sandbox error, not a harness crash
            return RunOutput(
                None,
                time.monotonic() - t0,
                out_dir,
                error_class="sandbox_error",
                stderr_tail=f"{type(e).__name__}: {e}",
            )
        finally:
            self.pool.discard(warm)

    def shell(self, view: Path) -> DockerShell:
        """The optimizer's bash in its own container: no network, only ``view`` mounted (at /view)."""
        return DockerShell(view, self.cfg, client=self.client)

    def close(self) -> None:
        """Remove the warm and finished containers of this sandbox."""
        self.pool.close()

    def _write_slot(self, warm: Warm, spec: RunSpec, nonce: str) -> None:
        slot = warm.slot
        _copy_readable(spec.skill_dir, slot / "skill")
        _copy_readable(spec.harness_dir, slot / "harness")
        (slot / "task.json").write_text(json.dumps(spec.task))
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONPATH": "/opt/ho/site",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **dict(spec.env),
            "ANTHROPIC_API_KEY": spec.gateway.token,
            "ANTHROPIC_BASE_URL": spec.gateway.base_url,
        }
        sock = spec.gateway.socket_path
        job = {"env": env, "nonce": nonce, "socket": f"{GATEWAY_DIR}/{sock.name}" if sock else None}
        (slot / "run.json").write_text(json.dumps(job))
        for p in (slot / "task.json", slot / "run.json"):
            p.chmod(0o644)

    def _collect(self, warm: Warm, nonce: str, timeout_s: float) -> tuple[_Stream, bool]:
        """Read the attach stream until the runner exits; stop it at the deadline or on a flood."""
        cap = self.cfg.output_cap_kb * 1024
        st = _Stream(HeadTail(cap), HeadTail(cap))
        stopper = _Stopper(warm.container)
        timer = threading.Timer(timeout_s, stopper.stop, kwargs={"reason": "timeout"})
        timer.daemon = True
        timer.start()
        marker = f"\n@@HO-OUT {nonce} ".encode()
        pending = b""  # stdout bytes that may hold the start of the marker
        tar_cap = self.cfg.out_mb * 1024 * 1024 + (1 << 20)
        try:
            for stream_id, data in frames_iter(warm.sock, tty=False):
                if st.meta is not None:  # after the marker line: the tar of /out
                    if len(st.tar) + len(data) > tar_cap:
                        st.tar_overflow = True
                    else:
                        st.tar += data
                    continue
                if stream_id == 2:
                    st.stderr.add(data)
                else:
                    pending = self._scan_stdout(st, pending + data, marker)
                if st.stdout.total + st.stderr.total > FLOOD_FACTOR * cap and not st.flooded:
                    st.flooded = True
                    stopper.stop(reason="flood")
        finally:
            timer.cancel()
            stopper.finish()
        return st, stopper.reason == "timeout"

    @staticmethod
    def _scan_stdout(st: _Stream, buf: bytes, marker: bytes) -> bytes:
        at = buf.find(marker)
        if at < 0:
            keep = len(marker) + 512
            st.stdout.add(buf[:-keep] if len(buf) > keep else b"")
            return buf[-keep:] if len(buf) > keep else buf
        st.stdout.add(buf[:at])
        rest = buf[at + len(marker) :]
        end = rest.find(b"@@\n")
        if end < 0:
            return buf  # marker line not complete yet
        st.meta = json.loads(rest[:end])
        st.tar += rest[end + 3 :]
        return b""

    def _output(
        self, st: _Stream, timed_out: bool, state: dict[str, Any], wall: float, out_dir: Path
    ) -> RunOutput:
        notes: list[str] = []
        meta = st.meta or {}
        if st.tar:
            notes += _extract(bytes(st.tar), out_dir, self.cfg.out_mb * 1024 * 1024)
        exit_code = meta.get("exit_code") if st.meta and not meta.get("stopped") else None
        oom = bool(state.get("OOMKilled"))
        if timed_out:
            error, why = "timeout", f"killed after the {wall:.0f}s wall-clock limit"
        elif oom:
            error, why = "oom", f"memory limit of {self.cfg.memory_mb} MB hit"
        elif st.flooded or st.tar_overflow or meta.get("out_full"):
            error, why = "output_cap", "output cap hit (stdout/stderr flood or /out full)"
        elif st.meta is None:
            error, why = (
                "sandbox_error",
                f"runner ended without reporting (container exit {state.get('ExitCode')})",
            )
        elif exit_code != 0:
            error, why = "crash", f"harness exited with code {exit_code}"
        else:
            error, why = None, ""
        if why:
            notes.insert(0, why)
        return RunOutput(
            exit_code, wall, out_dir, st.stdout.text().rstrip("\n"), st.stderr.text(), error, notes
        )


class _Stopper:
    """Stops a running task once: SIGUSR1 (the runner kills the harness and sends /out), then SIGKILL."""

    def __init__(self, container: Any):
        self.container = container
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._hard: threading.Timer | None = None

    def stop(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            with contextlib.suppress(Exception):
                self.container.kill(signal="SIGUSR1")
            self._hard = threading.Timer(STOP_GRACE_S, self._kill)
            self._hard.daemon = True
            self._hard.start()

    def _kill(self) -> None:
        with contextlib.suppress(Exception):
            self.container.kill()

    def finish(self) -> None:
        with self._lock:
            self.reason = self.reason or "done"
            if self._hard is not None:
                self._hard.cancel()


def _final_state(container: Any) -> dict[str, Any]:
    """Wait briefly for the runner's exit and return the container's State."""
    with contextlib.suppress(Exception):
        container.wait(timeout=10)
    with contextlib.suppress(Exception):
        container.reload()
        return dict(container.attrs.get("State", {}))
    return {}


def _extract(data: bytes, out_dir: Path, limit: int) -> list[str]:
    """Unpack the runner's tar of /out safely (no links out, no devices, bounded size)."""
    notes: list[str] = []
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
            for member in tar:
                total += max(member.size, 0)
                if total > limit:
                    notes.append("/out larger than its cap; the rest was not collected")
                    break
                try:
                    tar.extract(member, out_dir, filter="data")
                except (tarfile.FilterError, OSError) as e:
                    notes.append(f"skipped /out/{member.name}: {e}")
    except tarfile.TarError as e:
        notes.append(f"/out archive incomplete: {e}")
    return notes


def _copy_readable(src: Path, dest: Path) -> None:
    """Copy a directory so that uid 65534 can read it (the mount is read-only anyway)."""
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    for root, dirs, files in os.walk(dest):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)
