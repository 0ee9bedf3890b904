"""What a Ray task runs on a worker node: one harness run in that node's sandbox. Imports no Ray.

The head sends a ``WorkerJob`` (the task's public part, the harness env, the run's lease token,
the sandbox settings, where the relay reaches the head) and the candidate as one ``Bundle`` per
round through the object store. The worker returns a ``WorkerResult``: the run's outcome and its
/out as a capped tar, which the head unpacks and scores. No gold answer, scorer or API key is in
either: the head never puts them there, and tests/rollout/ray/test_ray_executor.py checks the bytes.

What a worker process keeps for a run (its relay, its sandbox's warm containers, the unpacked
candidates) lives until the head ends the run: Ray kills its worker processes without running
``atexit``, so the head runs ``close_node`` on every node first (``RayExecutor.close``). A run's
folders on a node are all in ``<tmp>/ho-ray-RUN/``, one folder per worker process, whose lock it
holds while it lives: where a run was killed outright and never closed its nodes, the next run's
first job on the node (or any harnessopt command there) sweeps them (``util.tmpdirs.sweep``).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec, Sandbox
from harnessopt.rollout.ray.relay import WorkerRelay
from harnessopt.sandbox.untar import extract
from harnessopt.util import interrupts, tmpdirs

BUNDLE_MAX_BYTES = 256 * 1024 * 1024
BUNDLE_MAX_MEMBERS = 50_000
OUT_MAX_FILES = 10_000  # as the Docker sandbox's /out: more is output_cap


@dataclass(frozen=True)
class Bundle:
    """A candidate's skill/ and harness/ as one uncompressed tar, named by its digest."""

    digest: str
    data: bytes


@dataclass(frozen=True)
class WorkerJob:
    """Everything a worker needs for one run, and nothing more (no answer, no scorer, no key)."""

    task: dict[str, Any]  # Task.public()
    env: dict[str, str]  # HARNESSOPT_TARGET_MODEL, HO_FLAG_*
    token: str  # the run's lease token: the gateway on the head checks it on every call
    timeout_s: float
    rollout: dict[str, Any]  # RolloutConfig of the worker's sandbox
    ingress: tuple[str, int]  # the head's relay end
    relay_secret: str  # opens the ingress; a call still needs the token
    out_cap: int  # bytes of /out sent back
    run_id: str = "run"  # names the run's folder on the node, which close_node removes


@dataclass
class WorkerResult:
    """One run's outcome; ``out_tar`` is its /out (regular files and dirs, capped)."""

    exit_code: int | None
    wall_s: float
    out_tar: bytes
    stdout_tail: str = ""
    stderr_tail: str = ""
    error_class: str | None = None
    notes: list[str] = field(default_factory=list)
    node: str = ""  # hostname and pid of the worker that ran it


CLOSING = "closing"  # in a run's folder: the head ended the run; its worker processes clean up
WATCH_S = 0.2


@dataclass
class _Run:
    """One run's state in this worker process, all removed by ``_close_run``."""

    folder: Path  # <tmp>/ho-ray-RUN/PID
    owner: int  # the fd holding folder/owner's lock while this process lives: util.tmpdirs.sweep
    relays: dict[tuple[tuple[str, int], str], WorkerRelay] = field(default_factory=dict)
    sandboxes: dict[str, Sandbox] = field(default_factory=dict)
    candidates: dict[str, Path] = field(default_factory=dict)


_lock = threading.Lock()
_runs: dict[str, _Run] = {}


def run_job(job: WorkerJob, bundle: Bundle) -> WorkerResult:
    """Run ``harness/run.py`` of ``bundle`` on ``job.task`` in this node's sandbox.

    Ray cancels it with ``_thread.interrupt_main()``: a KeyboardInterrupt that lands in a finalizer
    is printed and dropped, and the run would go on to its timeout. With the flag's handler
    (``interrupts.install``, a no-op off the main thread) the sandbox's wait raises it again."""
    interrupts.install()
    run = _run(job.run_id)
    root = _candidate(run, bundle)
    relay = _relay(run, job.ingress, job.relay_secret)
    sandbox = _sandbox(run, job.rollout)
    lease = GatewayLease(token=job.token, base_url=relay.base_url, socket_path=relay.socket_path)
    spec = RunSpec(
        task=job.task,
        skill_dir=root / "skill",
        harness_dir=root / "harness",
        env=job.env,
        gateway=lease,
        timeout_s=job.timeout_s,
    )
    with tempfile.TemporaryDirectory(prefix="ho-out-") as tmp:
        out = sandbox.run(spec, Path(tmp) / "out")
        data, notes = pack(out.out_dir, job.out_cap)
    return WorkerResult(
        exit_code=out.exit_code,
        wall_s=out.wall_s,
        out_tar=data,
        stdout_tail=out.stdout_tail,
        stderr_tail=out.stderr_tail,
        error_class=out.error_class,
        notes=[*out.notes, *notes],
        node=f"{os.uname().nodename}:{os.getpid()}",
    )


def make_bundle(root: Path) -> Bundle:
    """skill/ and harness/ under ``root`` as a tar of regular files and dirs (links left out)."""
    import hashlib

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for part in ("skill", "harness"):
            for path in sorted([root / part, *sorted((root / part).rglob("*"))]):
                if path.is_symlink() or not (path.is_file() or path.is_dir()):
                    continue
                if "__pycache__" in path.parts:
                    continue
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if path.is_file():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
    data = buf.getvalue()
    return Bundle(hashlib.sha256(data).hexdigest(), data)


def pack(out_dir: Path, cap: int) -> tuple[bytes, list[str]]:
    """The run's /out as a tar: regular files and dirs, at most ``cap`` bytes of files."""
    buf = io.BytesIO()
    notes: list[str] = []
    size = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(out_dir.rglob("*")) if out_dir.is_dir() else []:
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue  # links and specials stay on the worker, as the local untar refuses them
            if path.is_file():
                size += path.stat().st_size
                if size > cap:
                    notes.append(f"/out is larger than {cap} bytes; the rest stayed on the worker")
                    break
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(out_dir)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue(), notes


def run_folder(run_id: str) -> Path:
    """The run's folder on this node: one folder per worker process inside."""
    return Path(tempfile.gettempdir()) / f"ho-ray-{run_id}"


def close_node(run_id: str, wait_s: float = 20.0) -> int:
    """What the head runs on each node at the end of a run (Ctrl-C included): the node's worker
    processes close their sandboxes (removing their containers) and relays; containers of a worker
    that died or did not finish within ``wait_s`` are removed here; then the run's folder. Returns
    the number of worker processes that had run the run's tasks on this node."""
    base = run_folder(run_id)
    if not base.is_dir():
        return 0
    (base / CLOSING).touch()
    pids = [int(p.name) for p in base.iterdir() if p.name.isdigit()]
    t_end = time.monotonic() + wait_s
    while any(_alive(p) and not (base / f"closed-{p}").exists() for p in pids) and time.monotonic() < t_end:
        time.sleep(WATCH_S / 2)
    left = [p for p in pids if not (base / f"closed-{p}").exists()]
    if left:
        with contextlib.suppress(Exception):  # no Docker on this node: nothing of it to remove
            _remove_containers_of(left)
    shutil.rmtree(base, ignore_errors=True)
    return len(pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_containers_of(pids: list[int]) -> None:
    """This host's harnessopt containers made by the processes ``pids``."""
    import socket

    from harnessopt.sandbox.docker.pool import remove_container
    from harnessopt.sandbox.image.build import LABEL, docker_client

    client = docker_client(timeout=10)
    host = socket.gethostname()
    for pid in pids:
        labels = [f"{LABEL}.pid={pid}", f"{LABEL}.host={host}"]
        for c in client.containers.list(all=True, filters={"label": labels}, ignore_removed=True):
            remove_container(c)


def _run(run_id: str) -> _Run:
    """This process's state for ``run_id``, made on its first job with a thread that ends it."""
    with _lock:
        if (run := _runs.get(run_id)) is not None:
            return run
        base = run_folder(run_id)
        if not _runs:  # a run killed outright never ran close_node: its folders here are swept
            tmpdirs.sweep(base.parent)
        folder = base / str(os.getpid())
        folder.mkdir(parents=True, exist_ok=True)
        run = _runs[run_id] = _Run(folder, tmpdirs.hold(folder))
    threading.Thread(target=_watch, args=(run_id, base), name="ho-ray-close", daemon=True).start()
    return run


def _watch(run_id: str, base: Path) -> None:
    """Ends the run in this process once the head says so (``close_node``), or its folder is gone."""
    while base.is_dir() and not (base / CLOSING).exists():
        time.sleep(WATCH_S)
    _close_run(run_id)
    with contextlib.suppress(OSError):
        (base / f"closed-{os.getpid()}").touch()


def _close_run(run_id: str) -> None:
    with _lock:
        run = _runs.pop(run_id, None)
    if run is None:
        return
    for sandbox in run.sandboxes.values():
        with contextlib.suppress(Exception):
            sandbox.close()
    for relay in run.relays.values():
        with contextlib.suppress(Exception):
            relay.close()
    shutil.rmtree(run.folder, ignore_errors=True)
    os.close(run.owner)


def _candidate(run: _Run, bundle: Bundle) -> Path:
    """The bundle unpacked once per worker process, in a dir named by its digest."""
    with _lock:
        if (root := run.candidates.get(bundle.digest)) is not None and root.is_dir():
            return root
        root = Path(tempfile.mkdtemp(prefix=f"ho-cand-{bundle.digest[:12]}-", dir=run.folder))
        extract(bundle.data, root, max_bytes=BUNDLE_MAX_BYTES, max_members=BUNDLE_MAX_MEMBERS)
        for path in [root, *root.rglob("*")]:  # read-only for the task; readable by its uid
            if path.is_dir():
                path.chmod(0o755)
            elif path.is_file():
                path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
        run.candidates[bundle.digest] = root
        return root


def _relay(run: _Run, ingress: tuple[str, int], secret: str) -> WorkerRelay:
    address = (str(ingress[0]), int(ingress[1]))
    with _lock:
        relay = run.relays.get((address, secret))
        if relay is None:
            relay = run.relays[(address, secret)] = WorkerRelay(address, secret, run.folder)
        return relay


def _sandbox(run: _Run, settings: dict[str, Any]) -> Sandbox:
    """The node's sandbox for these settings, made once per worker process and run."""
    import json

    from harnessopt.sandbox import make_sandbox

    key = json.dumps(settings, sort_keys=True)
    with _lock:
        sandbox = run.sandboxes.get(key)
        if sandbox is None:
            sandbox = run.sandboxes[key] = make_sandbox(RolloutConfig(**settings), announce=lambda _m: None)
        return sandbox
