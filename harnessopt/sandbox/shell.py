"""DockerShell: the optimizer's ``bash`` and editor inside one container per round.

The view directory is the only host path it mounts (read-write at ``/view``, the working
directory); no network, read-only root, the rollout limits, no capabilities, no new privileges,
and an unprivileged uid that is never the host's (``OPTIMIZER_UID``). The view is handed to that
uid, and must sit in a directory only the host user can reach (mode 0700), so whatever modes the
container sets in it (``chmod 755 /view``, a setuid copy of a shell) no other local user reaches.

Each bash command is one ``exec`` of the in-image runner's ``shell`` mode: ``bash -c`` in its own
session, every file capped by RLIMIT_FSIZE, the view's growth watched, output capped, the group
killed on timeout, then every other process of the container killed. The host watches the view's
growth too, from outside the container's CPU quota (which throttles the runner with the writers
it watches), and kills the container when the view grows past its cap (``view_usage``). The host then checks from
outside (``docker top``) that only PID 1 is left, and replaces the container otherwise: no
process survives between tool calls. Each editor operation is an ``exec`` of the runner's
``edit`` mode, so the host never opens a path inside the view while the round runs. The host
also bounds every wait and, should the runner not answer, removes the container (a new one is
made for the next call; the view keeps the edits). A CLI agent (the ``command`` optimizer) is one
``exec`` of the runner's ``agent`` mode, with the job and the lease token on stdin; for it the
container also mounts the gateway's socket dir read-only and the runner bridges a loopback port
to it (the network stays ``none``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docker.utils.socket import frames_iter

from harnessopt.config import RolloutConfig
from harnessopt.protocols import AgentResult, GatewayLease, ShellResult
from harnessopt.sandbox.image import docker_client, owner_labels
from harnessopt.sandbox.local import EDIT_REPLY_CAP, EDIT_TIMEOUT_S, parse_edit_reply
from harnessopt.sandbox.pool import (
    GATEWAY_DIR,
    LABEL,
    container_kwargs,
    gateway_group,
    register_live,
    remove_container,
)

OUTPUT_CAP = 30_000
HOST_GRACE_S = 15.0  # beyond the command's own timeout, before the host gives up on the exec
# The container's uid: unprivileged, and never the host user's (files it leaves are not ours).
OPTIMIZER_UID = 10001 if os.getuid() != 10001 else 10002
FSIZE_LIMIT = 64 << 20  # largest file one command may write (RLIMIT_FSIZE in the runner)
VIEW_GROWTH_CAP = 256 << 20  # disk the view may grow by during one command
VIEW_FILES_CAP = 20_000  # files and directories the view may hold
WATCH_EVERY_S = 0.01  # the host's poll of the view's growth while a command runs (0.2 ms a look)
STOP_JOIN_S = 5.0  # after killing an outgrown container, time for its exec stream to end
RUNNER = ["python3", "/opt/ho/runner.py"]
AGENT_OUTPUT_CAP = 4 << 20  # bytes of an agent's stdout (its transcript) kept, head and tail; stderr too
AGENT_HOME = "/tmp/ho-agent-home"  # the agent's HOME: a tmpfs, so its state never lands in the view
AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerShell:
    """A ``Shell`` whose commands and file edits run in a container that mounts the view at ``/view``."""

    view_root = "/view"

    def __init__(self, view: Path, cfg: RolloutConfig, *, client: Any = None, output_cap: int = OUTPUT_CAP):
        self.view = Path(view).resolve()
        require_private_parent(self.view)
        self.cfg = cfg
        self.client = client or docker_client()
        self.output_cap = output_cap
        self.run_id = secrets.token_hex(6)
        self._container: Any = None
        self._socket_dir: str | None = None  # the gateway's socket dir mounted in the container
        self._init_pid: int | None = None
        self._handed_over = False
        self._lock = threading.Lock()

    def run(self, command: str, timeout_s: float) -> ShellResult:
        """Run ``bash -c command`` in /view: output (capped), exit code, timeout flag."""
        argv = [*RUNNER, "shell", "--timeout", str(timeout_s), "--cap", str(self.output_cap)]
        argv += ["--fsize", str(FSIZE_LIMIT), "--view", "/view", "--view-growth", str(VIEW_GROWTH_CAP)]
        argv += ["--view-files", str(VIEW_FILES_CAP), "--", command]
        with self._lock:
            result = self._exec(argv, None, timeout_s + HOST_GRACE_S, watch=True)
            if "error" in result:
                return ShellResult(output=result["error"], exit_code=None, timed_out=result["timed_out"])
            text = result["output"].decode("utf-8", "replace")
            if not self._only_init_left():
                # Something survived the runner's sweep: nothing may run until the next tool call.
                self._drop()
                text += "\n[harnessopt: processes outlived the command; the shell's container was replaced]"
        code = result["code"]
        if code == 124:
            return ShellResult(
                output=text + f"\n[killed after {timeout_s:.0f}s]", exit_code=None, timed_out=True
            )
        return ShellResult(output=text, exit_code=code, timed_out=False)

    def edit(self, request: dict[str, Any]) -> dict[str, Any]:
        """One editor operation by the runner's ``edit`` mode in the container (see sandbox/runner.py)."""
        data = json.dumps(request).encode("utf-8")
        with self._lock:
            result = self._exec([*RUNNER, "edit", "--root", "/view"], data, EDIT_TIMEOUT_S)
        if "error" in result:
            return {"ok": False, "error": result["error"]}
        return parse_edit_reply(result["output"], timed_out=False)

    def agent(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes,
        env: Mapping[str, str],
        timeout_s: float,
        gateway: GatewayLease | None,
    ) -> AgentResult:
        """Run a CLI agent by the runner's ``agent`` mode in the container, cwd /view.

        The gateway's socket dir is mounted read-only (the container is made anew if it lacks
        it); the runner bridges a loopback port to it, so the agent's ANTHROPIC_BASE_URL is
        ``http://127.0.0.1:PORT`` and its key the lease's token, sent with the job on stdin.
        The host's environment never reaches the agent; every process of it is killed after.
        """
        sock = gateway.socket_path if gateway is not None else None
        job_env = {"PATH": AGENT_PATH, "HOME": AGENT_HOME, "LANG": "C.UTF-8", "TERM": "dumb", **env}
        if gateway is not None:
            job_env["ANTHROPIC_API_KEY"] = gateway.token
        job = {
            "argv": list(argv),
            "env": job_env,
            "cwd": "/view",
            "socket": f"{GATEWAY_DIR}/{sock.name}" if sock is not None else None,
        }
        argv_run = [*RUNNER, "agent", "--timeout", str(timeout_s), "--cap", str(AGENT_OUTPUT_CAP)]
        argv_run += ["--fsize", str(FSIZE_LIMIT), "--view", "/view", "--view-growth", str(VIEW_GROWTH_CAP)]
        argv_run += ["--view-files", str(VIEW_FILES_CAP)]
        data = json.dumps(job).encode() + b"\n" + stdin
        with self._lock:
            socket_dir = str(sock.parent) if sock is not None else None
            result = self._exec(
                argv_run,
                data,
                timeout_s + HOST_GRACE_S,
                cap=6 * 2 * AGENT_OUTPUT_CAP,
                socket_dir=socket_dir,
                watch=True,
            )
            if "error" in result:
                return AgentResult("", result["error"], None, result["timed_out"])
            left = (
                "" if self._only_init_left() else "processes outlived the agent; the container was replaced"
            )
            if left:
                self._drop()
        try:
            reply = json.loads(result["output"])
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return AgentResult("", "the runner gave no answer (its reply was cut or broken)", None, False)
        timed_out = bool(reply.get("timed_out"))
        note = " ".join(n for n in (str(reply.get("note") or "").strip(), left) if n)
        return AgentResult(
            str(reply.get("stdout", "")),
            str(reply.get("stderr", "")),
            None if timed_out else reply.get("code"),
            timed_out,
            note,
        )

    def close(self) -> None:
        """Remove the container (the view and its edits stay on the host)."""
        with self._lock:
            if self._container is not None and os.geteuid() != 0:
                # Files the container made belong to its uid: let the host user remove them later.
                self._exec(["chmod", "-R", "u+rwX,go+rwX", "/view"], None, 30.0)
            self._drop()

    # ----------------------------------------------------------------------- internals

    def _exec(
        self,
        argv: list[str],
        stdin: bytes | None,
        wait_s: float,
        *,
        cap: int | None = None,
        socket_dir: str | None = None,
        watch: bool = False,
    ) -> dict[str, Any]:
        """Run ``argv`` in the container within ``wait_s``; {output, code} or {error, timed_out}.

        ``socket_dir``: the gateway's socket dir, which the container must mount. ``cap``: bytes
        of output kept (default: the editor's reply cap with ``stdin``, else the shell's).
        ``watch``: the host polls the view's growth meanwhile and, past its cap, kills the
        container: code 125 and the runner's note, as when the runner stops the command itself."""
        try:
            container = self._ensure(socket_dir)
        except Exception as e:
            return {"error": f"sandbox error: could not start the shell's container: {e}", "timed_out": False}
        if cap is None:
            cap = EDIT_REPLY_CAP if stdin is not None else 2 * self.output_cap + 4096
        result: dict[str, Any] = {}
        worker = threading.Thread(
            target=self._exec_in, args=(container, argv, stdin, cap, result), daemon=True
        )
        worker.start()
        if watch and self._outgrown(worker, wait_s):
            worker.join(STOP_JOIN_S)
            self._drop()
            note = f"\n[stopped: the view may grow by {VIEW_GROWTH_CAP >> 20} MiB and hold {VIEW_FILES_CAP} files]\n"
            return {"output": bytes(result.get("output", b"")) + note.encode(), "code": 125}
        worker.join(0 if watch else wait_s)  # a watched exec's wait is spent
        if worker.is_alive() or "error" in result:
            # The runner did not come back: drop the container, the next call gets a new one.
            self._drop()
            timed_out = "error" not in result
            msg = result.get(
                "error", f"the runner did not answer within {wait_s:.0f}s; the container was replaced"
            )
            return {"error": str(msg), "timed_out": timed_out}
        return result

    def _exec_in(
        self, container: Any, argv: list[str], stdin: bytes | None, cap: int, result: dict[str, Any]
    ) -> None:
        try:
            api = self.client.api
            exec_id = api.exec_create(container.id, argv, workdir="/view", stdin=stdin is not None)["Id"]
            kept = bytearray()
            if stdin is None:
                for chunk in api.exec_start(exec_id, stream=True):
                    if len(kept) < cap:  # the runner caps; this bounds a broken one
                        kept += chunk
            else:
                sock = api.exec_start(exec_id, socket=True)
                try:
                    raw = getattr(sock, "_sock", sock)
                    raw.sendall(stdin)
                    raw.shutdown(socket.SHUT_WR)  # end of the request: the runner reads to EOF
                    for stream_id, chunk in frames_iter(sock, tty=False):
                        if stream_id == 1 and len(kept) < cap:
                            kept += chunk
                finally:
                    sock.close()
            result["output"] = bytes(kept)
            result["code"] = api.exec_inspect(exec_id).get("ExitCode")
        except Exception as e:
            result["error"] = f"sandbox error: {type(e).__name__}: {e}"

    def _outgrown(self, worker: threading.Thread, wait_s: float) -> bool:
        """Wait for ``worker`` (at most ``wait_s``) while polling the view from the host; True, with
        the container killed, once it grew past ``VIEW_GROWTH_CAP`` or holds too many entries."""
        base, _ = view_usage(self.view, VIEW_FILES_CAP)
        deadline = time.monotonic() + wait_s
        while worker.is_alive() and time.monotonic() < deadline:
            worker.join(WATCH_EVERY_S)
            used, count = view_usage(self.view, VIEW_FILES_CAP)
            if used - base > VIEW_GROWTH_CAP or count > VIEW_FILES_CAP:
                # The container's PID 1 killed from here ends every process of its PID namespace
                # at once (the engine's kill takes 0.2-0.4 s, long enough to write 200 MiB more);
                # a host user other than root may not signal uid 10001: the engine's kill then.
                if self._init_pid is not None:
                    with contextlib.suppress(OSError):
                        os.kill(self._init_pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    self._container.kill()
                return True
        return False

    def _only_init_left(self) -> bool:
        """Asked of the engine, not of the container: is PID 1 the only live process?"""
        if self._container is None:
            return True
        try:
            top = self._container.top(ps_args="-o pid,stat")
        except Exception:
            return False
        live = [row for row in top.get("Processes") or [] if "Z" not in row[1]]
        return [int(row[0]) for row in live] == [self._init_pid]

    def _ensure(self, socket_dir: str | None = None) -> Any:
        """The container, made when there is none, or anew when it must mount ``socket_dir``."""
        if self._container is not None and socket_dir in (None, self._socket_dir):
            return self._container
        self._drop()
        if not self._handed_over:
            hand_over(self.view, OPTIMIZER_UID)
            self._handed_over = True
        kwargs = container_kwargs(self.cfg, self.run_id)
        kwargs["user"] = f"{OPTIMIZER_UID}:{OPTIMIZER_UID}"
        kwargs["labels"] = {
            LABEL: "1",
            f"{LABEL}.run": self.run_id,
            f"{LABEL}.role": "optimizer-shell",
            **owner_labels(),
        }
        kwargs["tmpfs"] = {"/tmp": f"size={max(64, self.cfg.out_mb)}m,mode=1777"}
        kwargs["environment"] = {
            "HOME": "/view",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        kwargs["working_dir"] = "/view"
        volumes = {str(self.view): {"bind": "/view", "mode": "rw"}}
        if socket_dir is not None:  # the gateway, for an agent: its socket dir, read-only
            volumes[socket_dir] = {"bind": GATEWAY_DIR, "mode": "ro"}
            if (gid := _gateway_gid(socket_dir)) is not None:
                kwargs["group_add"] = [str(gid)]  # the run's group: lets it reach the socket
        container = self.client.containers.create(
            self.cfg.image, command=[*RUNNER, "idle"], volumes=volumes, **kwargs
        )
        register_live(container)
        try:
            container.start()
            container.reload()
            self._init_pid = int(container.attrs["State"]["Pid"])
        except Exception:
            remove_container(container)
            raise
        self._container = container
        self._socket_dir = socket_dir
        return container

    def _drop(self) -> None:
        if self._container is not None:
            remove_container(self._container)
            self._container = None
            self._socket_dir = None
            self._init_pid = None


def view_usage(root: Path, max_entries: int) -> tuple[int, int]:
    """(bytes of disk, entries) below ``root``, read from the host through directory fds opened
    with O_NOFOLLOW: a directory swapped for a link while it is read is skipped, never followed.
    Stops counting past ``max_entries``."""
    used, count = 0, 0
    try:
        stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
    except OSError:
        return 0, 0
    while stack:
        fd = stack.pop()
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    count += 1
                    if count > max_entries:
                        break
                    with contextlib.suppress(OSError):
                        st = entry.stat(follow_symlinks=False)
                        used += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                            stack.append(os.open(entry.name, flags, dir_fd=fd))
        except OSError:
            pass
        finally:
            os.close(fd)
        if count > max_entries:
            for left in stack:
                os.close(left)
            break
    return used, count


def _gateway_gid(socket_dir: str) -> int | None:
    """The group reserved for the run that may pass the gateway's socket dir; for a dir without
    one (a test's echo server), None after letting others traverse it (as the task pool does)."""
    gid = gateway_group(socket_dir)
    if gid is None:
        os.chmod(socket_dir, os.stat(socket_dir).st_mode & 0o7777 | 0o111)
    return gid


def require_private_parent(view: Path) -> None:
    """The view must sit in a directory that only the host user can enter (ValueError otherwise)."""
    st = view.parent.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise ValueError(
            f"the optimizer's view {view} must be inside a directory only you can enter (mode 0700), "
            "e.g. Path(tempfile.mkdtemp()) / 'view': the container may set any mode in the view"
        )


def hand_over(view: Path, uid: int) -> None:
    """Let ``uid`` (the container's) write the view: chown it when we are root; else open its
    modes to all (only we can reach it: ``require_private_parent``). Links are left alone."""
    root = os.geteuid() == 0
    for dirpath, dirnames, filenames in os.walk(view):
        paths = [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]
        for p in paths:
            if os.path.islink(p):
                continue
            if root:
                os.lchown(p, uid, uid)
            else:
                mode = os.lstat(p).st_mode
                os.chmod(p, (mode & 0o7777) | (0o777 if os.path.isdir(p) else 0o666))
