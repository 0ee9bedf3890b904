"""In-image runner: PID 1 of every harnessopt task container (stdlib only, Python 3.11).

``runner.py task`` makes itself non-dumpable (no process of the container may open
``/proc/1/fd/1``, read its memory or ptrace it), waits (the container is pre-started by the
host's pool) for its job: one JSON line on stdin, written by the host through the attach socket
(the run's token is never in a file), then:

1. bridges a loopback TCP port to the model gateway's Unix socket (the container has no network),
2. runs ``python3 /ho/harness/run.py --task /ho/task.json --skill /ho/skill --out /out`` with
   ANTHROPIC_BASE_URL=http://127.0.0.1:PORT and the per-run token, its stdout and stderr being
   pipes that the runner reads,
3. kills every leftover process (as PID 1, ``kill(-1)`` reaches all of them),
4. sends a meta frame (exit code) and a tar of /out (a tmpfs that vanishes with the container).

Everything on the container's stdout is a frame written by the runner alone: one kind byte
(``O`` harness stdout, ``E`` harness stderr, ``M`` meta JSON, ``T`` tar bytes), a 4-byte
big-endian length, the payload. The harness never holds the attach stream, so it cannot forge
the end of its task or the archive; its output is payload inside ``O``/``E`` frames.

SIGUSR1 from the host (its wall-clock timeout) stops the harness early but still sends /out.

``runner.py shell --timeout T --cap N -- CMD`` runs one optimizer bash command in its own session,
caps its output and kills the whole group on timeout (used by DockerShell through exec).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import time
from typing import IO, Any

SLOT = "/ho"
OUT = "/out"
STOP = threading.Event()


def bridge(listener: socket.socket, unix_path: str) -> None:
    """Pipe each connection to ``listener`` (127.0.0.1) to the gateway's Unix socket."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def accept_loop() -> None:
        while True:
            client, _ = listener.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(unix_path)
            except OSError:
                client.close()
                continue
            threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()


FRAME_MAX = 1 << 16  # payload bytes per frame on the attach stream
JOB_MAX = 1 << 20  # bytes of the job line on stdin
_SEND = threading.Lock()
_LIBC: list = []  # libc through ctypes, loaded by not_dumpable() before any fork


def not_dumpable() -> None:
    """PR_SET_DUMPABLE 0, or refuse to run a task: the attach stream is PID 1's stdout, and a
    dumpable PID 1 lets any process of the same uid open ``/proc/1/fd/1``, its memory, or ptrace it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    _LIBC.append(libc)


def prefer_oom_kill() -> None:
    """In the harness child, before exec: make it, not the runner, the OOM killer's first choice."""
    try:
        _LIBC[0].prctl(4, 1, 0, 0, 0)  # /proc/self is ours again (exec would do it anyway)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except (OSError, IndexError):
        pass


def send(kind: bytes, payload: bytes = b"") -> None:
    """Frames on stdout (the host's attach stream): kind byte, 4-byte big-endian length, payload."""
    with _SEND:
        for at in range(0, max(len(payload), 1), FRAME_MAX):
            chunk = payload[at : at + FRAME_MAX]
            data = memoryview(kind + len(chunk).to_bytes(4, "big") + chunk)
            while data:
                data = data[os.write(1, data) :]


def pump(stream: IO[bytes], kind: bytes) -> None:
    """Forward one of the harness's pipes as frames until every writer is gone."""
    fd = stream.fileno()
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, FRAME_MAX):
            send(kind, chunk)


class TarFrames(io.RawIOBase):
    """A write-only file for ``tarfile``: each write goes out as ``T`` frames."""

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        send(b"T", data)
        return len(data)


def kill_all_others() -> None:
    """Kill every process in the container but ourselves; reap until none are left."""
    for _ in range(200):
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # from PID 1: all processes of the namespace but init
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not [p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())]:
            return
        time.sleep(0.01)


def out_full() -> bool:
    st = os.statvfs(OUT)
    return st.f_bavail * st.f_frsize < 64 * 1024 or st.f_favail == 0


def out_members() -> tuple[list[tuple[str, str]], list[str]]:
    """Everything under /out, parents first, as (path, name in the archive); and the regular files
    that do not fit in what is left of /out's own size (sparse files), which are not sent."""
    st = os.statvfs(OUT)
    room = st.f_blocks * st.f_frsize
    keep: list[tuple[str, str]] = []
    too_big: list[str] = []
    for root, dirs, files in os.walk(OUT):
        dirs.sort()
        for name in dirs + sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, OUT)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                if info.st_size > room:
                    too_big.append(rel)
                    continue
                room -= info.st_size
            keep.append((path, rel))
    return keep, too_big


def send_out(exit_code: int | None, stopped: bool) -> None:
    """The meta frame, then a tar of /out in ``T`` frames; links and the like are the host's to skip."""
    members, too_big = out_members()
    meta = {
        "exit_code": exit_code,
        "stopped": stopped,
        "out_full": out_full(),
        "too_big": too_big[:20],
        "too_big_count": len(too_big),
    }
    send(b"M", json.dumps(meta).encode())
    with tarfile.open(fileobj=TarFrames(), mode="w|", bufsize=FRAME_MAX) as tar:
        for path, name in members:
            with contextlib.suppress(OSError):
                tar.add(path, arcname=name, recursive=False)


def wait_for_go() -> dict:
    """The job: one JSON line on stdin (env with the run's token, the gateway socket), or {}."""
    buf = b""
    while not buf.endswith(b"\n"):
        if STOP.is_set() or len(buf) > JOB_MAX:
            return {}
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            chunk = os.read(0, 65536)
            if not chunk:  # stdin closed: no job is coming
                return {}
            buf += chunk
    return json.loads(buf)


def run_task() -> int:
    signal.signal(signal.SIGUSR1, lambda *_: STOP.set())
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    not_dumpable()
    job = wait_for_go()
    if not job:
        return 3
    env = dict(job["env"])
    listener = None
    if job.get("socket"):  # bind before the harness starts, serve after (no threads across fork)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
    argv = [sys.executable, f"{SLOT}/harness/run.py", "--task", f"{SLOT}/task.json"]
    argv += ["--skill", f"{SLOT}/skill", "--out", OUT]
    exit_code: int | None = None
    pumps: list[threading.Thread] = []
    try:
        proc = subprocess.Popen(
            argv,
            cwd="/tmp",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,  # never our stdout: that is the attach stream
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=prefer_oom_kill,
        )
    except OSError as e:
        send(b"E", f"harnessopt runner: cannot start the harness: {e}\n".encode())
        exit_code = 127
    else:
        for stream, kind in ((proc.stdout, b"O"), (proc.stderr, b"E")):
            pumps.append(threading.Thread(target=pump, args=(stream, kind), daemon=True))
            pumps[-1].start()
        if listener is not None:
            bridge(listener, job["socket"])
        while (exit_code := proc.poll()) is None and not STOP.wait(0.01):
            pass
    kill_all_others()
    for t in pumps:  # every writer of the pipes is dead: they end at once
        t.join(5)
    if exit_code is None:
        exit_code = proc.poll()
    send_out(exit_code, STOP.is_set())
    return 0


def run_shell(args: list[str]) -> int:
    """``shell --timeout T --cap N -- CMD``: exit 124 on timeout (like coreutils timeout)."""
    timeout, cap = float(args[1]), int(args[3])
    command = args[5]
    proc = subprocess.Popen(
        ["/bin/bash", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    kept = bytearray()
    dropped = 0

    def read() -> None:
        nonlocal dropped
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            room = cap - len(kept)
            kept.extend(chunk[: max(room, 0)])
            dropped += max(len(chunk) - max(room, 0), 0)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = 124
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # background jobs of the command go too
    reader.join(1.0)
    sys.stdout.buffer.write(bytes(kept))
    if dropped:
        sys.stdout.buffer.write(f"\n[... {dropped} more bytes of output not shown ...]\n".encode())
    sys.stdout.flush()
    return code


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "shell":
        return run_shell(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "idle":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:  # DockerShell's container: PID 1 that only reaps, commands come by exec
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                time.sleep(1)
    return run_task()


if __name__ == "__main__":
    sys.exit(main())
