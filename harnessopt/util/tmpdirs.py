"""One temporary folder per harnessopt process, so that a killed run's files do not outlive it.

A run makes many temporary folders (the gateway's sockets, the optimizer's views, candidate
copies, the local sandbox's task folders, the Docker pool's slots, each holding trajectories).
Every one is removed on the way out, Ctrl-C and SIGTERM included; SIGKILL (the OOM killer,
``kill -9``) runs no way out, and they stayed in ``/tmp`` for good.

``claimed()`` makes ``<tmp>/ho-run-XXXXXXXX`` for the process, holds an exclusive ``flock`` on
its ``owner`` file for as long as the process lives (the kernel drops it when the process dies,
however it dies), and points ``tempfile`` at it, so every temporary folder of the process, ours
and the libraries', is made inside; on the way out it removes the folder. Before that it
sweeps: a sibling folder whose lock nobody holds is a dead run's, and is removed. A folder made
in the last ``YOUNG_S`` seconds is left alone (its maker may not hold its lock yet), and so is
one of another user's. Child processes keep their own ``TMPDIR``.

A Ray worker keeps a run's files in ``<tmp>/ho-ray-RUN/PID`` (``rollout.ray.worker``), holding the
same lock on ``PID/owner``; the head removes the run's folder at its end, but a run killed outright
never ends it there. The sweep removes a ``ho-ray-`` folder none of whose workers holds its lock.

Where the temporary directory's path is long (macOS's ``/var/folders/...``), no folder is
claimed and ``tempfile`` is left as it was: a Unix socket's path (the gateway's, inside a
temporary folder) must fit in about 100 bytes. Nor where the folder cannot be made (a full or
read-only disk): ``status`` still runs, and what needs a temporary folder says why itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "ho-run-"
RAY_PREFIX = "ho-ray-"  # a Ray run's folder on a node: one folder per worker process, each with its OWNER
OWNER = "owner"  # the lock file: flock(LOCK_EX) held by the live process
YOUNG_S = 60.0  # a folder this new may not be locked yet: never swept
# Longer base paths claim nothing: the gateway's lease sockets ("l-" + 16 hex + ".sock", in a
# folder such as "ho-relay-XXXXXXXX" inside ours) must stay within 100 bytes (sun_path: 108, 104).
MAX_BASE = 100 - len(f"/{PREFIX}12345678") - len("/ho-relay-12345678") - len("/l-0123456789abcdef.sock")


def sweep(base: Path) -> list[Path]:
    """Remove the folders of dead harnessopt processes under ``base``: those whose owner lock is
    free (a Ray run's: all its workers' locks), older than ``YOUNG_S``, of this user. Returns what
    it removed."""
    removed: list[Path] = []
    now = time.time()
    uid = os.geteuid()
    try:
        names = [n for n in os.listdir(base) if n.startswith((PREFIX, RAY_PREFIX))]
    except OSError:
        return removed
    for name in names:
        path = base / name
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone meanwhile
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or now - st.st_mtime < YOUNG_S:  # lstat: no link
            continue
        owners = [path] if name.startswith(PREFIX) else _workers(path)
        with contextlib.ExitStack() as held:
            if all(_take(held, owner) for owner in owners):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _workers(run: Path) -> list[Path]:
    """A Ray run's worker folders on this node (named by their process ids)."""
    try:
        return [run / n for n in os.listdir(run) if n.isdigit()]
    except OSError:
        return []


def hold(folder: Path) -> int:
    """Lock ``folder``'s owner file for as long as this process lives (or the fd is closed): the
    sweep leaves the folder alone meanwhile. Returns the fd."""
    fd = os.open(folder / OWNER, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _take(held: contextlib.ExitStack, folder: Path) -> bool:
    """Whether ``folder``'s owner is dead: its lock taken (kept in ``held`` until the removal), or
    never made (its maker died between the folder and the lock)."""
    try:
        fd = os.open(folder / OWNER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    held.callback(os.close, fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: a live process owns it
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def claimed(base: Path | None = None) -> Iterator[Path | None]:
    """This process's temporary folder (None where the base path is too long to claim one), the
    default of ``tempfile`` while the block runs; dead runs' folders swept first, ours removed last."""
    root = Path(base or tempfile.gettempdir())
    if len(str(root)) > MAX_BASE:
        yield None
        return
    sweep(root)
    try:
        path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    except OSError:  # a full or read-only disk: `status` must still run (what needs a folder says so)
        yield None
        return
    before, fd = tempfile.tempdir, -1
    try:
        fd = hold(path)
        tempfile.tempdir = str(path)
        yield path
    finally:
        tempfile.tempdir = before
        shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)
