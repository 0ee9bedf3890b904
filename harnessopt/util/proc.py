"""Run one subprocess in its own session, with a deadline and capped output.

The one place that starts a child the host does not trust to end by itself: the local sandbox's
harness, the local shell's ``bash -c`` and the ``command`` optimizer's agent. The child gets a new
session; at the deadline, and also when it exits in time, everything in that session is killed,
and while the child has not been reaped also everything descending from it, also a process that
left the session (``setsid``) or its process group (``setpgid``). So background jobs never
outlive the call. (A process that both leaves the session and is orphaned, by a double fork,
before the child is reaped is out of reach here: the local sandbox puts a subreaper or a PID
namespace around the child for that, see ``harnessopt.sandbox.local.isolation``.) Output goes to
unlinked temp files, never pipes, so a background child holding stdout open cannot hang the
caller; only the head and tail are read back.

The child also ends with this process: it is started with a parent-death signal (``HOST_DEATH``,
``PR_SET_PDEATHSIG``), which the kernel sends when the thread that started it dies, a SIGKILL of
the run included, where no clean-up of ours runs. The local sandbox's wrappers turn that signal
into the end of everything under them (``reaper.py`` kills its command's tree, ``unshare
--kill-child`` its PID namespace; ``bwrap --die-with-parent`` sets its own).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import math
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from harnessopt.util import interrupts
from harnessopt.util.text import head_tail_of_file

KILL_GRACE_S = 2.0  # after SIGKILL, how long to wait for the main process to be reaped
# A wait returns to the interpreter at least this often: an interrupt raised without a real signal
# (``_thread.interrupt_main``, how Ray cancels a running task) is only seen between bytecodes.
INTERRUPT_CHECK_S = 0.2
_MAX_FREEZE_ROUNDS = 100  # scans of /proc while stopping a session that keeps forking
HOST_DEATH = signal.SIGUSR1  # a child's parent-death signal: reaper.py ends its tree on it
_PR_SET_PDEATHSIG = 1
try:  # loaded here, not in a child between fork and exec
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # no libc by that name: children do not end with the host (SIGKILL leaves them)
    _LIBC = None


def _ending_with_host(preexec_fn: Callable[[], None] | None) -> Callable[[], None]:
    """A child's pre-exec hook: ``preexec_fn``, after asking the kernel for ``HOST_DEATH`` when the
    thread that starts it dies (also by SIGKILL, where no clean-up runs)."""
    host = os.getpid()

    def hook() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(HOST_DEATH), 0, 0, 0)
            if os.getppid() != host:  # the host died between the fork and the prctl
                os.kill(os.getpid(), HOST_DEATH)
        if preexec_fn is not None:
            preexec_fn()

    return hook


@dataclass(frozen=True)
class Finished:
    """How a child ended: its exit code (``None`` when killed at the deadline) and capped output."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout: str  # head and tail, ``cap`` bytes at most (stdout and stderr together when merged)
    stderr: str
    stdout_bytes: int  # full sizes, before capping
    stderr_bytes: int


def run_in_session(
    argv: Sequence[str],
    *,
    timeout_s: float,
    cap: int,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    merge_stderr: bool = False,
    preexec_fn: Callable[[], None] | None = None,
    started: Callable[[int], None] | None = None,
    term_grace_s: float = 0.0,
) -> Finished:
    """Run ``argv`` to its end or its deadline; its whole session is killed either way.

    ``stdin``: bytes fed to the child (else it reads /dev/null). ``started(pid)`` is called once
    the child exists (the pid is also its session and process group id), e.g. to let another
    thread kill it with ``kill_session``.
    ``term_grace_s`` > 0: leftovers get SIGTERM and that long before SIGKILL. An exception in
    the caller's thread while waiting (Ctrl-C) kills the group before it propagates.
    """
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if merge_stderr else err,
            start_new_session=True,
            preexec_fn=_ending_with_host(preexec_fn),
        )
        timed_out = False
        try:
            if started is not None:
                started(proc.pid)
            try:
                if stdin is None:
                    timed_out = not wait_for_exit(proc, timeout_s)
                else:  # communicate() writes stdin without blocking on a child that never reads it.
                    proc.communicate(stdin, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            # Also when it exited in time: background processes it left behind must not outlive it.
            kill_session(proc.pid, term_grace_s, leader_alive=proc.returncode is None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE_S)
        return _finished(proc, timed_out, time.monotonic() - t0, out, err, cap)


def _finished(
    proc: subprocess.Popen[bytes], timed_out: bool, wall: float, out: IO[bytes], err: IO[bytes], cap: int
) -> Finished:
    sizes = (out.seek(0, os.SEEK_END), err.seek(0, os.SEEK_END))
    return Finished(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        wall_s=wall,
        stdout=head_tail_of_file(out, cap),
        stderr=head_tail_of_file(err, cap),
        stdout_bytes=sizes[0],
        stderr_bytes=sizes[1],
    )


class Prestarted:
    """A child started ahead in its own session that waits for its job on file descriptor ``job_fd``
    (an inherited pipe; stdin is /dev/null, stdout and stderr go to unlinked temp files as in
    ``run_in_session``). ``run(job, timeout_s)`` writes the job, closes the pipe and waits, its
    deadline counted from the write; ``discard()`` closes the pipe unwritten (the child sees EOF)
    and kills the session. Either way the whole session is killed, as ``run_in_session`` does.

    The child inherits no other descriptor of this process but ``job_fd`` (what ``close_fds``
    gives ``run_in_session``'s children). ``preexec_fn`` runs in the child before exec, after
    the pipe is in place.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cap: int,
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
        term_grace_s: float = 0.0,
        job_fd: int = 3,
    ):
        self.cap = cap
        self.term_grace_s = term_grace_s
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by run() or discard())
        self._err = tempfile.TemporaryFile()  # noqa: SIM115
        self._closed = False
        read_end, self._job = os.pipe()  # both close-on-exec: only the dup at ``job_fd`` is inherited
        with_host = _ending_with_host(preexec_fn)

        def child() -> None:
            os.dup2(read_end, job_fd)
            os.set_inheritable(job_fd, True)  # dup2 onto itself would leave it close-on-exec
            _close_inheritable_fds(above=max(job_fd, 2))
            with_host()

        try:
            self.proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
                start_new_session=True,
                close_fds=False,  # ``child`` closes the rest: close_fds would close ``job_fd`` too
                preexec_fn=child,
            )
        except BaseException:
            os.close(self._job)
            self._out.close()
            self._err.close()
            raise
        finally:
            os.close(read_end)

    @property
    def pid(self) -> int:
        """The child's pid, also its session and process group id (for ``kill_session``)."""
        return self.proc.pid

    def run(self, job: bytes, timeout_s: float) -> Finished:
        """Send ``job`` and wait for the child's end or the deadline (``timeout_s`` from now)."""
        t0 = time.monotonic()
        timed_out = False
        try:
            if not _write_all(self._job, job, t0 + timeout_s):
                timed_out = self.proc.poll() is None
            os.close(self._job)
            self._job = -1
            if not timed_out:
                timed_out = not wait_for_exit(self.proc, t0 + timeout_s - time.monotonic())
        finally:
            self._end()
        try:
            return _finished(self.proc, timed_out, time.monotonic() - t0, self._out, self._err, self.cap)
        finally:
            self._out.close()
            self._err.close()

    def discard(self) -> None:
        """Kill the child's session unused (its job pipe closed first; no grace: no job ran); never
        raises. After ``run`` it only releases what is left."""
        self._end(term_grace_s=0.0)
        self._out.close()
        self._err.close()

    def _end(self, term_grace_s: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._job >= 0:
            os.close(self._job)
            self._job = -1
        grace = self.term_grace_s if term_grace_s is None else term_grace_s
        kill_session(self.proc.pid, grace, leader_alive=self.proc.returncode is None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_GRACE_S)


def wait_for_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``proc`` to exit (and reap it); False at the deadline. Woken by
    the exit itself (a pidfd, Linux 5.3+), where ``Popen.wait(timeout)`` polls in steps of up to
    50 ms; elsewhere that. The pidfd is polled in slices of ``INTERRUPT_CHECK_S``: a poll() of the
    whole timeout would hold off a KeyboardInterrupt that comes without a signal (a Ray cancel)
    until the child exits, and a cancelled task would keep its sandbox and its node's CPU. The
    fallback waits in the same slices, and the flag is checked between them on either path."""
    deadline = time.monotonic() + timeout_s
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pidfd = None
    poller = select.poll()
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)

    def exits_within(seconds: float) -> bool:
        if pidfd is not None:
            return bool(poller.poll(math.ceil(seconds * 1000)))
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    try:
        while True:
            left = max(0.0, deadline - time.monotonic())
            exited = exits_within(min(left, INTERRUPT_CHECK_S))
            if exited or left <= INTERRUPT_CHECK_S:
                break
            interrupts.check_on_main()  # one a finalizer swallowed (with ``interrupts.install``)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if exited or proc.poll() is not None:
        proc.wait()
        return True
    return False


def _write_all(fd: int, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the pipe ``fd`` by ``deadline``; False when the reader is gone or too slow."""
    os.set_blocking(fd, False)
    poller = select.poll()  # not select(): a descriptor past 1023 is fine
    poller.register(fd, select.POLLOUT)
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(math.ceil(left * 1000)):
            return False
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
        except BrokenPipeError:  # the child ended (or closed the pipe) before reading it all
            return False
    return True


def _close_inheritable_fds(above: int) -> None:
    """In a child before exec: close every inheritable descriptor numbered above ``above``."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: every descriptor up to the limit
        fds = list(range(above + 1, os.sysconf("SC_OPEN_MAX")))
    for fd in fds:
        if fd > above:
            with contextlib.suppress(OSError):
                if os.get_inheritable(fd):
                    os.close(fd)


def kill_group(pgid: int, term_grace_s: float = 0.0) -> None:
    """Kill process group ``pgid`` (SIGTERM and a grace first when asked); never raises."""
    sigs = (signal.SIGTERM, signal.SIGKILL) if term_grace_s > 0 else (signal.SIGKILL,)
    for sig in sigs:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):  # nothing (of ours) left in the group
            return
        if sig == signal.SIGTERM:
            time.sleep(term_grace_s)


def kill_session(leader: int, term_grace_s: float = 0.0, *, leader_alive: bool = True) -> None:
    """Kill session ``leader``: every process in it or in its process group, and every descendant of
    those (of ``leader`` itself too while ``leader_alive``, i.e. not yet reaped, so its pid cannot
    have been reused). SIGTERM and ``term_grace_s`` first when asked; then the processes are
    stopped until no new one appears (a stopped process cannot fork), and killed. Never raises.
    Without ``/proc`` (not Linux) this is ``kill_group``.
    """
    if not os.path.isdir("/proc/self"):
        kill_group(leader, term_grace_s)
        return
    if term_grace_s > 0:
        members = _session_members(leader, leader_alive)
        for pid in members:
            _signal(pid, signal.SIGTERM)
        if members:
            time.sleep(term_grace_s)
    stopped: set[int] = set()
    for _ in range(_MAX_FREEZE_ROUNDS):
        new = _session_members(leader, leader_alive) - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)


def kill_marked(markers: set[str]) -> int:
    """SIGKILL every process of this uid one of whose arguments is one of ``markers`` (a task
    dir's unique path): what a session kill cannot reach, a ``bwrap --new-session`` namespace
    whose outer process died before its ``--die-with-parent`` was in place, left orphaned in a
    session of its own. Returns how many were killed; never raises."""
    if not markers or not os.path.isdir("/proc/self"):
        return 0
    uid, me, killed = os.getuid(), os.getpid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.decode("utf-8", "surrogateescape") in markers for a in args):
            _signal(int(entry.name), signal.SIGKILL)
            killed += 1
    return killed


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _session_members(leader: int, leader_alive: bool) -> set[int]:
    """Live processes in session/group ``leader`` and their descendants (see ``kill_session``)."""
    parent: dict[int, int] = {}
    seeds: set[int] = {leader} if leader_alive else set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):  # already dead; its parent reaps it
            continue
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        if (int(fields[2]) == leader or int(fields[3]) == leader) and (leader_alive or pid != leader):
            seeds.add(pid)
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    members: set[int] = set()
    todo = list(seeds)
    while todo:
        pid = todo.pop()
        if pid not in members:
            members.add(pid)
            todo.extend(children.get(pid, ()))
    members.discard(os.getpid())
    members.discard(1)
    return members
