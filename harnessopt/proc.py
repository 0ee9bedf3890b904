"""Run one subprocess in its own session, with a deadline and capped output.

The one place that starts a child the host does not trust to end by itself: the local sandbox's
harness, the local shell's ``bash -c`` and the ``command`` optimizer's agent. The child gets a new
session; at the deadline, and also when it exits in time, everything in that session is killed,
and while the child has not been reaped also everything descending from it, also a process that
left the session (``setsid``) or its process group (``setpgid``). So background jobs never
outlive the call. (A process that both leaves the session and is orphaned, by a double fork,
before the child is reaped is out of reach here: the local sandbox puts a subreaper or a PID
namespace around the child for that, see ``harnessopt.sandbox.isolation``.) Output goes to
unlinked temp files, never pipes, so a background child holding stdout open cannot hang the
caller; only the head and tail are read back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harnessopt.textutil import head_tail_of_file

KILL_GRACE_S = 2.0  # after SIGKILL, how long to wait for the main process to be reaped
_MAX_FREEZE_ROUNDS = 100  # scans of /proc while stopping a session that keeps forking


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
            preexec_fn=preexec_fn,
        )
        timed_out = False
        try:
            if started is not None:
                started(proc.pid)
            try:
                # communicate() writes stdin without blocking on a child that never reads it.
                proc.communicate(stdin, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:
            # Also when it exited in time: background processes it left behind must not outlive it.
            kill_session(proc.pid, term_grace_s, leader_alive=proc.returncode is None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE_S)
        wall = time.monotonic() - t0
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
