"""In-image runner: PID 1 of every harnessopt task container (stdlib only, Python 3.11).

``runner.py task`` waits (the container is pre-started by the host's pool) until the host writes
``/ho/go`` into the container's read-only slot mount, then:

1. bridges a loopback TCP port to the model gateway's Unix socket (the container has no network),
2. runs ``python3 /ho/harness/run.py --task /ho/task.json --skill /ho/skill --out /out`` with
   ANTHROPIC_BASE_URL=http://127.0.0.1:PORT and the per-run token, its stdout/stderr being the
   container's (the host caps them),
3. kills every leftover process (as PID 1, ``kill(-1)`` reaches all of them),
4. writes a marker line and a tar of /out to stdout, so the host gets /out (a tmpfs that vanishes
   with the container) without ``docker cp``; then exits.

SIGUSR1 from the host (its wall-clock timeout) stops the harness early but still sends /out.

``runner.py shell --timeout T --cap N -- CMD`` runs one optimizer bash command in its own session,
caps its output and kills the whole group on timeout (used by DockerShell through exec).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time

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


def prefer_oom_kill() -> None:
    """In the harness child: make it, not the runner, the OOM killer's first choice."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


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


def send_out(nonce: str, exit_code: int | None, stopped: bool) -> None:
    """Marker line, then a tar of /out, on stdout (the host's attach stream)."""
    meta = {"exit_code": exit_code, "stopped": stopped, "out_full": out_full()}
    out = sys.stdout.buffer
    out.write(b"\n" + f"@@HO-OUT {nonce} {json.dumps(meta)}@@".encode() + b"\n")
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name in sorted(os.listdir(OUT)):
            with contextlib.suppress(OSError):
                tar.add(os.path.join(OUT, name), arcname=name)
    out.flush()


def wait_for_go() -> dict:
    go = os.path.join(SLOT, "go")
    while not os.path.exists(go):
        if STOP.wait(0.005):
            return {}
    with open(os.path.join(SLOT, "run.json")) as f:
        return json.load(f)


def run_task() -> int:
    signal.signal(signal.SIGUSR1, lambda *_: STOP.set())
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
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
    try:
        proc = subprocess.Popen(
            argv,
            cwd="/tmp",
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=prefer_oom_kill,
        )
    except OSError as e:
        print(f"harnessopt runner: cannot start the harness: {e}", file=sys.stderr, flush=True)
        exit_code = 127
    else:
        if listener is not None:
            bridge(listener, job["socket"])
        while (exit_code := proc.poll()) is None and not STOP.wait(0.01):
            pass
    sys.stderr.flush()
    kill_all_others()
    if exit_code is None:
        exit_code = proc.poll()
    send_out(job["nonce"], exit_code, STOP.is_set())
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
