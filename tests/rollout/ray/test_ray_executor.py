"""rollout.executor: ray on Ray's own two-node test cluster (ray.cluster_utils.Cluster) on this machine.

Same results and decisions as the local executor; a node removed mid-batch loses no task and
counts none twice; no gold answer and no API key in any object serialized for a worker; the
budget holds under concurrency. Skipped without Ray, except in CI (CI=true), where it must run.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from harnessopt.config import ModelConfig
from harnessopt.errors import BudgetExceeded
from harnessopt.gateway.http import api_key_of
from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.protocols import Task, TaskResult
from harnessopt.rollout.ray import worker as ray_worker
from harnessopt.rollout.ray.executor import check_reachable
from harnessopt.rollout.runner import Candidate
from harnessopt.round import driver
from harnessopt.round.services import open_services
from harnessopt.workspace.core import Workspace
from tests.support.cli import REAL_KEY, git
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.workspace import make_ws

if os.environ.get("CI") == "true":
    import ray  # CI installs the ray extra: a missing Ray fails there, never skips
else:
    ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = pytest.mark.ray
SILENT = lambda _m: None  # noqa: E731


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and one worker node, one CPU each; this process is the driver."""
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    c.extra = worker  # type: ignore[attr-defined]
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _candidate(ws: Path, tmp: Path, sleep_s: float = 0.0) -> Candidate:
    """The workspace's skill and harness, outside it (task output may not land in a candidate)."""
    root = tmp / "cand"
    shutil.copytree(ws / "skill", root / "skill")
    shutil.copytree(ws / "harness", root / "harness")
    if sleep_s:  # a slower harness: tasks are still running when a node goes away
        # in a child named by a token of this test's own (``_sleeper``): its processes can be found
        token = f"{sleep_s:.0f}.{secrets.randbelow(10**6):06d}"
        run = root / "harness" / "run.py"
        run.write_text(
            run.read_text().replace(
                "import argparse\n",
                f"import argparse\nimport subprocess as _sp\n_sp.run(['sleep', '{token}'])\n",
                1,
            )
        )
    return Candidate(root, "incumbent", "c0")


def _sleeper(cand: Candidate) -> bytes:
    """The command line (``/proc/PID/cmdline``) of the sleep ``_candidate`` made the harness run."""
    found = re.search(r"_sp\.run\(\['sleep', '([0-9.]+)'\]\)", (cand.root / "harness" / "run.py").read_text())
    assert found is not None
    return b"sleep\0" + found[1].encode() + b"\0"


def _val(ws: Path, **cfg: Any) -> tuple[list[TaskResult], Any]:
    """Val results of the workspace's incumbent on the executor cfg names, and the run's services."""
    w = Workspace.open(ws)
    for section, values in cfg.items():
        setattr(w.cfg, section, getattr(w.cfg, section).model_copy(update=values))
    tasks = w.tasks("val")
    cand = _candidate(ws, ws.parent / f"c-{w.cfg.rollout.executor}")
    with open_services(ws, w.cfg, SILENT, with_optimizer=False, keep_rollouts=False) as svc:
        return svc.runner.run(cand, tasks, 1, epochs=(0, 1), phase="validation"), svc.runner.executor


def _host_mount_race(*runs: TaskResult) -> bool:
    """bwrap (the local sandbox) failing to remount a Docker overlay that another process's
    container just made or removed on this shared machine: the machine's, not the executor's."""
    return any("bwrap: Can't bind mount" in r.stderr_tail for r in runs)


def _key(r: TaskResult) -> tuple[Any, ...]:
    return (r.task_id, r.epoch, r.score, r.passed, r.answer, r.steps, r.error_class)


def test_a_real_clusters_address_passes_the_check(cluster: Any) -> None:
    check_reachable(cluster.address, timeout_s=5)  # the GCS answers the HTTP/2 preface


def test_val_on_ray_matches_local_and_ships_the_candidate_once(cluster: Any, tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    local, _ = _val(ws, rollout={"executor": "local"})
    remote, ex = _val(ws, rollout={"executor": "ray"})
    pairs = [(a, b) for a, b in zip(local, remote, strict=True) if not _host_mount_race(a, b)]
    assert len(pairs) >= len(local) - 2  # the race below is rare
    assert [_key(b) for _a, b in pairs] == [_key(a) for a, _b in pairs]
    assert all(r.steps == 1 for _a, r in pairs) and len(remote) == 2 * len(Workspace.open(ws).tasks("val"))
    assert ex.shipped == 1  # one bundle for the batch, not one per task
    nodes = {n for r in remote for n in r.notes if n.startswith("ran on ")}
    assert nodes  # each run says where it ran


def test_full_round_on_ray_decides_as_local(cluster: Any, tmp_path: Path) -> None:
    decisions = []
    for executor in ("local", "ray"):
        ws = make_ws(tmp_path / executor, rollout={"executor": executor})
        [result] = driver.run(Workspace.open(ws), 1, SILENT)
        m = result.manifest
        decisions.append((result.status, m.val_score, m.incumbent_score, m.delta, m.fixed, m.broken))
    assert decisions[0] == decisions[1]
    assert decisions[0][0] in ("accepted", "rejected")


def test_node_removed_mid_batch_loses_no_task_and_counts_none_twice(cluster: Any, tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    w = Workspace.open(ws)
    tasks = w.tasks("val")
    cand = _candidate(ws, tmp_path, sleep_s=2.0)
    w.cfg.rollout = w.cfg.rollout.model_copy(update={"executor": "ray", "concurrency": 2})
    removed, batch_done = threading.Event(), threading.Event()

    def remove_worker_node() -> None:  # once both nodes run a task, the worker node goes away
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not batch_done.is_set():
            if ray.available_resources().get("CPU", 0) == 0:  # one task on each node
                cluster.remove_node(cluster.extra)
                removed.set()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=remove_worker_node, daemon=True)
    with open_services(ws, w.cfg, SILENT, with_optimizer=False, keep_rollouts=False) as svc:
        watcher.start()
        try:
            results = svc.runner.run(cand, tasks, 1, phase="validation")
        finally:
            batch_done.set()
            watcher.join()
        calls = svc.gateway.total().calls
    assert removed.is_set()
    assert sorted(r.task_id for r in results) == sorted(t.id for t in tasks)  # each once, none lost
    assert all(r.error_class is None for r in results), [r.notes for r in results]
    assert calls >= len(tasks)  # the dead node's runs spent what they spent: counted, not hidden
    cluster.extra = cluster.add_node(num_cpus=1)  # for the tests after this one
    cluster.wait_for_nodes()


def test_no_gold_answer_and_no_key_is_serialized_for_workers(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped: list[bytes] = []

    def capture(obj: Any) -> bytes:
        data = pickle.dumps(obj.__dict__)
        shipped.append(data)
        return data

    def restore(cls: type) -> Any:
        def load(data: bytes) -> Any:
            obj = object.__new__(cls)
            object.__setattr__(obj, "__dict__", pickle.loads(data))
            return obj

        return load

    for cls in (ray_worker.WorkerJob, ray_worker.Bundle):
        ray.util.register_serializer(cls, serializer=capture, deserializer=restore(cls))
    ws = make_ws(tmp_path)
    script = ScriptedModel.from_yaml(ws / "scripted_model.yaml")
    monkeypatch.setenv("HO_RAY_TEST_KEY", REAL_KEY)
    try:
        with FakeAnthropicServer(script) as fake:
            model = ModelConfig(provider="anthropic", base_url=fake.base_url, api_key_env="HO_RAY_TEST_KEY")
            results, _ = _val(ws, rollout={"executor": "ray"}, model=model.model_dump())
            seen_keys = {api_key_of(r["headers"]) for r in fake.requests}
    finally:
        for cls in (ray_worker.WorkerJob, ray_worker.Bundle):
            ray.util.deregister_serializer(cls)
    assert seen_keys == {REAL_KEY}  # the key was in use, upstream of the head's gateway
    assert sum(r.steps for r in results) >= len(results) - 2  # the runs reached the model (via the relay)
    blobs = b"".join(shipped)
    assert len(shipped) >= len(results) + 1  # every job and the bundle went through the hook
    assert REAL_KEY.encode() not in blobs
    for task in Workspace.open(ws).tasks("val"):
        assert str(task.answer).encode() not in blobs, task.answer
    assert b"def score" not in blobs  # nor the scorer


def test_budget_holds_under_concurrency(cluster: Any, tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    w = Workspace.open(ws)
    w.cfg.rollout = w.cfg.rollout.model_copy(update={"executor": "ray", "concurrency": 2})
    w.cfg.budget = w.cfg.budget.model_copy(update={"max_calls": 3})
    tasks: list[Task] = w.tasks("val")
    cand = _candidate(ws, tmp_path)
    with open_services(ws, w.cfg, SILENT, with_optimizer=False, keep_rollouts=False) as svc:
        with pytest.raises(BudgetExceeded):
            svc.runner.run(cand, tasks, 1, epochs=(0, 1), phase="validation")
        assert svc.gateway.total().calls <= 3
        assert svc.gateway.refusals > 0


CTRL_C_DRIVER = """
import sys
import time
from pathlib import Path
import ray
from harnessopt.util import interrupts
from harnessopt.rollout.runner import Candidate
from harnessopt.round.services import open_services
from harnessopt.workspace.core import Workspace

ws, cand, address = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
interrupts.install()
ray.init(address=address, log_to_driver=False)
w = Workspace.open(ws, {"rollout.executor": "ray", "rollout.concurrency": 2})
try:
    with open_services(ws, w.cfg, lambda m: None, with_optimizer=False, keep_rollouts=False) as svc:
        svc.runner.run(Candidate(cand, "incumbent", "c0"), w.tasks("val"), 1, phase="incumbent")
except KeyboardInterrupt:
    # Still connected: were the tasks cancelled before the driver let go (not killed after it)?
    # Bounded well below the tasks' 90 s: Ray's resource view lags its cancels on a loaded machine.
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources().get("CPU", 0):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    free = ray.available_resources().get("CPU", 0) == ray.cluster_resources().get("CPU", 0)
    print("interrupted", "tasks ended" if free else "tasks still running", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_on_the_head_cancels_the_remote_tasks(cluster: Any, tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    cand = _candidate(ws, tmp_path, sleep_s=90.0)  # would hold both nodes for 90 s
    cpus = ray.cluster_resources().get("CPU", 0)
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_DRIVER, str(ws), str(cand.root), cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        sleeper = _sleeper(cand)
        while ray.available_resources().get("CPU", 0) > 0 or len(_processes_naming(sleeper)) < 2:
            # both tasks running, each with its harness (so the check below can see one survive)
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate(timeout=5)
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "interrupted tasks ended" in out, (out, err[-2000:])
        t0 = time.monotonic()
        while ray.available_resources().get("CPU", 0) < cpus:  # the cancelled tasks ended
            assert time.monotonic() - t0 < 30, ray.available_resources()
            time.sleep(0.2)
        # Cancelled, not killed: the sandbox unwound and took the harness with it (a worker killed
        # outright would leave the harness's own session sleeping, and a container running).
        time.sleep(2)
        assert _processes_naming(sleeper) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def _processes_naming(marker: bytes) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes()
        except OSError:
            continue
        if marker in args:
            found.append(args.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


@pytest.mark.docker
def test_docker_on_the_nodes_reaches_the_head_gateway_through_the_relay(
    cluster: Any, tmp_path: Path, docker_client: Any
) -> None:
    """Each run in a container on its node (network none), its call through the node's relay
    socket (mounted at /ho-gw) and the head's ingress to the gateway."""
    ws = make_ws(tmp_path)
    (ws / "skill" / "nonce.txt").write_text(secrets.token_hex(8))  # this test's own candidate digest
    digest = ray_worker.make_bundle(ws).digest[:12]
    try:
        results, ex = _val(ws, rollout={"executor": "ray", "sandbox": "docker"})
        assert all(r.error_class is None and r.steps == 1 for r in results), [
            (r.error_class, r.stderr_tail[-300:]) for r in results
        ]
        # The run's end (the services closed the executor) removed what the worker processes it
        # used made: their warm containers and unpacked candidates, though those processes live on.
        pids = {n.rsplit(":", 1)[1] for r in results for n in r.notes if n.startswith("ran on ")}
        assert pids
        from harnessopt.sandbox.image.build import LABEL

        left = [
            c.name
            for pid in pids
            for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL}.pid={pid}"})
        ]
        assert not left, left
        tmp = Path(ray.get(ray.remote(tempfile.gettempdir).remote()))  # the workers' temp folder
        cands = _named_within(tmp, f"ho-cand-{digest}-", depth=2)
        assert not cands, cands
        assert not (tmp / f"ho-ray-{ex.run_id}").exists()
    finally:
        _remove_ray_workers_containers(docker_client)


def _named_within(root: Path, prefix: str, depth: int) -> list[Path]:
    """Entries under ``root`` (``depth`` folders down) whose name starts with ``prefix``. Not a
    glob: other runs sharing /tmp remove their folders meanwhile, and a glob then raises."""
    found: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:  # removed since it was listed
        return found
    for e in entries:
        if e.name.startswith(prefix):
            found.append(Path(e.path))
        elif depth > 0 and e.is_dir(follow_symlinks=False):
            found += _named_within(Path(e.path), prefix, depth - 1)
    return found


def _remove_ray_workers_containers(client: Any) -> None:
    """The containers this test's Ray worker processes made (warm ones outlive a batch)."""
    from harnessopt.sandbox.image.build import LABEL

    # A pool's reaper may remove a container between the listing and its inspection or removal.
    for c in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        pid = (c.labels or {}).get(f"{LABEL}.pid", "")
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid.isdigit() else b""
        except OSError:
            cmdline = b""
        if cmdline.startswith(b"ray::"):  # a Ray worker process of this machine (this test's cluster)
            with contextlib.suppress(docker.errors.NotFound):
                c.remove(force=True)


VANISH_DRIVER = """
import sys
import tempfile
import threading
import time
from pathlib import Path
import ray
from ray.cluster_utils import Cluster
from harnessopt.round import driver
from harnessopt.workspace.core import Workspace

ws = Path(sys.argv[1])
c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
node = c.add_node(num_cpus=1)  # the only node that can run a task
ray.init(address=c.address, log_to_driver=False)
c.wait_for_nodes()

def vanish():
    while ray.available_resources().get("CPU", 0) > 0:  # until a task runs there
        time.sleep(0.05)
    c.remove_node(node)

threading.Thread(target=vanish, daemon=True).start()
w = Workspace.open(ws, {"rollout.executor": "ray", "ray.grace_s": 5, "rollout.timeout_s": 20})
[result] = driver.run(w, 1, lambda m: None)
print("STATUS", result.status, "|", result.reason, flush=True)
ray.shutdown()
c.shutdown()
"""


def test_a_round_whose_cluster_vanishes_fails_and_keeps_the_incumbent(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    skill = (ws / "skill" / "SKILL.md").read_text()
    proc = subprocess.run(
        [sys.executable, "-c", VANISH_DRIVER, str(ws)], capture_output=True, text=True, timeout=300
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("STATUS")), "")
    assert line.startswith("STATUS failed |") and "cluster" in line.lower(), (
        proc.stdout,
        proc.stderr[-3000:],
    )
    assert (ws / "skill" / "SKILL.md").read_text() == skill
    assert git(ws, "rev-parse", "ho/best") == git(ws, "rev-parse", "ho/round-0")
    assert head in git(ws, "rev-list", "HEAD")  # main only gained the failed round's record
