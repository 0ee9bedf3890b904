"""DockerShell: the optimizer's ``bash`` and editor inside one container per round.

The container's ``/view`` (the working directory) is a tmpfs of its own, sized at the view's
size plus one command's growth cap and a little headroom: a real quota, whatever the CPU load.
It is seeded with a tar of the host's view by ``exec`` (``tar -x`` in the container); after every
call that may change it, the container's ``tar -c`` comes back and is unpacked by the strict
reader (regular files and directories, modes 0644/0755) in place of the host view's contents
(``view_sync``). So the container mounts no host path (but, for an agent, the gateway's socket
dir), and the host view is what the container held after the last complete call. A call that
grew the view past ``VIEW_GROWTH_CAP`` (or ``VIEW_FILES_CAP`` entries; holes count) is stopped
(code 125 and a note); its changes, like those of a call whose view cannot be copied out or that
left a process behind, are discarded with the container (a note says so).
No network, read-only root, the rollout limits (the memory limit raised by the view's tmpfs,
whose pages it is charged), no capabilities, no new privileges, and an unprivileged uid that is
never the host's (``OPTIMIZER_UID``). The view must sit in a directory only the host user can
reach (mode 0700): the sync makes its fresh and old copies there.

Each bash command is one ``exec`` of the in-image runner's ``shell`` mode: ``bash -c`` in its own
session, every file capped by RLIMIT_FSIZE, the view's growth watched, output capped, the group
killed on timeout, then every other process of the container killed. The host then checks from
outside (``docker top``) that only PID 1 is left, and replaces the container otherwise: no
process survives between tool calls. Each editor operation is an ``exec`` of the runner's
``edit`` mode. The host also bounds every wait and, should the runner not answer, removes the
container (a new one is made for the next call; the view keeps the edits of the calls before).
A CLI agent (the ``command`` optimizer) is one ``exec`` of the runner's ``agent`` mode, with the job and the lease token on stdin; for it the
container also mounts the gateway's socket dir read-only and the runner bridges a loopback port
to it (the network stays ``none``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docker.utils.socket import frames_iter

from harnessopt.config import RolloutConfig
from harnessopt.protocols import AgentResult, GatewayLease, ShellResult, discarded_list
from harnessopt.sandbox.docker import view_sync
from harnessopt.sandbox.docker.pool import (
    GATEWAY_DIR,
    LABEL,
    container_kwargs,
    gateway_group,
    register_live,
    remove_container,
)
from harnessopt.sandbox.image.build import docker_client, owner_labels
from harnessopt.sandbox.local.sandbox import EDIT_REPLY_CAP, EDIT_TIMEOUT_S, parse_edit_reply

OUTPUT_CAP = 30_000
HOST_GRACE_S = 15.0  # beyond the command's own timeout, before the host gives up on the exec
# The container's uid: unprivileged, and never the host user's (files it leaves are not ours).
OPTIMIZER_UID = 10001 if os.getuid() != 10001 else 10002
FSIZE_LIMIT = 64 << 20  # largest file one command may write (RLIMIT_FSIZE in the runner)
VIEW_GROWTH_CAP = 256 << 20  # disk the view may grow by during one command
VIEW_FILES_CAP = 20_000  # files and directories the view may hold
# The view's tmpfs holds the seeded view, one command's cap and this: a command past the cap is
# seen (125) before ENOSPC, and the file system is the hard bound on what one command can write.
VIEW_HEADROOM = 32 << 20
VIEW_ROOM = VIEW_GROWTH_CAP + VIEW_HEADROOM // 2  # free room a command starts with (else a new container)
EDIT_ROOM = 2 << 20  # free room an editor operation starts with
SYNC_WAIT_S = 120.0  # for seeding the container's view, or copying it out
STOPPED_NOTE = f"[stopped: the view may grow by {VIEW_GROWTH_CAP >> 20} MiB and hold {VIEW_FILES_CAP} files]"
SURVIVORS_NOTE = "[harnessopt: processes outlived the call; the shell's container was replaced]"
DISCARDED_NOTE = "[harnessopt: this call's changes to the view were discarded]"
RUNNER = ["python3", "/opt/ho/runner.py"]
AGENT_OUTPUT_CAP = 4 << 20  # bytes of an agent's stdout (its transcript) kept, head and tail; stderr too
AGENT_HOME = "/tmp/ho-agent-home"  # the agent's HOME: a tmpfs, so its state never lands in the view
AGENT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerShell:
    """A ``Shell`` whose commands and file edits run in a container holding a copy of the view at ``/view``."""

    view_root = "/view"

    def __init__(self, view: Path, cfg: RolloutConfig, *, client: Any = None, output_cap: int = OUTPUT_CAP):
        self.view = Path(view).resolve()
        view_sync.require_private_parent(self.view)
        self.cfg = cfg
        self.client = client or docker_client()
        self.output_cap = output_cap
        self.run_id = secrets.token_hex(6)
        self._container: Any = None
        self._lifeline: Any = None  # the attach socket holding PID 1's stdin open (HO_LIFELINE)
        self._socket_dir: str | None = None  # the gateway's socket dir mounted in the container
        self._init_pid: int | None = None
        self._usage: view_sync.TmpfsUsage | None = None  # /view after the last seed or sync
        self._synced_size = 0  # bytes of file content in the host view at the last seed or sync
        self._discarded: list[str] = []  # what the last copy out could not keep (symlinks, FIFOs)
        self._discard_note = ""  # said once, after the call whose copy out first left them behind
        discarded_list(self.view).unlink(missing_ok=True)  # an earlier shell's, on this view
        self._lock = threading.Lock()

    def run(self, command: str, timeout_s: float) -> ShellResult:
        """Run ``bash -c command`` in /view: output (capped), exit code, timeout flag."""
        argv = [*RUNNER, "shell", "--timeout", str(timeout_s), "--cap", str(self.output_cap)]
        argv += ["--fsize", str(FSIZE_LIMIT), "--view", "/view", "--view-growth", str(VIEW_GROWTH_CAP)]
        argv += ["--view-files", str(VIEW_FILES_CAP), "--", command]
        with self._lock:
            result = self._exec(argv, None, timeout_s + HOST_GRACE_S, room=VIEW_ROOM)
            if "error" in result:
                return ShellResult(output=result["error"], exit_code=None, timed_out=result["timed_out"])
            text = result["output"].decode("utf-8", "replace")
            outgrown, note = self._copy_out()
            text += _notes(text, outgrown, note)
            text += f"\n{self._discard_note}\n" if self._discard_note and not (outgrown or note) else ""
            self._discard_note = ""
        code = 125 if outgrown else result["code"]
        if code == 124:
            return ShellResult(
                output=text + f"\n[killed after {timeout_s:.0f}s]", exit_code=None, timed_out=True
            )
        return ShellResult(output=text, exit_code=code, timed_out=False)

    def edit(self, request: dict[str, Any]) -> dict[str, Any]:
        """One editor operation by the runner's ``edit`` mode in the container (see sandbox/runner.py)."""
        data = json.dumps(request).encode("utf-8")
        with self._lock:
            result = self._exec([*RUNNER, "edit", "--root", "/view"], data, EDIT_TIMEOUT_S, room=EDIT_ROOM)
            if "error" in result:
                return {"ok": False, "error": result["error"]}
            note = ""
            if request.get("op") not in ("view", "read"):
                note = _notes("", *self._sync_back()).strip()
        if note:
            return {"ok": False, "error": note}
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
        The host's environment never reaches the agent; every process of it is killed after,
        and the view is copied back as after a bash command.
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
                room=VIEW_ROOM,
            )
            if "error" in result:
                return AgentResult("", result["error"], None, result["timed_out"])
            outgrown, sync_note = self._copy_out()
        try:
            reply = json.loads(result["output"])
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            return AgentResult("", "the runner gave no answer (its reply was cut or broken)", None, False)
        timed_out = bool(reply.get("timed_out"))
        runner_note = str(reply.get("note") or "").strip()
        sync_note = _notes(runner_note, outgrown, sync_note).strip()
        note = " ".join(n for n in (runner_note, sync_note) if n)
        code = 125 if outgrown and not timed_out else reply.get("code")
        return AgentResult(
            str(reply.get("stdout", "")),
            str(reply.get("stderr", "")),
            None if timed_out else code,
            timed_out,
            note,
        )

    def close(self) -> None:
        """Remove the container (the view on the host holds its edits, as of the last complete call)."""
        with self._lock:
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
        room: int = 0,
    ) -> dict[str, Any]:
        """Run ``argv`` in the container within ``wait_s``; {output, code} or {error, timed_out}.

        ``socket_dir``: the gateway's socket dir, which the container must mount. ``cap``: bytes
        of output kept (default: the editor's reply cap with ``stdin``, else the shell's).
        ``room``: bytes the view's file system must have free (else the container is made anew)."""
        try:
            container = self._ensure(socket_dir, room)
        except Exception as e:
            return {"error": f"sandbox error: could not start the shell's container: {e}", "timed_out": False}
        if cap is None:
            cap = EDIT_REPLY_CAP if stdin is not None else 2 * self.output_cap + 4096
        result = self._bounded(container, argv, stdin, cap, wait_s)
        if "error" in result or "code" not in result:
            # The runner did not come back: drop the container, the next call gets a new one.
            self._drop()
            timed_out = "error" not in result
            msg = result.get(
                "error", f"the runner did not answer within {wait_s:.0f}s; the container was replaced"
            )
            return {"error": str(msg), "timed_out": timed_out}
        return result

    def _bounded(
        self,
        container: Any,
        argv: list[str],
        stdin: bytes | None,
        cap: int,
        wait_s: float,
    ) -> dict[str, Any]:
        """``_exec_in`` in a thread given ``wait_s``: the result so far (no "code" if it did not end)."""
        result: dict[str, Any] = {}
        worker = threading.Thread(
            target=self._exec_in, args=(container, argv, stdin, cap, result), daemon=True
        )
        worker.start()
        worker.join(wait_s)
        return dict(result) if not worker.is_alive() else {}

    def _exec_in(
        self,
        container: Any,
        argv: list[str],
        stdin: bytes | None,
        cap: int,
        result: dict[str, Any],
    ) -> None:
        """One exec; stdout (and stderr, without ``stdin``) kept up to ``cap`` bytes (and one chunk),
        the rest read and dropped; with ``stdin``, stderr's head goes to result["stderr"]."""
        try:
            api = self.client.api
            exec_id = api.exec_create(container.id, argv, workdir="/view", stdin=stdin is not None)["Id"]
            kept, err = bytearray(), bytearray()
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
                        if stream_id == 1 and len(kept) <= cap:
                            kept += chunk
                        elif stream_id == 2 and len(err) < 4096:
                            err += chunk
                finally:
                    sock.close()
            result["output"], result["stderr"] = kept, bytes(err)
            result["code"] = api.exec_inspect(exec_id).get("ExitCode")
        except Exception as e:
            result["error"] = f"sandbox error: {type(e).__name__}: {e}"

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

    def _ensure(self, socket_dir: str | None = None, room: int = 0) -> Any:
        """The container, made (and its view seeded) when there is none, or anew when it must
        mount ``socket_dir`` or its view has less than ``room`` bytes free."""
        usage = self._usage
        roomy = usage is None or usage.total - usage.used >= room
        if self._container is not None and socket_dir in (None, self._socket_dir) and roomy:
            return self._container
        self._drop()
        packed = view_sync.pack(self.view)
        size = packed.pages + VIEW_GROWTH_CAP + VIEW_HEADROOM
        kwargs = container_kwargs(self.cfg, self.run_id)
        kwargs["user"] = f"{OPTIMIZER_UID}:{OPTIMIZER_UID}"
        kwargs["labels"] = {
            LABEL: "1",
            f"{LABEL}.run": self.run_id,
            f"{LABEL}.role": "optimizer-shell",
            **owner_labels(),
        }
        inodes = max(VIEW_FILES_CAP, packed.entries) + 64
        kwargs["tmpfs"] = {
            "/tmp": f"size={max(64, self.cfg.out_mb)}m,mode=1777",
            "/view": f"size={size},nr_inodes={inodes},uid={OPTIMIZER_UID},gid={OPTIMIZER_UID},mode=0700,exec",
        }
        # tmpfs pages are charged to the container's memory: its processes keep memory_mb.
        kwargs["mem_limit"] = kwargs["memswap_limit"] = f"{self.cfg.memory_mb + -(-size >> 20)}m"
        kwargs["environment"] = {
            "HOME": "/view",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HO_LIFELINE": "stdin",  # PID 1 exits when the attach socket below closes: the run died
        }
        # No working_dir: the engine would make /view 0755; each exec sets its cwd.
        volumes = {}
        if socket_dir is not None:  # the gateway, for an agent: its socket dir, read-only
            volumes[socket_dir] = {"bind": GATEWAY_DIR, "mode": "ro"}
            if (gid := _gateway_gid(socket_dir)) is not None:
                kwargs["group_add"] = [str(gid)]  # the run's group: lets it reach the socket
        container = self.client.containers.create(
            self.cfg.image, command=[*RUNNER, "idle"], volumes=volumes, **kwargs
        )
        register_live(container)
        try:
            self._lifeline = self.client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
            container.start()
            container.reload()
            self._init_pid = int(container.attrs["State"]["Pid"])
            self._usage = self._seed(container, packed.data)
        except Exception:
            remove_container(container)
            self._close_lifeline()
            raise
        self._synced_size = packed.size
        self._container = container
        self._socket_dir = socket_dir
        return container

    def _seed(self, container: Any, data: bytes) -> view_sync.TmpfsUsage:
        """Unpack the host view's tar into the container's /view (``tar -x`` there, as its uid)."""
        result = self._bounded(container, view_sync.TAR_IN, data, 4096, SYNC_WAIT_S)
        usage = view_sync.TmpfsUsage.parse(bytes(result.get("output", b"")))
        if result.get("code") != 0 or usage is None:
            why = result.get("error") or bytes(result.get("stderr", b"")).decode("utf-8", "replace")
            raise RuntimeError(f"could not copy the view in: {why.strip() or 'no answer'}")
        return usage

    def _copy_out(self) -> tuple[bool, str]:
        """``_sync_back`` after a call, unless a process survived the runner's sweep: it may still
        write, so the container is dropped and nothing of the call is kept (the note says so)."""
        if self._only_init_left():
            return self._sync_back()
        self._drop()
        return False, SURVIVORS_NOTE

    def _sync_back(self) -> tuple[bool, str]:
        """Copy the container's /view out in place of the host view's contents: (False, "") when
        done; (True, note) when the call grew it past its caps; (False, note) when the copy
        failed. Either way but the first the container is dropped and the host view kept."""
        base = self._usage
        if self._container is None or base is None:
            return False, ""
        max_bytes = self._synced_size + VIEW_GROWTH_CAP
        cap = max_bytes + (VIEW_FILES_CAP + 64) * 3 * view_sync.untar.BLOCK + (1 << 20)

        def outgrown(usage: view_sync.TmpfsUsage) -> bool:
            return usage.used - base.used > VIEW_GROWTH_CAP or usage.inodes - 1 > VIEW_FILES_CAP

        argv = view_sync.tar_out(base.used + VIEW_GROWTH_CAP, VIEW_FILES_CAP + 1, max_bytes)
        result = self._bounded(self._container, argv, b"", cap, SYNC_WAIT_S)
        out = result.get("output", b"")
        line, _, _ = bytes(out[:200]).partition(b"\n")
        usage = view_sync.TmpfsUsage.parse(line)
        if usage is not None and (outgrown(usage) or len(out) > cap or result.get("code") == view_sync.OVER):
            self._drop()
            return True, ""
        if result.get("code") not in (0, 1) or usage is None:  # tar's 1: a file changed as it read
            why = result.get("error") or bytes(result.get("stderr", b"")).decode("utf-8", "replace")
            self._drop()
            return (
                False,
                f"[harnessopt: the view could not be copied out of the container: {why.strip()[:300]}]",
            )
        data = bytes(memoryview(out)[len(line) + 1 :])
        del out, result
        members = max(VIEW_FILES_CAP, base.inodes) + 64
        done = view_sync.replace(self.view, data, max_bytes=max_bytes, max_members=members)
        if done.stopped:
            self._drop()
            return (
                done.over_cap,
                "" if done.over_cap else f"[harnessopt: the view's copy out: {done.stopped}]",
            )
        self._usage, self._synced_size = usage, done.size
        self._list_discarded(done.skipped_names)
        return False, ""

    def _list_discarded(self, names: list[str]) -> None:
        """What the last copy out left behind (symlinks, FIFOs: only regular files and directories
        come out), for the copy-back to report as discarded (``protocols.discarded_list``), and a
        note to the optimizer when that changes (QA: under Docker they vanished unsaid, where a
        local view kept them and the copy-back listed them)."""
        path = discarded_list(self.view)
        if names:
            path.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
        else:
            path.unlink(missing_ok=True)
        fresh = sorted(set(names) - set(self._discarded))
        self._discarded = names
        shown = ", ".join(fresh[:5]) + (f" and {len(fresh) - 5} more" if len(fresh) > 5 else "")
        self._discard_note = (
            f"[harnessopt: not copied out of the container, so discarded: {shown} (only regular files "
            "and directories are kept)]"
            if fresh
            else ""
        )

    def _close_lifeline(self) -> None:
        if self._lifeline is not None:
            with contextlib.suppress(Exception):
                self._lifeline.close()
            self._lifeline = None

    def _drop(self) -> None:
        if self._container is not None:
            remove_container(self._container)
            self._close_lifeline()
            self._container = None
            self._socket_dir = None
            self._init_pid = None
            self._usage = None


def _notes(text: str, outgrown: bool, note: str) -> str:
    """What the host adds to a call's output after copying the view out (``_sync_back``)."""
    if outgrown:
        stopped = "" if "may grow by" in text else f"\n{STOPPED_NOTE}"
        return f"{stopped}\n{DISCARDED_NOTE}\n"
    return f"\n{note}\n{DISCARDED_NOTE}\n" if note else ""


def _gateway_gid(socket_dir: str) -> int | None:
    """The group reserved for the run that may pass the gateway's socket dir; for a dir without
    one (a test's echo server), None after letting others traverse it (as the task pool does)."""
    gid = gateway_group(socket_dir)
    if gid is None:
        os.chmod(socket_dir, os.stat(socket_dir).st_mode & 0o7777 | 0o111)
    return gid
