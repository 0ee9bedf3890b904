"""Warm containers for DockerSandbox: created and started ahead of the tasks that will use them.

``docker start`` costs about 0.45 s here, ``create`` 0.03 s and ``remove`` 0.05 s. A fresh
container per task is the isolation we want, so instead of reusing containers we hide that
latency: a background thread keeps ``size`` containers started and idle (the runner waits for its
job on stdin), and finished containers are removed by another background thread. A container is
handed out once and never reused. While it waits, its runner has already started the harness's
interpreter (``runner.py warm``, ``rollout.warm_interpreter``): the job only hands it the script.

Every container gets a private host *slot* directory mounted read-only at ``/ho``; the host writes
the task into it, and links ``skill`` and ``harness`` to the candidate's prepared copy under
``/ho-cand`` (``prepared.py``, mounted read-only), just before ``go``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.sandbox.image.build import LABEL, owner_labels
from harnessopt.util import interrupts

SLOT = "/ho"
RUNNER = "/opt/ho/runner.py"
GATEWAY_DIR = "/ho-gw"
CANDIDATES_DIR = "/ho-cand"  # the sandbox's prepared candidate copies, read-only (prepared.py)
CONTAINER_GID = 65534  # the task containers run as 65534:65534 (container_kwargs)
# The harness's environment before the task's own variables and the gateway's: the warm
# interpreter starts with it, so a task that changes none of its startup part runs warm.
TASK_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONPATH": "/opt/ho/site",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}

# Every container this process created and has not removed yet: removed at exit whatever happens.
_LIVE: dict[str, Any] = {}
_LIVE_LOCK = threading.Lock()


def _remove_all_live() -> None:
    with _LIVE_LOCK:
        items = list(_LIVE.items())
        _LIVE.clear()
    for _cid, container in items:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def register_live(container: Any) -> None:
    """Remember a container so that exit removes it even if its owner could not."""
    interrupts.on_exit(_remove_all_live)  # once per process; a no-op after the first container
    with _LIVE_LOCK:
        _LIVE[container.id] = container


def remove_container(container: Any) -> None:
    """Force-remove (kills it if running) and forget; never raises. When another removal of it is
    under way (the engine answers 409), wait for that one: a removed container is gone on return."""
    try:
        container.remove(force=True)
    except Exception:
        deadline = time.monotonic() + REMOVE_WAIT_S
        while time.monotonic() < deadline:
            try:
                container.reload()  # NotFound once gone; any other failure: nothing to wait for
            except Exception:
                break
            time.sleep(0.05)
    with _LIVE_LOCK:
        _LIVE.pop(container.id, None)


def gateway_group(socket_dir: str | None) -> int | None:
    """The group the gateway reserved for its socket dir (0750, not root's), or None.

    A container that joins it (``group_add``) may pass the dir and connect to the socket;
    other local users may not (see gateway/guard.py and docs/sandbox.md).
    """
    if not socket_dir:
        return None
    try:
        st = os.stat(socket_dir)
    except OSError:
        return None
    group_only = st.st_mode & 0o010 and not st.st_mode & 0o001
    return st.st_gid if group_only and st.st_gid != 0 else None


def _let_traverse(socket_dir: str | None) -> None:
    """uid 65534 in the container must pass through the (often 0700) socket dir to connect."""
    if socket_dir and gateway_group(socket_dir) is None:  # a reserved group needs no opening
        with contextlib.suppress(OSError):
            mode = os.stat(socket_dir).st_mode
            os.chmod(socket_dir, (mode & 0o7777) | 0o111)


def _open_slot_to_container(slot: Path) -> None:
    """Let the container's uid 65534 read the slot, and no other local user when we can.

    As root: ``root:65534`` mode 0750 (the container's group reads it; it cannot write a file of
    it, nor can a host process running as ``nobody``). Otherwise 0755: the slot holds the task
    without its answer and copies of the candidate, no secret (the job comes on stdin).
    """
    if os.geteuid() == 0:
        os.chown(slot, 0, CONTAINER_GID)
        slot.chmod(0o750)
    else:
        slot.chmod(0o755)


CORES_PER_TASK = 0.5  # a task's own CPU (interpreter, client, runner) fits in half a core


def concurrency_warning(concurrency: int, cores: int | None = None) -> str | None:
    """One line when ``concurrency`` asks more tasks at once than the cores can start and serve
    (more than two per core): past that, more concurrency makes a round slower, not faster."""
    cores = cores or os.cpu_count() or 1
    if concurrency * CORES_PER_TASK <= cores:
        return None
    return (
        f"warning: rollout.concurrency {concurrency} is more than this machine's {cores} core(s) can "
        f"serve ({int(cores / CORES_PER_TASK)} tasks at once); the tasks' start-up competes for CPU and "
        f"the round gets slower, not faster (docs/performance.md)"
    )


def task_command(cfg: RolloutConfig) -> list[str]:
    """The container's PID 1: the runner's task mode, with a warm interpreter started at once
    (``rollout.warm_interpreter``, docs/sandbox.md) or, without ``--warm-env``, a cold start."""
    command = ["python3", RUNNER, "task"]
    if cfg.warm_interpreter:
        command += ["--warm-env", json.dumps(TASK_ENV)]
    return command


REFILL_DELAY_S = 0.4  # after a take, before the pool starts the container replacing it
REMOVE_WAIT_S = 10.0  # how long a removal waits for another removal of the same container
CLOSE_WAIT_S = 30.0  # how long close() waits for a container start under way


@dataclass
class Warm:
    """A started container waiting for its task, with its slot dir and attach socket."""

    container: Any
    slot: Path
    sock: Any
    socket_dir: str | None


def container_kwargs(cfg: RolloutConfig, run_id: str) -> dict[str, Any]:
    """The isolation every task container gets (see docs/sandbox.md)."""
    mem = f"{cfg.memory_mb}m"
    return dict(
        network_mode="none",
        read_only=True,
        mem_limit=mem,
        memswap_limit=mem,  # no swap: the limit is a real limit
        nano_cpus=int(cfg.cpus * 1e9),
        pids_limit=cfg.pids,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        user="65534:65534",
        tmpfs={
            "/out": f"size={cfg.out_mb}m,mode=1777",
            "/tmp": f"size={max(16, min(cfg.out_mb, 256))}m,mode=1777",
        },
        labels={LABEL: "1", f"{LABEL}.run": run_id, **owner_labels()},
        log_config={"type": "none"},  # output is read from the attach stream and capped there
        ipc_mode="private",
        init=False,  # the runner is PID 1: it reaps, and kill(-1) from PID 1 reaches everything
        # The run holds every container's stdin through an attach socket: a task container's job
        # comes on it (the run's token is in no file), the optimizer container's PID 1 watches it
        # (HO_LIFELINE). StdinOnce (docker-py sets it only when not detached; start() is detached
        # either way): the engine closes that stdin when the socket closes, so the containers of a
        # run killed with SIGKILL, which no clean-up reaches, read EOF and exit instead of waiting
        # for a job or a command for ever.
        stdin_open=True,
        detach=False,
    )


class WarmPool:
    """Keeps ``size`` started containers for one gateway socket directory."""

    def __init__(
        self, client: Any, cfg: RolloutConfig, run_id: str, size: int, mounts: dict[str, str] | None = None
    ):
        """``mounts``: host directory -> path in every container, bound read-only."""
        self.client = client
        self.mounts = dict(mounts or {})
        self.cfg = cfg
        self.run_id = run_id
        self.size = size
        self.socket_dir: str | None = None
        self._ready: queue.Queue[Warm] = queue.Queue()
        self._want = threading.Semaphore(0)
        self._trash: queue.Queue[Warm | None] = queue.Queue()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._fillers: list[threading.Thread] = []
        self._slots: set[Path] = set()  # every slot folder made and not yet removed: close removes the rest
        self._slots_lock = threading.Lock()  # not self._lock: a slot is removed under it (_drain)
        self._reaper = threading.Thread(target=self._reap, name="ho-reaper", daemon=True)
        self._reaper.start()

    def prewarm(self, socket_dir: str | None) -> None:
        """Start filling for ``socket_dir`` now, before the first task asks (``take`` does it too)."""
        with self._lock:
            if socket_dir != self.socket_dir:  # another gateway: the warm ones mount the wrong dir
                self.socket_dir = socket_dir
                _let_traverse(socket_dir)
                self._drain()
            if not self._fillers:  # one starter per slot: starts overlap, as tasks do
                for i in range(max(self.size, 1)):
                    t = threading.Thread(target=self._fill, name=f"ho-pool-{i}", daemon=True)
                    t.start()
                    self._fillers.append(t)
                    self._want.release()

    def take(self, socket_dir: str | None) -> Warm:
        """A started container for ``socket_dir``: a warm one when ready, else made now; none once
        the pool is closed (a task that starts as the run stops would leave a container and slot)."""
        if self._closed.is_set():
            raise RuntimeError("the sandbox is closed")
        self.prewarm(socket_dir)
        while True:
            try:
                warm = self._ready.get_nowait()
            except queue.Empty:
                warm = None
            self._want.release()  # after the get: a starter that wakes must see the gap we made
            if warm is None:
                return self.make(socket_dir)
            if warm.socket_dir == socket_dir:
                return warm
            self.discard(warm)

    def discard(self, warm: Warm) -> None:
        """Hand a used container to the background reaper (or remove it now once closed)."""
        if self._reaper.is_alive() and not self._closed.is_set():
            self._trash.put(warm)
        else:
            self._dispose(warm)

    def close(self) -> None:
        self._closed.set()
        for _ in self._fillers:
            self._want.release()
        for t in self._fillers:  # a start under way ends first (its container is then removed)
            t.join(timeout=CLOSE_WAIT_S)
        with self._lock:
            self._drain()
        # Containers still running a task (Ctrl-C, a crash): removing them ends their tasks now,
        # instead of the exit waiting for each to reach its timeout.
        with contextlib.suppress(Exception):
            label = {"label": f"{LABEL}.run={self.run_id}"}
            # ignore_removed: one the reaper removes meanwhile must not end the sweep (NotFound)
            for c in self.client.containers.list(all=True, filters=label, ignore_removed=True):
                remove_container(c)
        self._trash.put(None)
        self._reaper.join(timeout=60)
        # The slots of containers a task held when the run stopped (Ctrl-C, SIGTERM, a crash): their
        # containers are gone, and no one else will remove their folders.
        with self._slots_lock:
            left, self._slots = self._slots, set()
        for slot in left:
            shutil.rmtree(slot, ignore_errors=True)

    def make(self, socket_dir: str | None) -> Warm:
        """Create, attach and start one container (about 0.5 s)."""
        slot = Path(tempfile.mkdtemp(prefix="ho-slot-"))
        with self._slots_lock:
            self._slots.add(slot)
        _open_slot_to_container(slot)
        volumes = {str(slot): {"bind": SLOT, "mode": "ro"}}
        if socket_dir:
            volumes[socket_dir] = {"bind": GATEWAY_DIR, "mode": "ro"}
        for host, inside in self.mounts.items():
            volumes[host] = {"bind": inside, "mode": "ro"}
        kwargs = container_kwargs(self.cfg, self.run_id)
        if (gid := gateway_group(socket_dir)) is not None:
            kwargs["group_add"] = [str(gid)]  # the run's group: lets it reach the gateway socket
        container = None
        try:
            container = self.client.containers.create(
                self.cfg.image, task_command(self.cfg), volumes=volumes, **kwargs
            )
            register_live(container)
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            sock = self.client.api.attach_socket(container.id, params=params)
            container.start()
        except BaseException:
            if container is not None:
                remove_container(container)
            self._remove_slot(slot)
            raise
        return Warm(container, slot, sock, socket_dir)

    def _fill(self) -> None:
        while True:
            self._want.acquire()
            if self._closed.is_set():
                return
            if self._ready.qsize() >= max(self.size, 1):
                continue
            # A container's start costs the engine ~0.3 s of CPU: made just after a take, it competes
            # with the start of the task just handed out; a moment later, with tasks waiting on
            # the model (tried with benchmarks/round_vs_ideal.py; the setting has no flag there).
            if self._ready.qsize() and self._closed.wait(REFILL_DELAY_S):  # none ready: no delay
                return
            try:
                warm = self.make(self.socket_dir)
            except Exception:  # the engine hiccuped; take() makes one on demand instead
                continue
            if self._closed.is_set():
                self.discard(warm)
                return
            self._ready.put(warm)

    def _drain(self) -> None:
        while True:
            try:
                self.discard(self._ready.get_nowait())
            except queue.Empty:
                return

    def _reap(self) -> None:
        while (warm := self._trash.get()) is not None:
            self._dispose(warm)

    def _dispose(self, warm: Warm) -> None:
        with contextlib.suppress(Exception):
            warm.sock.close()
        remove_container(warm.container)
        self._remove_slot(warm.slot)

    def _remove_slot(self, slot: Path) -> None:
        shutil.rmtree(slot, ignore_errors=True)
        with self._slots_lock:
            self._slots.discard(slot)
