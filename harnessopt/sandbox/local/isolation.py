"""How the local sandbox wraps a host subprocess: ``bwrap``, ``unshare`` or ``session``.

``detect()`` picks the strongest that works on this machine (probed once per process):

* ``bwrap`` (bubblewrap installed, and allowed to make namespaces): the host's file system
  read-only, a private ``/tmp``, the workspace (found from the paths a task names) hidden under an
  empty tmpfs, only the task's own directories writable, its own PID namespace (host processes are
  out of sight; when the harness exits, everything it started dies with the namespace), a new
  session, ``--die-with-parent``, no capabilities. The network is shared, so the harness still
  reaches the gateway's loopback port (and everything else).
* ``unshare`` (util-linux; root, or unprivileged user namespaces): its own PID namespace and
  ``/proc``, with ``reaper.py`` as its PID 1; nothing else is hidden.
* ``session``: no namespace at all; ``reaper.py`` (a child subreaper) keeps orphans of the command
  as its descendants and kills them when the command exits; the host kills by session.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

MODES = ("bwrap", "unshare", "session")
REAPER = Path(__file__).with_name("reaper.py")
WORKSPACE_MARKERS = ("harnessopt.yaml", "scorer.py")
_PROBE_TIMEOUT_S = 10.0

# What a harness in each mode can still reach (the sandbox's warnings and RunOutput notes).
HARNESS_REACH = {
    "bwrap": "every host file read-only except the workspace it runs for (tasks/ with gold answers "
    "and scorer.py hidden; other copies of them are not), and the network; other processes are out "
    "of sight (own PID namespace)",
    "unshare": "the host's files, read and write, including the workspace's tasks/ with gold answers "
    "and scorer.py, and the network; other processes are out of sight (own PID namespace)",
    "session": "the host's files, read and write, including the workspace's tasks/ with gold answers "
    "and scorer.py, the network, and other processes of the same uid (signals, ptrace, /proc)",
}
SHELL_REACH = {
    "bwrap": "every host file read-only (including the workspace's tasks/ with gold answers and "
    "scorer.py) but /tmp, which is its own (empty), only the view writable, and the network; other "
    "processes are out of sight",
    "unshare": HARNESS_REACH["unshare"],
    "session": HARNESS_REACH["session"],
}
NOTES = {
    "bwrap": "local sandbox (bwrap): host files read-only, the workspace hidden, own PID namespace; "
    "network not isolated",
    "unshare": "local sandbox (unshare): own PID namespace; no file-system or network isolation",
    "session": "local sandbox (session): no file-system, network or process isolation",
}


@functools.cache
def detect() -> str:
    """The strongest mode that works here: ``bwrap``, else ``unshare``, else ``session``."""
    for mode in ("bwrap", "unshare"):
        if available(mode):
            return mode
    return "session"


@functools.cache
def available(mode: str) -> bool:
    """Whether ``mode`` works on this machine (installed and allowed to make its namespaces)."""
    if mode == "session":
        return True
    if not sys.platform.startswith("linux"):
        return False
    tool = {"bwrap": "bwrap", "unshare": "unshare"}.get(mode)
    if tool is None or shutil.which(tool) is None:
        return False
    probe = wrap(["true"], mode, writable=[], hide=[], cwd=Path("/"), reap=False)
    try:
        done = subprocess.run(probe, capture_output=True, timeout=_PROBE_TIMEOUT_S, env={"PATH": _path()})
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def wrap(
    argv: Sequence[str],
    mode: str,
    *,
    writable: Iterable[Path],
    hide: Iterable[Path],
    cwd: Path,
    reap: bool = True,
    grace_s: float = 0.0,
    readonly: Iterable[tuple[Path, Path]] = (),
) -> list[str]:
    """``argv`` as run in ``mode``. ``writable``: directories a ``bwrap`` command may write (bound
    read-write, also inside a hidden one); ``hide``: directories ``bwrap`` covers with an empty
    tmpfs; ``readonly``: (host dir, where it appears) pairs ``bwrap`` binds read-only after the
    writable ones (only ``bwrap`` can; the others ignore them). ``reap``: put ``reaper.py`` (with
    ``grace_s``) between the namespace and the command.
    """
    if mode not in MODES:
        raise ValueError(f"unknown local isolation {mode!r}; known: {', '.join(MODES)}")
    if mode == "bwrap":
        return _bwrap(argv, writable=writable, hide=hide, cwd=cwd, readonly=readonly)
    inner = [sys.executable, "-I", "-S", str(REAPER), f"{grace_s:g}", *argv] if reap else list(argv)
    if mode == "unshare":
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        return ["unshare", *user, "--pid", "--fork", "--kill-child", "--mount-proc", *inner]
    return inner


def wrapper_env(mode: str, cwd: Path) -> dict[str, str]:
    """What the wrapper of ``mode`` adds to the command's environment: ``bwrap`` sets ``PWD`` to
    its ``--chdir``. (A warm interpreter's job must carry it: the job's environment replaces the
    one the wrapper passed on.)"""
    return {"PWD": str(cwd)} if mode == "bwrap" else {}


def _bwrap(
    argv: Sequence[str],
    *,
    writable: Iterable[Path],
    hide: Iterable[Path],
    cwd: Path,
    readonly: Iterable[tuple[Path, Path]] = (),
) -> list[str]:
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    args += ["--tmpfs", "/dev/shm"]
    hidden = [Path(h) for h in hide]
    for h in hidden:
        args += ["--tmpfs", str(h)]
    # The interpreter must stay visible even if it lives in a hidden directory (a venv in the workspace).
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}):
        if any(Path(prefix).is_relative_to(h) for h in hidden):
            args += ["--ro-bind", prefix, prefix]
    for w in writable:
        args += ["--bind", str(w), str(w)]
    for src, dest in readonly:
        args += ["--ro-bind", str(src), str(dest)]
    args += ["--chdir", str(cwd), "--die-with-parent", "--new-session", "--unshare-pid"]
    if os.geteuid() == 0:
        args += ["--cap-drop", "ALL"]  # else root in the sandbox could remount / read-write or unhide
    return [*args, "--", *argv]


def workspace_roots(paths: Iterable[Path]) -> list[Path]:
    """Ancestors of ``paths`` (themselves included) that look like a harnessopt workspace: they hold
    ``harnessopt.yaml`` or ``scorer.py``. Never ``/``.
    """
    found: set[Path] = set()
    for p in paths:
        resolved = Path(p).resolve()
        for d in [resolved, *resolved.parents]:
            if d != d.parent and any((d / m).exists() for m in WORKSPACE_MARKERS):
                found.add(d)
    return sorted(found)


def _path() -> str:
    return os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
