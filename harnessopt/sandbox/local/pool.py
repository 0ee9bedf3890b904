"""Pre-started local sandboxes: the next tasks' wrapped interpreters, started while the current
tasks wait on the model (``rollout.warm_interpreter``).

A *slot* is one task's sandbox made ahead: its private task dir (home/, and skill/ and harness/
as the cold path makes them) and out dir, the isolation wrapper started in its own session with the
task's rlimits, and inside it ``runner.py warm``, an interpreter that has imported the standard
library and waits for its job on file descriptor 3. A task takes a slot only when the slot was
made for exactly what the task would have been started with (the candidate's paths and content,
the hidden workspace, the environment read at interpreter start: ``Key``); then the job (argv
and the full environment, gateway token included) is written and its deadline starts. Each slot
serves one task and is then killed and removed, as a cold task is: nothing of one task is
visible to the next.

``WarmPool`` keeps up to ``size`` idle slots for the one candidate in use, filled by one
background thread from the second task of that candidate on (a sandbox asked for one task, such
as the import check's, pre-starts nothing); a task of another candidate discards them.
``close()`` kills and removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harnessopt.protocols import RunSpec
from harnessopt.util.proc import Finished, Prestarted

# The environment the stub starts with: what an interpreter reads as it starts (runner.py's
# startup_env: a job differing there is started cold by the stub), and PATH and TMPDIR.
STATIC_PREFIXES = ("PYTHON", "LC_", "LD_", "MALLOC_", "OPENSSL_")
STATIC_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "GLIBC_TUNABLES", "TMPDIR")


@dataclass(frozen=True)
class Key:
    """What a slot was made for; a task uses a slot only when its own key is equal."""

    skill: Path
    harness: Path
    signature: str  # of the candidate's files (``PreparedCopies.signature``)
    hide: tuple[Path, ...]  # workspace roots bwrap hides
    env: tuple[tuple[str, str], ...]  # the static environment but HOME and TMPDIR (per task dir)


def static_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a job's environment the interpreter reads at start (the stub starts with it)."""
    return {k: v for k, v in env.items() if k in STATIC_ENV or k.startswith(STATIC_PREFIXES)}


def job_line(argv: list[str], env: Mapping[str, str]) -> bytes:
    """The stub's job: one JSON line (``warm-interface``)."""
    return (json.dumps({"argv": argv, "env": dict(env)}) + "\n").encode("utf-8")


class Slot:
    """One pre-started sandbox: ``root`` (the task dir), ``out`` (the harness's ``--out``), the
    waiting ``child``; ``cleanup`` kills the child and removes the dirs (and releases the
    candidate's copy) when called."""

    def __init__(self, key: Key, root: Path, out: Path, child: Prestarted, cleanup: Callable[[], None]):
        self.key = key
        self.root = root
        self.out = out
        self.child = child
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._done = False

    def alive(self) -> bool:
        """Whether the child still waits for its job."""
        return self.child.proc.poll() is None

    def run(self, job: bytes, timeout_s: float) -> Finished:
        """Hand the job over and wait for the task's end or its deadline (counted from now)."""
        return self.child.run(job, timeout_s)

    def close(self) -> None:
        """Kill what is left of the slot and remove its dir; idempotent, never raises."""
        with self._lock:
            if self._done:
                return
            self._done = True
        with contextlib.suppress(Exception):
            self._cleanup()


def copy_out(src: Path, dest: Path) -> None:
    """Copy the harness's out dir ``src`` into the empty ``dest`` on another file system (where a
    rename cannot), opening nothing but regular files and following no link: each entry is looked
    at through its directory's descriptor (``os.fwalk``), a file opened with ``O_NOFOLLOW`` and
    ``O_NONBLOCK`` and copied only if the descriptor is a regular file; symlinks and FIFOs are made
    again, sockets and devices left out. Modes and modification times are kept."""
    dirs: list[tuple[Path, os.stat_result]] = [(dest, os.stat(src))]
    for here, subdirs, files, dir_fd in os.fwalk(src, follow_symlinks=False):
        into = dest / os.path.relpath(here, src)
        for name in [*subdirs, *files]:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            target = into / name
            if stat.S_ISDIR(st.st_mode):
                target.mkdir()
                dirs.append((target, st))
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=dir_fd), target)
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(target, stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                _copy_file(name, dir_fd, target)
    for d, st in reversed(dirs):  # innermost first: a read-only dir is filled before it closes
        os.chmod(d, stat.S_IMODE(st.st_mode))
        os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_file(name: str, dir_fd: int, target: Path) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since it was looked at
            return
        with os.fdopen(os.dup(fd), "rb") as f, open(target, "xb") as out:
            shutil.copyfileobj(f, out)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


SETTLE_S = 0.25  # after a slot is taken, how long the pool waits before making the next
MAX_LOST = 3  # slots of one key that failed to start or died waiting before the pool stops making them


class WarmPool:
    """Up to ``size`` idle slots for the key in use, made by ``start(key, spec)`` in a background
    thread; thread-safe. ``take(key, spec)`` hands out a live slot made for ``key`` (else None)
    and makes ``key`` the one the pool fills for (once it was asked for twice), discarding the
    slots of another key."""

    def __init__(self, size: int, start: Callable[[Key, RunSpec], Slot], *, settle_s: float = SETTLE_S):
        """``settle_s``: after a task takes a slot, the thread waits this long before making the
        next (and removing used ones), so that its CPU does not compete with the starts of the
        tasks just handed out; they then wait on the model."""
        self.size = size
        self.start = start
        self.settle_s = settle_s
        self._last_take = 0.0
        self.failures = 0  # slots that could not be made (the tasks then start cold)
        self.taken = 0  # tasks that ran in a pre-started slot
        self._cond = threading.Condition()
        self._idle: list[Slot] = []
        self._retired: list[Slot] = []  # used slots whose dirs the thread removes
        self._key: Key | None = None
        self._armed = False  # the key was asked for a second time: fill
        self._lost = 0  # slots of this key that could not be made or died waiting
        self._spec: RunSpec | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def take(self, key: Key, spec: RunSpec) -> Slot | None:
        """A slot made for ``key``, or None (the task starts cold); the pool now fills for ``key``
        (the slots of another key are discarded by the pool's thread)."""
        stale: list[Slot] = []
        slot = None
        with self._cond:
            if self._closed:
                return None
            if key != self._key:
                stale, self._idle = self._idle, []
                self._key, self._spec, self._armed, self._lost = key, spec, False, 0
            else:
                self._armed = self._lost < MAX_LOST  # slots that keep dying: cold starts only
            while self._idle and slot is None:
                candidate = self._idle.pop(0)
                if candidate.alive():
                    slot = candidate
                    self.taken += 1
                    self._last_take = time.monotonic()
                else:
                    stale.append(candidate)
                    self._lost_one()
            if self._thread is None and (self._armed or stale):  # not for a sandbox of one task
                self._thread = threading.Thread(target=self._fill, name="ho-warm-pool", daemon=True)
                self._thread.start()
            self._retired += stale  # killed and removed by the thread, off this task's path
            self._cond.notify_all()
        return slot

    def retire(self, slot: Slot) -> None:
        """A used slot (its session already killed): its dirs are removed off the task's path, by
        the pool's thread (at once when the pool is closed)."""
        with self._cond:
            if not self._closed and self._thread is not None:
                self._retired.append(slot)
                self._cond.notify_all()
                return
        slot.close()

    def idle(self) -> list[Slot]:
        """The slots ready now (a copy of the list)."""
        with self._cond:
            return list(self._idle)

    def close(self) -> None:
        """Stop filling; kill and remove every idle slot (a slot being made is removed when made)."""
        with self._cond:
            self._closed = True
            stale, self._idle = self._idle, []
            thread = self._thread
            self._cond.notify_all()
        for s in stale:
            s.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._cond:
            retired, self._retired = self._retired, []
        for s in retired:
            s.close()

    def _lost_one(self) -> None:
        """A slot of the current key failed (called with the lock held)."""
        self._lost += 1
        if self._lost >= MAX_LOST:
            self._armed = False

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._retired) and (
                    not self._armed or len(self._idle) >= self.size
                ):
                    self._cond.wait()
                while not self._closed and (wait := self._last_take + self.settle_s - time.monotonic()) > 0:
                    self._cond.wait(wait)
                if self._closed:
                    return
                retired, self._retired = self._retired, []
                key, spec = self._key, self._spec
            for used in retired:
                used.close()
            if retired:
                continue
            assert key is not None and spec is not None
            try:
                slot = self.start(key, spec)
            except Exception:  # the tasks start cold; the next take tries again, a few times
                with self._cond:
                    self.failures += 1
                    if key == self._key:
                        self._armed = False
                        self._lost_one()
                continue
            with self._cond:
                keep = not self._closed and key == self._key and len(self._idle) < self.size
                if keep:
                    self._idle.append(slot)
            if not keep:
                slot.close()
