"""DockerSandbox: one fresh, locked-down container per task, started ahead of time by a pool.

What a task container gets (see ``pool.container_kwargs``): no network, read-only root, memory
(no swap), CPU and pids limits, no capabilities, no-new-privileges, uid 65534, a size-capped tmpfs
``/out`` and ``/tmp``, its private slot (the task without its answer; ``skill`` and ``harness``
linking to the candidate's one prepared copy, bind-mounted read-only at ``/ho-cand``) read-only
at ``/ho``, and the gateway socket's directory read-only at ``/ho-gw``. The host enforces the
wall-clock limit, caps stdout/stderr while reading them, and always removes the container.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import RunOutput, RunSpec, Sandbox
from harnessopt.sandbox import untar
from harnessopt.sandbox.docker.capture import HeadTail
from harnessopt.sandbox.docker.pool import (
    CANDIDATES_DIR,
    CONTAINER_GID,
    GATEWAY_DIR,
    TASK_ENV,
    Warm,
    WarmPool,
)
from harnessopt.sandbox.docker.shell import OPTIMIZER_UID, DockerShell
from harnessopt.sandbox.image.build import docker_image_id
from harnessopt.sandbox.prepared import PreparedCopies
from harnessopt.util import interrupts

__all__ = ["DockerSandbox", "DockerShell"]

STOP_GRACE_S = 5.0  # after SIGUSR1, time for the runner to send /out before a hard kill
FLOOD_FACTOR = 16  # stdout+stderr past this many times the cap counts as flooding: stop the task
OUT_MAX_FILES = 10_000  # members of /out unpacked on the host; more is output_cap
FRAME_HEADER = 5  # the runner's frames: kind byte (O, E, M, T, Z), 4-byte big-endian length
FRAME_MAX = 1 << 20  # the runner sends at most 64 KiB per frame; anything bigger is not the runner
READ_SLICE_S = 0.2  # the attach stream's reads return to Python this often (see _frames)


def warm_pool_size(concurrency: int) -> int:
    """Containers the pool keeps started: ``2 * concurrency + 2``. Tasks that crash at once come in
    bursts (a smoke test's runs, then each crash's rerun): with only ``concurrency`` ready, the
    burst waits for container starts (benchmarks/broken_candidate.py --pool compares sizes). An
    idle one holds a runner and a warm interpreter."""
    return 2 * concurrency + 2


@dataclass
class _Stream:
    """What came back on one task's attach stream."""

    stdout: HeadTail
    stderr: HeadTail
    meta: dict[str, Any] | None = None
    tar: bytearray = field(default_factory=bytearray)
    tar_overflow: bool = False
    flooded: bool = False
    broken: str | None = None  # the attach stream did not follow the runner's framing
    ended: bool = False  # the runner's end frame came: all it sends has arrived


class DockerSandbox(Sandbox):
    """Runs each task in a fresh container; thread-safe; ``close()`` removes everything it made."""

    name = "docker"
    shell_isolated = True  # the optimizer's shell and agent run in a container, not on this host
    gateway_uids = (OPTIMIZER_UID,)  # besides the tasks' 65534: the optimizer container's uid

    def __init__(
        self, cfg: RolloutConfig, client: Any, *, run_id: str | None = None, warm: int | None = None
    ):
        self.cfg = cfg
        self.client = client
        self.description = f"docker ({cfg.image}), a fresh container per task, no network"
        self.run_id = run_id or secrets.token_hex(6)
        self.copies = PreparedCopies(_copy_readable, skip=("__pycache__", ".git"), group=CONTAINER_GID)
        size = warm_pool_size(cfg.concurrency) if warm is None else warm
        self.pool = WarmPool(client, cfg, self.run_id, size, {str(self.copies.root): CANDIDATES_DIR})

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
            with self.copies.use(spec.skill_dir, spec.harness_dir) as copy:  # kept until the task ends
                job = self._write_slot(warm, spec, copy.name)
                t0 = time.monotonic()
                _send_stdin(warm.sock, job)  # the runner's go: the job never touches the disk
                stream, timed_out = self._collect(warm, spec.timeout_s)
            wall = time.monotonic() - t0
            meta = stream.meta or {}
            clean = not timed_out and meta.get("exit_code") == 0
            # Only a failed task needs the engine's word on OOM (a harness whose child the kernel
            # killed for memory exits with a code of its own): skip two API calls otherwise.
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

    @property
    def identity(self) -> str:
        """``docker:IMAGE@sha256:...``: the image by name and by the engine's id of it."""
        return f"docker:{self.cfg.image}@{docker_image_id(self.client, self.cfg.image)}"

    def prewarm(self, socket_dir: str | None) -> None:
        """Start the pool's containers for the gateway at ``socket_dir`` while the run sets up:
        the first tasks then find them started, as later ones do."""
        self.pool.prewarm(socket_dir)

    def shell(self, view: Path) -> DockerShell:
        """The optimizer's bash in its own container: no network, only ``view`` mounted (at /view)."""
        return DockerShell(view, self.cfg, client=self.client)

    def close(self) -> None:
        """Remove the warm and finished containers of this sandbox, then the candidates' copies."""
        self.pool.close()
        self.copies.close()

    def _write_slot(self, warm: Warm, spec: RunSpec, copy: str) -> bytes:
        """The task into the slot, ``skill`` and ``harness`` linked to the candidate's read-only
        copy ``copy`` (under /ho-cand); returns the job line for the runner's stdin.

        The job carries the run's token, so it is never written to a file (see docs/sandbox.md).
        """
        slot = warm.slot
        for part in ("skill", "harness"):
            os.symlink(f"{CANDIDATES_DIR}/{copy}/{part}", slot / part)
        (slot / "task.json").write_text(json.dumps(spec.task))
        (slot / "task.json").chmod(0o644)
        env = {
            **TASK_ENV,  # what the warm interpreter started with
            **dict(spec.env),
            "ANTHROPIC_API_KEY": spec.gateway.token,
            "ANTHROPIC_BASE_URL": spec.gateway.base_url,
            "OPENAI_API_KEY": spec.gateway.token,  # the same gateway speaks the Chat Completions API
            "OPENAI_BASE_URL": spec.gateway.base_url + "/v1",
        }
        sock = spec.gateway.socket_path
        job = {"env": env, "socket": f"{GATEWAY_DIR}/{sock.name}" if sock else None}
        return json.dumps(job).encode() + b"\n"  # ASCII only: no byte docker could read as a key

    def _collect(self, warm: Warm, timeout_s: float) -> tuple[_Stream, bool]:
        """Read the runner's frames until it exits; stop it at the deadline or on a flood."""
        cap = self.cfg.output_cap_kb * 1024
        st = _Stream(HeadTail(cap), HeadTail(cap))
        stopper = _Stopper(warm.container)
        timer = threading.Timer(timeout_s, stopper.stop, kwargs={"reason": "timeout"})
        timer.daemon = True
        timer.start()
        buf = bytearray()  # stdout bytes not yet parsed into whole frames
        tar_cap = self.cfg.out_mb * 1024 * 1024 + (1 << 20)
        try:
            for stream_id, data in _frames(warm.sock):
                if stream_id != 1:  # the runner's own stderr (a crash of the runner itself)
                    st.stderr.add(data)
                    continue
                buf += data
                if not self._take_frames(st, buf, tar_cap):
                    break  # the end, a broken stream or /out past its cap: discard removes the container
                if st.stdout.total + st.stderr.total > FLOOD_FACTOR * cap and not st.flooded:
                    st.flooded = True
                    stopper.stop(reason="flood")
        finally:
            timer.cancel()
            stopper.finish()
        return st, stopper.reason == "timeout"

    @staticmethod
    def _take_frames(st: _Stream, buf: bytearray, tar_cap: int) -> bool:
        """Consume the whole frames at the start of ``buf``; False when reading should stop."""
        at = 0
        try:
            while len(buf) - at >= FRAME_HEADER:
                kind, size = buf[at : at + 1], int.from_bytes(buf[at + 1 : at + FRAME_HEADER], "big")
                if kind not in b"OEMTZ" or size > FRAME_MAX:
                    st.broken = f"bad frame header {bytes(buf[at : at + FRAME_HEADER])!r}"
                    return False
                if len(buf) - at - FRAME_HEADER < size:
                    break  # the rest of this frame has not arrived yet
                payload = bytes(buf[at + FRAME_HEADER : at + FRAME_HEADER + size])
                at += FRAME_HEADER + size
                if kind == b"Z":  # the runner's last frame (an older runner just closes the stream)
                    st.ended = True
                    return False
                if kind == b"O":
                    st.stdout.add(payload)
                elif kind == b"E":
                    st.stderr.add(payload)
                elif kind == b"M":
                    st.meta = json.loads(payload)
                elif len(st.tar) + size > tar_cap:
                    st.tar_overflow = True
                    return False
                else:
                    st.tar += payload
            return True
        except ValueError as e:
            st.broken = f"bad meta frame ({e})"
            return False
        finally:
            del buf[:at]

    def _output(
        self, st: _Stream, timed_out: bool, state: dict[str, Any], wall: float, out_dir: Path
    ) -> RunOutput:
        meta = st.meta or {}
        unpacked = _extract(st.tar, out_dir, self.cfg.out_mb * 1024 * 1024)
        notes = unpacked.notes("/out/")
        if meta.get("too_big_count"):
            names = ", ".join(f"/out/{n}" for n in meta.get("too_big", []))
            notes.append(f"{meta['too_big_count']} file(s) larger than /out itself, not collected: {names}")
        capped = st.tar_overflow or meta.get("out_full") or meta.get("too_big_count") or unpacked.over_cap
        exit_code = meta.get("exit_code") if st.meta and not meta.get("stopped") else None
        oom = bool(state.get("OOMKilled"))
        if timed_out:
            error, why = "timeout", f"killed after the {wall:.0f}s wall-clock limit"
        elif oom:
            error, why = "oom", f"memory limit of {self.cfg.memory_mb} MB hit"
        elif st.broken:
            error, why = "sandbox_error", f"the runner's stream is broken: {st.broken}"
        elif st.flooded or capped:
            error, why = "output_cap", "output cap hit (stdout/stderr flood, or /out full or too big)"
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


def _extract(data: bytearray, out_dir: Path, limit: int) -> untar.UntarResult:
    """Unpack the runner's tar of /out: regular files and directories only, bounded size and count."""
    return untar.extract(bytes(data), out_dir, max_bytes=limit, max_members=OUT_MAX_FILES)


def _send_stdin(sock: Any, data: bytes) -> None:
    """Write to the container's stdin through the attach socket (a SocketIO, or the socket itself)."""
    getattr(sock, "_sock", sock).sendall(data)


def _frames(sock: Any) -> Iterator[tuple[int, bytes]]:
    """The attach stream's (stream id, bytes) frames until it closes, as docker's ``frames_iter``
    (no tty), but each read waits at most ``READ_SLICE_S``: a Ray cancel is
    ``_thread.interrupt_main()``, no signal, and its KeyboardInterrupt comes only when this thread
    runs Python again; docker's reader blocks in poll() until the container writes or exits."""
    raw = getattr(sock, "_sock", sock)  # the socket itself: a SocketIO is unusable after a timeout
    raw.settimeout(READ_SLICE_S)

    def read(n: int) -> bytes:
        while True:
            try:
                return bytes(raw.recv(min(n, 1 << 16)))
            except (TimeoutError, InterruptedError, BlockingIOError):
                # nothing yet: back in Python, where a pending interrupt is raised, and one a
                # finalizer swallowed since is raised again (with ``interrupts.install``)
                interrupts.check_on_main()

    while True:
        header = b""
        while len(header) < 8:
            data = read(8 - len(header))
            if not data:
                return  # closed (mid-header too, as docker's reader does)
            header += data
        stream_id, n = header[0], int.from_bytes(header[4:8], "big")
        while n > 0:
            data = read(n)
            if not data:
                return
            n -= len(data)
            yield stream_id, data


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
