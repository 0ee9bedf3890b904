"""In-image runner: PID 1 of every harnessopt task container (stdlib only, Python 3.11).

``runner.py task`` makes itself non-dumpable (no process of the container may open
``/proc/1/fd/1``, read its memory or ptrace it), waits (the container is pre-started by the
host's pool) for its job: one JSON line on stdin, written by the host through the attach socket
(the run's token is never in a file), then:

1. bridges a loopback TCP port to the model gateway's Unix socket (the container has no network),
2. runs ``python3 /ho/harness/run.py --task /ho/task.json --skill /ho/skill --out /out`` with
   ANTHROPIC_BASE_URL=http://127.0.0.1:PORT and the per-run token, its stdout and stderr being
   pipes that the runner reads; with ``task --warm-env JSON`` that interpreter was started (as
   ``runner.py warm``) and warmed while the container waited, and the job only hands it the
   script (see ``run_warm``); if it is gone, a cold start as without the option,
3. kills every leftover process (as PID 1, ``kill(-1)`` reaches all of them),
4. sends a meta frame (exit code) and a tar of /out (a tmpfs that vanishes with the container).

Everything on the container's stdout is a frame written by the runner alone: one kind byte
(``O`` harness stdout, ``E`` harness stderr, ``M`` meta JSON, ``T`` tar bytes, ``Z`` the end: an
empty frame after the tar, so the host stops reading without waiting for the container's exit), a 4-byte
big-endian length, the payload. The harness never holds the attach stream, so it cannot forge
the end of its task or the archive; its output is payload inside ``O``/``E`` frames.

SIGUSR1 from the host (its wall-clock timeout) stops the harness early but still sends /out.

The optimizer's container (DockerShell) runs ``runner.py idle`` as PID 1 (reaps orphans, not
dumpable) and everything else by ``docker exec``:

* ``runner.py shell --timeout T --cap N [--fsize B --view DIR --view-growth B --view-files N] -- CMD``
  runs one bash command in its own session with a file-size limit, caps its output, stops it at
  the timeout or when the view grows too much, then kills every other process of the container;
* ``runner.py edit --root DIR`` does one editor operation (JSON on stdin and stdout) without ever
  following a link; the host's local shell runs the same mode on the host;
* ``runner.py agent --timeout T --cap N [...]`` runs a CLI agent (the ``command`` optimizer) with
  the job and its stdin on stdin, a loopback port bridged to the gateway's socket, and the same
  limits, timeout and sweep as ``shell``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
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
HOST_GONE = threading.Event()  # the run that held our stdin died: nothing is sent, the task just ends


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
    send(b"Z")  # nothing follows: the host need not wait ~40 ms for the attach stream to close


def wake_on_signals() -> int:
    """A pipe the interpreter writes a byte to whenever a signal with a handler arrives; returns its
    read end. A wait in ``select`` on it ends at the signal: a handler alone would not end it
    (Python runs the handler, then resumes the wait)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    return r


def wait_readable(fds: list[int], wake: int) -> list[int]:
    """Block until one of ``fds`` is readable or a signal arrives (``wake``); returns the readable
    ones of ``fds``. No polling: a waiting task costs no CPU."""
    ready, _, _ = select.select([*fds, wake], [], [])
    if wake in ready:
        with contextlib.suppress(OSError):  # BlockingIOError: another wait took the bytes first
            os.read(wake, 4096)
    return [fd for fd in ready if fd != wake]


def wait_for_go(wake: int) -> dict:
    """The job: one JSON line on stdin (env with the run's token, the gateway socket), or {}."""
    buf = b""
    while not buf.endswith(b"\n"):
        if STOP.is_set() or len(buf) > JOB_MAX:
            return {}
        if wait_readable([0], wake):
            chunk = os.read(0, 65536)
            if not chunk:  # stdin closed: no job is coming
                return {}
            buf += chunk
    return json.loads(buf)


def host_gone() -> bool:
    """Has the host closed our stdin (called when it is readable)? The run holds it through the
    attach socket for the task's whole life, so EOF there means the run died (SIGKILL, a crash):
    no one will read the task's output or stop it at its deadline. Bytes after the job are read
    and ignored."""
    try:
        return not os.read(0, 65536)
    except OSError:
        return True


def wait_exit(proc: subprocess.Popen, wake: int) -> int | None:
    """The harness's exit code once it exits, or None once a signal has set STOP (the host's
    timeout) or the host is gone (``HOST_GONE`` set: stdin closed). Blocks on a pidfd of the
    harness (readable at its exit), stdin and ``wake``; where the kernel or a seccomp profile
    refuses pidfd_open, polls every 10 ms instead."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = -1
    try:
        while (exit_code := proc.poll()) is None and not STOP.is_set():
            if pidfd >= 0:
                ready = wait_readable([pidfd, 0], wake)
            else:
                ready, _, _ = select.select([0], [], [], 0.01)
            if 0 in ready and host_gone():
                HOST_GONE.set()
                STOP.set()
        return exit_code
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def run_task(args: list[str]) -> int:
    """``task [--warm-env JSON]``: with ``--warm-env`` (the harness's static environment), a warm
    interpreter (``warm`` mode) is started at once and handed the job; without, a cold start."""
    signal.signal(signal.SIGUSR1, lambda *_: STOP.set())
    signal.signal(signal.SIGTERM, lambda *_: STOP.set())
    wake = wake_on_signals()  # before any wait: a signal from here on ends whichever wait is under way
    not_dumpable()
    opts, _ = _options(args)
    stub = None
    if "warm-env" in opts:
        with contextlib.suppress(OSError, ValueError):
            stub = spawn_warm(
                [sys.executable, os.path.abspath(__file__), "warm"],
                json.loads(opts["warm-env"]),
                cwd="/tmp",
                preexec=prefer_oom_kill,
            )
    job = wait_for_go(wake)
    if not job:
        return 3
    env = dict(job["env"])
    listener = None
    if job.get("socket"):  # bind before the harness starts, serve after (no threads across fork)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
        env["OPENAI_BASE_URL"] = env["ANTHROPIC_BASE_URL"] + "/v1"
    argv = [f"{SLOT}/harness/run.py", "--task", f"{SLOT}/task.json", "--skill", f"{SLOT}/skill", "--out", OUT]
    exit_code: int | None = None
    pumps: list[threading.Thread] = []
    try:
        proc = hand_job(stub, argv, env) if stub else None
        proc = proc or subprocess.Popen(  # no stub, or it died: today's cold start
            [sys.executable, *argv],
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
        exit_code = wait_exit(proc, wake)
    kill_all_others()
    for t in pumps:  # every writer of the pipes is dead: they end at once
        t.join(5)
    if exit_code is None:
        exit_code = proc.poll()
    if HOST_GONE.is_set():
        return 3  # no one reads the attach stream: the container just ends (as an unused one does)
    send_out(exit_code, STOP.is_set())
    return 0


# --------------------------------------------------------------------------- optimizer shell

FSIZE_DEFAULT = 64 << 20  # largest file one optimizer command may write (RLIMIT_FSIZE)
VIEW_GROWTH_DEFAULT = 256 << 20  # disk the view may grow by during one command
VIEW_FILES_DEFAULT = 20_000  # files and directories the view may hold
WATCH_EVERY_S = 0.05


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """``--name value`` pairs up to ``--``, then the rest."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        opts[args[i].lstrip("-")] = args[i + 1]
        i += 2
    return opts, args[i + 1 :]


def tree_usage(root: str, max_entries: int) -> tuple[int, int]:
    """(bytes of disk, entries) below ``root``, never following links; stops past ``max_entries``."""
    used, count, stack = 0, 0, [root]
    while stack and count <= max_entries:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    count += 1
                    with contextlib.suppress(OSError):
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
        except OSError:
            continue
    return used, count


def in_optimizer_container() -> bool:
    """True when PID 1 is this runner's ``idle`` mode, i.e. we are in DockerShell's container."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return f.read().split(b"\0")[-2:-1] == [b"idle"] and os.getpid() != 1
    except OSError:
        return False


def sweep_all_but_init() -> bool:
    """Kill every process of the container but PID 1 and ourselves; True once none is left."""
    if not in_optimizer_container():  # never kill(-1) anywhere else (the host!)
        return False
    me = str(os.getpid())
    for _ in range(500):
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process we may signal, except init and ourselves
        alive = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and pid not in ("1", me):
                with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as f:
                    if f.read().rsplit(b") ", 1)[-1][:1] != b"Z":  # zombies: PID 1 reaps them
                        alive.append(pid)
        if not alive:
            return True
        time.sleep(0.01)
    return False


def watch(
    proc: subprocess.Popen, timeout: float, view: str | None, growth: int, max_files: int, base: int
) -> tuple[int, str]:
    """Wait for ``proc``: (its exit code, ""), or 124 at the timeout, or 125 with a note once the
    view grew by more than ``growth`` bytes over ``base`` or holds more than ``max_files`` entries."""
    deadline = time.monotonic() + timeout
    while (code := proc.poll()) is None:
        if time.monotonic() >= deadline:
            return 124, ""
        if view:
            used, count = tree_usage(view, max_files)
            if used - base > growth or count > max_files:
                return (
                    125,
                    f"\n[stopped: the view may grow by {growth >> 20} MiB and hold {max_files} files]\n",
                )
        time.sleep(WATCH_EVERY_S)
    return code, ""


def end_all(proc: subprocess.Popen, code: int, note: str) -> tuple[int, str]:
    """Kill ``proc``'s group, then every other process of the container (not PID 1, not us)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # background jobs of the command go too
    if not sweep_all_but_init() and in_optimizer_container():
        note += "\n[harnessopt: could not end the command's background processes]\n"
        code = code or 126
    return code, note


def run_shell(args: list[str]) -> int:
    """``shell --timeout T --cap N [--fsize B --view DIR --view-growth B --view-files N] -- CMD``.

    Exit 124 on timeout (like coreutils timeout), 125 when the command wrote more than the view
    may grow by. Every file the command writes is capped at ``--fsize`` bytes (RLIMIT_FSIZE).
    Afterwards every other process of the container is killed, so nothing runs between commands.
    """
    opts, rest = _options(args)
    timeout, cap, command = float(opts["timeout"]), int(opts["cap"]), rest[0]
    fsize = int(opts.get("fsize", FSIZE_DEFAULT))
    view = opts.get("view")
    growth = int(opts.get("view-growth", VIEW_GROWTH_DEFAULT))
    max_files = int(opts.get("view-files", VIEW_FILES_DEFAULT))
    base = tree_usage(view, max_files)[0] if view else 0

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    proc = subprocess.Popen(
        ["/bin/bash", "-c", command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=limits,
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
    code, note = watch(proc, timeout, view, growth, max_files, base)
    code, note = end_all(proc, code, note)
    reader.join(1.0)
    if code < 0:  # killed by a signal (SIGXFSZ past --fsize, say): report it as bash does
        code = 128 - code
    sys.stdout.buffer.write(bytes(kept))
    if dropped:
        sys.stdout.buffer.write(f"\n[... {dropped} more bytes of output not shown ...]\n".encode())
    sys.stdout.buffer.write(note.encode())
    sys.stdout.flush()
    return code


# --------------------------------------------------------------------------- optimizer editor

EDIT_MAX_BYTES = 1 << 20  # largest file the editor reads or writes
LIST_MAX_ENTRIES = 2000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class EditError(Exception):
    """A refused editor operation; its message goes back to the model."""


def _parts(path: object) -> list[str]:
    if not isinstance(path, str) or path.startswith("/"):
        raise EditError("the path must be relative to the view root")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise EditError(f"{path}: '..' is not allowed")
    return parts


def _open_dir(root_fd: int, parts: list[str], create: bool = False) -> int:
    """An fd of root/parts, opened one component at a time from ``root_fd``, never through a link."""
    fd = os.dup(root_fd)
    for i, name in enumerate(parts):
        where = "/".join(parts[: i + 1])
        try:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise EditError(f"{where} does not exist") from None
                os.mkdir(name, 0o755, dir_fd=fd)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as e:
            raise EditError(f"{where} is a link or not a directory; the editor never follows links") from e
        finally:
            os.close(fd)
        fd = nfd
    return fd


def _check_regular(fd: int, where: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise EditError(f"{where} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise EditError(f"{where} is not a regular file (a FIFO, socket or device)")
    if st.st_nlink > 1:
        raise EditError(f"{where} has other hard links; the editor only edits plain files")
    if st.st_size > EDIT_MAX_BYTES:
        raise EditError(
            f"{where} is {st.st_size} bytes, over the editor's {EDIT_MAX_BYTES} bytes; use bash (head, sed -n)"
        )
    return st


def _read_fd(fd: int, where: str) -> str:
    data = bytearray()
    while chunk := os.read(fd, 65536):
        data += chunk
        if len(data) > EDIT_MAX_BYTES:
            raise EditError(f"{where} grew past the editor's {EDIT_MAX_BYTES} bytes")
    return data.decode("utf-8", "replace")


def _listing(fd: int, prefix: str, depth: int, out: list[str]) -> None:
    """Up to ``depth`` levels below ``fd``, hidden names excluded; directories end with ``/``."""
    with os.scandir(fd) as it:
        entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    for e in entries:
        if len(out) >= LIST_MAX_ENTRIES:
            return
        is_dir = e.is_dir(follow_symlinks=False)
        out.append(prefix + e.name + ("/" if is_dir else ""))
        if is_dir and depth > 1:
            with contextlib.suppress(OSError):
                sub = os.open(e.name, _DIR_FLAGS, dir_fd=fd)
                try:
                    _listing(sub, prefix + e.name + "/", depth - 1, out)
                finally:
                    os.close(sub)


def _edit_view(root_fd: int, parts: list[str]) -> dict:
    where = "/".join(parts) or "."
    parent = _open_dir(root_fd, parts[:-1])
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | _FILE_FLAGS, dir_fd=parent) if parts else os.dup(parent)
        except FileNotFoundError:
            raise EditError(f"{where} does not exist") from None
        except OSError as e:
            raise EditError(f"{where} is a link; the editor never follows links") from e
    finally:
        os.close(parent)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            entries: list[str] = []
            _listing(fd, "" if not parts else where + "/", 2, entries)
            return {"ok": True, "kind": "dir", "entries": entries}
        _check_regular(fd, where)
        return {"ok": True, "kind": "file", "text": _read_fd(fd, where)}
    finally:
        os.close(fd)


def _edit_write(root_fd: int, parts: list[str], text: object) -> dict:
    if not parts:
        raise EditError("the view root is a directory")
    if not isinstance(text, str):
        raise EditError("the text must be a string")
    data = text.encode("utf-8")
    if len(data) > EDIT_MAX_BYTES:
        raise EditError(f"the text is {len(data)} bytes, over the editor's {EDIT_MAX_BYTES} bytes")
    where = "/".join(parts)
    parent = _open_dir(root_fd, parts[:-1], create=True)
    try:
        existed = False
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o644, dir_fd=parent)
        except FileExistsError:
            existed = True
            try:
                fd = os.open(parts[-1], os.O_WRONLY | _FILE_FLAGS, dir_fd=parent)
            except IsADirectoryError:
                raise EditError(f"{where} is a directory") from None
            except OSError as e:  # ELOOP: a link; ENXIO: a FIFO nobody reads
                raise EditError(f"{where} is a link or not a regular file") from e
    finally:
        os.close(parent)
    try:
        _check_regular(fd, where)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return {"ok": True, "existed": existed}


def edit(root: str, request: dict) -> dict:
    """One editor operation on the view at ``root``: ``view`` (a file's text or a directory's
    listing), ``read`` (a file's text) or ``write`` (create parents, replace the content).

    Every path is walked from a directory fd of ``root`` one component at a time with
    ``O_NOFOLLOW``: a symlink anywhere, ``..``, a FIFO, a device, a hard-linked or oversized file
    is refused, so the operation can only touch plain files below ``root``.
    """
    try:
        parts = _parts(request.get("path"))
        root_fd = os.open(root, _DIR_FLAGS)
        try:
            op = request.get("op")
            if op in ("view", "read"):
                reply = _edit_view(root_fd, parts)
                if op == "read" and reply.get("kind") == "dir":
                    raise EditError(f"{'/'.join(parts) or '.'} is a directory")
                return reply
            if op == "write":
                return _edit_write(root_fd, parts, request.get("text"))
            raise EditError(f"unknown operation {op!r}")
        finally:
            os.close(root_fd)
    except EditError as e:
        return {"ok": False, "error": str(e)}
    except OSError as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e.strerror or e}"}


def run_edit(args: list[str]) -> int:
    """``edit --root DIR``: one JSON request on stdin, one JSON reply on stdout."""
    opts, _ = _options(args)
    try:
        request = json.loads(sys.stdin.buffer.read(8 * EDIT_MAX_BYTES))
    except ValueError:
        request = None
    if not isinstance(request, dict):
        reply: dict = {"ok": False, "error": "the request is not a JSON object"}
    else:
        reply = edit(opts["root"], request)
    sys.stdout.write(json.dumps(reply, ensure_ascii=False))
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------- optimizer agent

AGENT_INPUT_MAX = 8 << 20  # bytes of the job line plus the agent's stdin


class HeadTail:
    """The first and last ``cap // 2`` bytes of a stream, and how many bytes it had."""

    def __init__(self, cap: int):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        self.head += chunk[: max(room, 0)]
        rest = chunk[max(room, 0) :]
        if rest:
            self.tail = (self.tail + rest)[-self.half :]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {dropped} bytes not kept ...]\n".encode() if dropped > 0 else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", "replace")


def _drain(stream: IO[bytes], into: HeadTail) -> None:
    fd = stream.fileno()
    with contextlib.suppress(OSError):
        while chunk := os.read(fd, 65536):
            into.add(chunk)


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def run_agent(args: list[str]) -> int:
    """``agent --timeout T --cap N [--fsize B --view DIR --view-growth B --view-files N]``.

    stdin: one JSON line, the job ``{"argv", "env", "cwd", "socket"}`` (the lease token is in its
    env, so it is in no argv or file), then the agent's own stdin up to EOF. With a ``socket``
    (the gateway's, mounted read-only), a loopback port is bridged to it and the agent gets
    ANTHROPIC_BASE_URL=http://127.0.0.1:PORT. The agent runs in its own session with the file-size
    limit; its stdout and stderr are kept (head and tail, ``--cap`` bytes each); it is stopped at
    the timeout (124) or when the view grows too much (125), then every other process of the
    container is killed. One JSON object on stdout: code, timed_out, stdout, stderr, note.
    """
    not_dumpable()
    opts, _ = _options(args)
    timeout, cap = float(opts["timeout"]), int(opts["cap"])
    fsize = int(opts.get("fsize", FSIZE_DEFAULT))
    view = opts.get("view")
    growth = int(opts.get("view-growth", VIEW_GROWTH_DEFAULT))
    max_files = int(opts.get("view-files", VIEW_FILES_DEFAULT))
    data = bytearray()
    while len(data) <= AGENT_INPUT_MAX and (chunk := os.read(0, 65536)):
        data += chunk
    line, _, given = bytes(data).partition(b"\n")
    job = json.loads(line)
    # The container's own environment (the image's PATH, PYTHONPATH, ...; no secret), then the job's.
    env = {**os.environ, **{str(k): str(v) for k, v in (job.get("env") or {}).items()}}
    listener = None
    if job.get("socket"):  # bind before the agent starts, serve after (no threads across fork)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
    if env.get("HOME"):
        os.makedirs(env["HOME"], exist_ok=True)
    base = tree_usage(view, max_files)[0] if view else 0
    out, err = HeadTail(cap), HeadTail(cap)

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        prefer_oom_kill()

    try:
        proc = subprocess.Popen(
            [str(a) for a in job["argv"]],
            cwd=job.get("cwd") or view or "/tmp",
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=limits,
        )
    except OSError as e:
        reply = {
            "code": 127,
            "timed_out": False,
            "stdout": "",
            "stderr": f"cannot start {job['argv'][0]}: {e}",
        }
        sys.stdout.write(json.dumps(reply, ensure_ascii=False))
        return 0
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, given), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True),
    ]
    for t in threads:
        t.start()
    if listener is not None:
        bridge(listener, job["socket"])
    code, note = watch(proc, timeout, view, growth, max_files, base)
    code, note = end_all(proc, code, note)
    for t in threads[1:]:
        t.join(5)
    if code < 0:  # killed by a signal (SIGXFSZ past --fsize, say): report it as bash does
        code = 128 - code
    reply = {"code": code, "timed_out": code == 124, "stdout": out.text(), "stderr": err.text(), "note": note}
    sys.stdout.write(json.dumps(reply, ensure_ascii=False))
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------- warm interpreter

JOB_FD = 3  # the warm stub's job arrives on this inherited pipe
# What the shipped templates import (and what those pull in), imported while the stub waits
# (benchmarks/client_import.py prints what they cost a cold start). None of them reads the
# environment or the cwd when imported, nor registers an atexit handler (logging and
# concurrent.futures do: they are left out, so atexit order stays that of a cold start).
WARM_IMPORTS = (
    "argparse",
    "contextlib",
    "difflib",
    "http.client",  # and with it socket, ssl, email.parser
    "json",
    "pathlib",
    "re",
    "shutil",
    "signal",
    "subprocess",
    "tempfile",
    "urllib.parse",
)
STUB_IMPORTS = ("builtins", "importlib.machinery", "importlib.util", "types", "zipfile")  # its own
# Read as an interpreter starts or imports WARM_IMPORTS: Python's own variables, the locale,
# the user site directory (HOME), the time zone the time module computes at import, the dynamic
# loader's and glibc's, OpenSSL's configuration (loaded when ssl and hashlib are imported).
STARTUP_PREFIXES = ("PYTHON", "LC_", "LD_", "MALLOC_", "OPENSSL_")
STARTUP_VARS = ("HOME", "LANG", "LANGUAGE", "TZ", "GLIBC_TUNABLES")


def startup_env(env: dict[str, str]) -> dict[str, str]:
    """The part of ``env`` an interpreter reads as it starts (a job differing there starts cold)."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_VARS}


def read_job(fd: int) -> dict | None:
    """One JSON line from ``fd``, which is closed afterwards; None on EOF without a whole line."""
    buf = b""
    try:
        while not buf.endswith(b"\n") and len(buf) <= JOB_MAX:
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            buf += chunk
    finally:
        os.close(fd)
    return json.loads(buf) if buf.endswith(b"\n") else None


def warm_code(path: str) -> Any:
    """The script's code object compiled as a cold start would, or None where only a real cold
    start gives the same result: not a regular file, a .pyc, a zip, a syntax error."""
    import importlib.util
    import zipfile

    try:
        if path.endswith(".pyc") or not os.path.isfile(path) or zipfile.is_zipfile(path):
            return None
        with open(path, "rb") as f:
            source = f.read()
        if source[:2] == importlib.util.MAGIC_NUMBER[:2]:  # CPython's maybe_pyc_file test
            return None
        # dont_inherit: not this file's ``from __future__ import annotations``
        return compile(source, main_file(path), "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError):
        return None


def main_file(path: str) -> str:
    """``__file__`` of a cold ``python3 path``: the cwd joined to a relative path, not normalised."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def cold_start(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process with a real ``python3 argv...`` (never returns)."""
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess's restore_signals leaves them
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execve(sys.executable, [sys.orig_argv[0], *argv], env)
    except OSError as e:
        sys.stderr.write(f"harnessopt runner: cannot start the harness: {e}\n")
        os._exit(127)


def uncaught(exc: BaseException, tb: Any) -> None:
    """What CPython does with an exception that ends ``__main__`` (PyErr_Print), then exit 1,
    or die of SIGINT after finalising for a KeyboardInterrupt (as Py_RunMain does)."""
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    hook = getattr(sys, "excepthook", None)
    sys.audit("sys.excepthook", hook, type(exc), exc, tb)
    if hook is None:
        sys.stderr.write("sys.excepthook is missing\n")
        sys.__excepthook__(type(exc), exc, tb)
    else:
        try:
            hook(type(exc), exc, tb)
        except SystemExit:
            raise
        except BaseException as e2:
            tb2 = e2.__traceback__.tb_next if e2.__traceback__ else None  # without this frame
            sys.stderr.write("Error in sys.excepthook:\n")
            sys.__excepthook__(type(e2), e2.with_traceback(tb2), tb2)
            sys.stderr.write("\nOriginal exception was:\n")
            sys.__excepthook__(type(exc), exc, tb)
    if not isinstance(exc, KeyboardInterrupt):
        sys.exit(1)
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]  # Py_FinalizeEx's order: threads, atexit, flush
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)


def spawn_warm(
    argv: list[str], env: dict[str, str], cwd: str, preexec: Any = None
) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` (``python3 runner.py warm``) as a harness would be started (stdin
    /dev/null, stdout and stderr pipes, its own session), with a pipe's read end on its fd 3;
    returns it and the write end, for the job line."""
    r, w = os.pipe()

    def child() -> None:
        if r != 3:  # fd 3 is open here (the lowest free fd was not 3): dup over it
            os.dup2(r, 3)
            os.close(r)
        if preexec is not None:
            preexec()

    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(3,) if r == 3 else (3, r),
            preexec_fn=child,
        )
    except BaseException:
        os.close(w)
        raise
    finally:
        os.close(r)
    return proc, w


def hand_job(stub: tuple[subprocess.Popen, int], argv: list[str], env: dict[str, str]) -> Any:
    """Write the job to a stub from ``spawn_warm``: the stub, now the harness, or None when it
    is gone (its output, if any, is dropped; the caller starts the harness cold)."""
    proc, w = stub
    line = json.dumps({"argv": argv, "env": env}).encode() + b"\n"
    try:
        if proc.poll() is None:
            view = memoryview(line)
            while view:
                view = view[os.write(w, view) :]
            return proc
    except OSError:  # EPIPE: it died before reading
        pass
    finally:
        os.close(w)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return None


def run_warm() -> int:
    """``warm``: an interpreter started ahead of its task; the job comes on fd 3.

    Started (by the task runner in its container, or by the local sandbox) with the harness's
    stdin, stdout, stderr and cwd and the static part of its environment; imports WARM_IMPORTS,
    then reads one JSON line ``{"argv": [script, ...], "env": {...}, "cwd": ...}`` on fd 3 (EOF:
    exit 0, the task never came) and runs the script as ``__main__`` as a cold ``python3 script``
    would: same sys.argv, sys.path[0], __file__, os.environ (the C environment too), exit status,
    tracebacks, atexit. A job whose environment differs in what an interpreter reads at start
    (PYTHON*, locale, HOME, TZ), or a script that is no plain source file, gets a real cold start
    (execve). docs/sandbox.md lists what a harness can still tell apart (the stack above its
    module, pre-imported modules in sys.modules, /proc/self/cmdline and /proc/self/environ).
    """
    started = dict(os.environ)
    for name in (*WARM_IMPORTS, *STUB_IMPORTS):
        with contextlib.suppress(ImportError):
            __import__(name)
    try:
        job = read_job(JOB_FD)
        if job is None:
            return 0
        argv = [str(a) for a in job["argv"]]
        env = {str(k): str(v) for k, v in job["env"].items()}
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as e:
        sys.stderr.write(f"harnessopt runner: bad job for the warm interpreter: {e!r}\n")
        return 2
    try:
        if job.get("cwd"):
            os.chdir(job["cwd"])
    except OSError as e:
        sys.stderr.write(f"harnessopt runner: cannot start the harness: {e}\n")
        return 127
    same_start = startup_env(started) == startup_env(env) and "PYTHONINSPECT" not in env
    code = warm_code(argv[0]) if same_start else None
    if code is None:
        cold_start(argv, env)
    try:
        names = prepare_main(code, argv, env)
    except Exception:  # nothing of the script has run yet: a real cold start instead
        cold_start(argv, env)
    return run_main(code, names)


_KEEP: list = []  # the stub's own module, once __main__ is the script's


def prepare_main(code: Any, argv: list[str], env: dict[str, str]) -> dict:
    """Make this interpreter what a cold start of ``argv`` would be just before running
    ``code``: environment, argv, sys.path[0], a fresh ``__main__``; returns its globals."""
    import builtins
    import importlib
    import types
    from importlib.machinery import SourceFileLoader

    os.environ.clear()  # unsetenv/putenv: children see the job's environment
    os.environ.update(env)
    sys.argv = list(argv)
    sys.orig_argv = [sys.orig_argv[0], *argv]
    if not getattr(sys.flags, "safe_path", False):  # what CPython's _PyPathConfig_ComputeSysPath0 puts first
        sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))
    importlib.invalidate_caches()
    main = types.ModuleType("__main__")  # __name__, __doc__, __package__, __loader__, __spec__
    names = main.__dict__
    names.update(__annotations__={}, __builtins__=builtins, __file__=code.co_filename, __cached__=None)
    names["__loader__"] = SourceFileLoader("__main__", code.co_filename)
    _KEEP.append(sys.modules["__main__"])
    sys.modules["__main__"] = main
    return names


def run_main(code: Any, names: dict) -> int:
    """Run ``code`` as ``__main__`` (its globals ``names``) in this interpreter."""
    failed: BaseException | None = None
    try:
        exec(code, names)
    except SystemExit:
        raise
    except BaseException as e:
        failed = e
    if failed is not None:  # outside the except: the hook sees no exception being handled
        uncaught(failed, failed.__traceback__.tb_next if failed.__traceback__ else None)
    return 0


LIFELINE_ENV = "HO_LIFELINE"  # "stdin": the host holds PID 1's stdin open for the container's life


def _exit_at_eof() -> None:
    """The host's attach socket closed (StdinOnce): the run is gone, even killed with SIGKILL,
    which no clean-up of its survives; PID 1 exits, and the container with it."""
    while os.read(0, 65536):
        pass
    os._exit(0)


def run_idle() -> int:
    """DockerShell's PID 1: reaps orphans; commands come by ``docker exec``. With the lifeline,
    it exits when its stdin ends."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    not_dumpable()  # no process of the container may ptrace PID 1, the one that survives commands
    if os.environ.get(LIFELINE_ENV) == "stdin":
        threading.Thread(target=_exit_at_eof, daemon=True).start()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.2)


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "task"
    if mode == "shell":
        return run_shell(sys.argv[2:])
    if mode == "edit":
        return run_edit(sys.argv[2:])
    if mode == "agent":
        return run_agent(sys.argv[2:])
    if mode == "idle":
        return run_idle()
    if mode == "warm":
        return run_warm()
    return run_task(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
