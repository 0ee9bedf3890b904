"""One command that changes a workspace at a time (``run``, ``rollback``, ``audit``).

An exclusive ``flock`` on ``.harnessopt/lock``, held by an open file descriptor for as long as the
command runs. The kernel drops it when the process dies, however it dies, so a lock is never
stale in the sense of blocking; the file's text (pid, host, command) only names the holder, and
a text left by a dead process is reported when the next command takes the lock over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import git

from harnessopt.errors import UserError
from harnessopt.ledger import vcs
from harnessopt.ledger.journal import STATE_DIR, WRITE_GUARDS

LOCK_NAME = "lock"
_held: dict[Path, int] = {}  # the lock file of each workspace this process holds -> its descriptor


def _lock_path(root: Path) -> Path:
    return Path(root).resolve() / STATE_DIR / LOCK_NAME


@contextlib.contextmanager
def workspace_lock(root: Path, command: str, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the workspace's lock for the block; a UserError naming the holder when it is taken."""
    path = _lock_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            _take(fd)
        except BlockingIOError:
            holder = _read(fd)
            raise UserError(
                f"{root} is in use by 'harnessopt {holder.get('command', '?')}' (pid {holder.get('pid', '?')} "
                f"on {holder.get('host', '?')}); wait for it to finish or stop it, then try again"
            ) from None
        earlier = _read(fd)
        if earlier.get("pid") and not _alive(earlier):
            say(
                f"note: took over the lock of 'harnessopt {earlier.get('command', '?')}' "
                f"(pid {earlier['pid']}), which is no longer running"
            )
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        _held[path] = fd
        _commit_identity(root, say)
        try:
            yield
        finally:
            _held.pop(path, None)
            os.ftruncate(fd, 0)  # a clean exit leaves no name behind
    finally:
        os.close(fd)  # releases the flock


def _take(fd: int, tries: int = 20) -> None:
    """The exclusive flock, tried for about 0.2 s: a ``live_holder`` (``status``) holds a shared one
    for a moment to see whether anyone holds it. BlockingIOError when a command holds it."""
    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if i == tries - 1:
                raise
            time.sleep(0.01)


def _commit_identity(root: Path, say: Callable[[str], None]) -> None:
    """A workspace's own commit identity where git has none (``vcs.ensure_identity``), said once."""
    try:
        repo = vcs.open_repo(Path(root).resolve())
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):  # not a repository: nothing commits
        return
    if vcs.ensure_identity(repo):
        say(vcs.identity_note(root))


def check_held(root: Path) -> None:
    """For a command holding the workspace's lock, before it writes a round: a UserError when the
    lock file it holds is no longer the workspace's (removed or replaced: ``.harnessopt`` deleted by
    hand), since another command may then have taken the workspace with a lock of its own, and two
    writers would overwrite each other's records. A no-op where this process holds no lock."""
    path = _lock_path(root)
    fd = _held.get(path)
    if fd is None:
        return
    held = os.fstat(fd)
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise UserError(
            f"{path} was removed during the run, so another command may be using {root} now; "
            "stopping before writing anything more (the rounds recorded so far are in git)"
        )


WRITE_GUARDS.append(check_held)  # the journal writes no line for a command whose lock file went


def live_holder(root: Path) -> dict[str, object] | None:
    """The command holding the workspace's lock now (pid, host, command, since), read from the lock
    file's text without taking the lock; None when no live process holds it."""
    try:
        fd = os.open(_lock_path(root), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        holder = _read(fd)
        if not holder.get("pid") or not _alive(holder):
            return None
        if holder.get("host") == socket.gethostname():  # this machine's flock says whether it is held
            try:  # a copy of a workspace (cp -a) names its original's live run, whose lock is not this
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # one (QA); nor is a reused pid's
                return None  # nobody holds it: the close below lets go at once
            except BlockingIOError:
                pass
        return holder
    finally:
        os.close(fd)


def _read(fd: int) -> dict[str, object]:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(holder: dict[str, object]) -> bool:
    if holder.get("host") != socket.gethostname():
        return True  # another machine's process: cannot tell, assume it lives
    try:
        os.kill(int(str(holder["pid"])), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True
