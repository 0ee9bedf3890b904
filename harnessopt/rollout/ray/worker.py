"""What a Ray task runs on a worker node: one harness run in that node's sandbox. Imports no Ray.

The head sends a ``WorkerJob`` (the task's public part, the harness env, the run's lease token,
the sandbox settings, where the relay reaches the head) and the candidate as one ``Bundle`` per
round through the object store. The worker returns a ``WorkerResult``: the run's outcome and its
/out as a capped tar, which the head unpacks and scores. No gold answer, scorer or API key is in
either: the head never puts them there, and tests/rollout/ray/test_ray_executor.py checks the bytes.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec, Sandbox
from harnessopt.rollout.ray.relay import WorkerRelay
from harnessopt.sandbox.untar import extract
from harnessopt.util import interrupts

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


_lock = threading.Lock()
_relays: dict[tuple[tuple[str, int], str], WorkerRelay] = {}
_sandboxes: dict[str, Sandbox] = {}
_candidates: dict[str, Path] = {}


def run_job(job: WorkerJob, bundle: Bundle) -> WorkerResult:
    """Run ``harness/run.py`` of ``bundle`` on ``job.task`` in this node's sandbox.

    Ray cancels it with ``_thread.interrupt_main()``: a KeyboardInterrupt that lands in a finalizer
    is printed and dropped, and the run would go on to its timeout. With the flag's handler
    (``interrupts.install``, a no-op off the main thread) the sandbox's wait raises it again."""
    interrupts.install()
    root = _candidate(bundle)
    relay = _relay(job.ingress, job.relay_secret)
    sandbox = _sandbox(job.rollout)
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


def _candidate(bundle: Bundle) -> Path:
    """The bundle unpacked once per worker process, in a dir named by its digest."""
    with _lock:
        if (root := _candidates.get(bundle.digest)) is not None and root.is_dir():
            return root
        root = Path(tempfile.mkdtemp(prefix=f"ho-cand-{bundle.digest[:12]}-"))
        extract(bundle.data, root, max_bytes=BUNDLE_MAX_BYTES, max_members=BUNDLE_MAX_MEMBERS)
        for path in [root, *root.rglob("*")]:  # read-only for the task; readable by its uid
            if path.is_dir():
                path.chmod(0o755)
            elif path.is_file():
                path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
        atexit.register(shutil.rmtree, root, True)
        _candidates[bundle.digest] = root
        return root


def _relay(ingress: tuple[str, int], secret: str) -> WorkerRelay:
    address = (str(ingress[0]), int(ingress[1]))
    with _lock:
        relay = _relays.get((address, secret))
        if relay is None:
            relay = _relays[(address, secret)] = WorkerRelay(address, secret)
            atexit.register(relay.close)
        return relay


def _sandbox(settings: dict[str, Any]) -> Sandbox:
    """The node's sandbox for these settings, made once per worker process."""
    import json

    from harnessopt.sandbox import make_sandbox

    key = json.dumps(settings, sort_keys=True)
    with _lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            sandbox = _sandboxes[key] = make_sandbox(RolloutConfig(**settings), announce=lambda _m: None)
            atexit.register(sandbox.close)
        return sandbox
