"""Run a command under a subreaper that kills everything the command leaves behind, then exits.

``python -I -S reaper.py GRACE_S CMD [ARG...]`` (a standalone script: it imports nothing from
harnessopt, so it runs with the harness's scrubbed environment). It marks itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``), so a process the command orphans, even one that
double-forks and calls ``setsid``, is re-parented to the reaper rather than to init. When the
command exits, every descendant left gets SIGTERM, ``GRACE_S`` seconds, then SIGKILL, until none is
left; then the reaper exits with the command's status (a signal re-raised, or 128+N when the
reaper is PID 1 of a namespace, where a self-sent signal is ignored). As PID 1 of a PID namespace
(``unshare --pid``) it also reaps orphans and makes the command a process like any other.

A command that kills the reaper itself (same uid) escapes this; the host's kill by session is
the fallback, and a PID namespace (``unshare``/``bwrap``) the real fix.

SIGUSR1 is the host's death (the parent-death signal ``harnessopt.util.proc`` asks the kernel
for): the command gets SIGKILL at once and its leftovers are killed as above, so a run killed
with SIGKILL, which kills no session, leaves no task running.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
MAX_SWEEPS = 1000  # a process that forks faster than it is killed still ends: the host kills the rest


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (zombies included)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:  # no CONFIG_PROC_CHILDREN: scan every process's parent
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        stat = f.read()
                except OSError:
                    continue
                if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
                    found.append(int(name))
        return found


def _descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = _children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _reap_all() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _kill_leftovers(grace_s: float) -> None:
    me = os.getpid()
    left = _descendants(me)
    if left and grace_s > 0:
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGTERM)
        time.sleep(grace_s)
    for _ in range(MAX_SWEEPS):
        _reap_all()
        left = _children(me)  # grandchildren come up to us as their parents die
        if not left:
            return
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)


def _exit_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if os.getpid() != 1:
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    grace_s, command = float(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Survive the host's SIGTERM to the whole session while the tree is killed; a Python handler
    # (not SIG_IGN) so that the command, after exec, starts with the default action.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    # The host died (its parent-death signal): nothing will stop the command at its deadline.
    host_gone: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: host_gone.append(1))
    child = os.posix_spawnp(command[0], command, os.environ)
    signal.signal(signal.SIGUSR1, lambda *_: os.kill(child, signal.SIGKILL))
    if host_gone:  # it came while the command was being started
        os.kill(child, signal.SIGKILL)
    status = 0
    while True:
        pid, st = os.wait()  # reaps orphans handed to us too
        if pid == child:
            status = st
            break
    _kill_leftovers(grace_s)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
