"""One read-only copy of each candidate, shared by the tasks of a sandbox.

A round runs the same candidate (skill/ and harness/) on many tasks. Copying a 6 MB skill into
every task's slot costs more than the task's own start; instead a sandbox prepares one copy per
candidate under its private ``root`` and each task gets that copy read-only: Docker bind-mounts
``root`` read-only into every container and points the slot's ``skill``/``harness`` at the
candidate's copy, ``bwrap`` binds the copy read-only over the task's own ``skill``/``harness``.

A candidate is recognised by a signature of its two directories (paths, names, sizes, modes,
mtimes and inodes of every file copied), so a directory changed in place gets a new copy. A copy
is removed once no task uses it and ``keep`` newer ones exist. Each copy lives in a directory
named by a random token; as root, ``root`` is ``root:65534`` mode 0710, so the container's uid
65534 can reach a copy whose name it was given, but cannot list the others.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

Copy = Callable[[Path, Path], None]


@dataclass
class _Entry:
    token: str
    ready: threading.Event
    users: int = 0
    error: BaseException | None = None


class PreparedCopies:
    """Per-candidate copies of skill/ and harness/ under one private directory; thread-safe."""

    def __init__(self, copy: Copy, *, skip: tuple[str, ...], group: int | None, keep: int = 4):
        """``copy(src, dest)`` makes one directory's copy; ``skip``: names it leaves out (they do not
        count in the signature either); ``group``: gid that may traverse ``root`` (as root)."""
        self.copy = copy
        self.skip = frozenset(skip)
        self.keep = keep
        self.group = group
        self.root = Path(tempfile.mkdtemp(prefix="ho-cands-"))
        if os.geteuid() == 0 and group is not None:
            os.chown(self.root, 0, group)
            self.root.chmod(0o710)  # the group may pass through to a named copy, not list them
        else:
            self.root.chmod(0o711)
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}  # signature -> entry, oldest first

    @contextmanager
    def use(self, skill_dir: Path, harness_dir: Path) -> Iterator[Path]:
        """The prepared copy of this candidate (``<copy>/skill``, ``<copy>/harness``), made on
        first use and kept while the block runs."""
        key = self.signature(skill_dir, harness_dir)
        with self._lock:
            entry = self._entries.get(key)
            mine = entry is None
            if entry is None:
                entry = _Entry(secrets.token_hex(16), threading.Event())
            else:
                del self._entries[key]
            self._entries[key] = entry  # the newest: evicted last
            entry.users += 1
        try:
            if mine:
                self._prepare(entry, skill_dir, harness_dir)
            entry.ready.wait()
            if entry.error is not None:
                raise RuntimeError(f"could not prepare the candidate's copy: {entry.error}")
            yield self.root / entry.token
        finally:
            with self._lock:
                entry.users -= 1
                if entry.error is not None and self._entries.get(key) is entry:
                    del self._entries[key]  # the next task tries again
                stale = self._evictable()
            for token in stale:
                shutil.rmtree(self.root / token, ignore_errors=True)

    def signature(self, *dirs: Path) -> str:
        """What identifies a candidate's content without reading it: every copied file's stat."""
        h = hashlib.sha256()
        for d in dirs:
            h.update(f"{Path(d).resolve()}\0".encode())
            for here, subdirs, files in os.walk(d):
                subdirs[:] = sorted(s for s in subdirs if s not in self.skip)
                for name in sorted(files):
                    if name in self.skip:
                        continue
                    path = os.path.join(here, name)
                    st = os.lstat(path)
                    rel = os.path.relpath(path, d)
                    h.update(f"{rel}\0{st.st_size}\0{st.st_mode}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
        return h.hexdigest()

    def close(self) -> None:
        """Remove every copy."""
        with self._lock:
            self._entries.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def _prepare(self, entry: _Entry, skill_dir: Path, harness_dir: Path) -> None:
        dest = self.root / entry.token
        try:
            dest.mkdir()
            if self.group is None:
                dest.chmod(0o700)  # only this uid's tasks read it
            elif os.geteuid() == 0:
                os.chown(dest, 0, self.group)
                dest.chmod(0o750)
            else:
                dest.chmod(0o755)  # no secret in it: the candidate, as each slot held it before
            self.copy(Path(skill_dir), dest / "skill")
            self.copy(Path(harness_dir), dest / "harness")
        except BaseException as e:
            entry.error = e
            shutil.rmtree(dest, ignore_errors=True)
            if not isinstance(e, Exception):
                raise
        finally:
            entry.ready.set()

    def _evictable(self) -> list[str]:
        """Tokens of unused copies beyond the ``keep`` newest (called with the lock held)."""
        out = []
        extra = len(self._entries) - self.keep
        for key, entry in list(self._entries.items()):
            if extra <= 0:
                break
            if entry.users == 0 and entry.ready.is_set():
                del self._entries[key]
                out.append(entry.token)
                extra -= 1
        return out
