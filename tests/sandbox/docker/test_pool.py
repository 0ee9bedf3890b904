"""The Docker warm pool's start: containers started before the first task asks (real Docker)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harnessopt.sandbox.docker.sandbox import DockerSandbox
from tests.support import killed_run
from tests.support.docker_listing import list_a_removed_container

pytestmark = pytest.mark.docker


def _ours(docker_client: Any, sb: DockerSandbox) -> list[Any]:
    return docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sb.run_id}"})


def test_prewarm_starts_the_pool_before_any_task_and_the_first_task_takes_a_started_one(
    docker_client, small_cfg, candidate, gateway, spec_for, tmp_path
) -> None:
    sb = DockerSandbox(small_cfg(concurrency=2), docker_client, warm=2)
    try:
        socket_dir = str(gateway.lease().socket_path.parent)
        sb.prewarm(socket_dir)
        deadline = time.monotonic() + 60
        while sb.pool._ready.qsize() < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sb.pool._ready.qsize() == 2 and len(_ours(docker_client, sb)) == 2  # no task asked yet
        ready = {w.container.id for w in list(sb.pool._ready.queue)}
        skill, harness = candidate("answer('ok')\n")
        taken: list[str] = []
        real_take = sb.pool.take
        sb.pool.take = lambda sd: (w := real_take(sd), taken.append(w.container.id))[0]  # type: ignore[method-assign]
        out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
        assert out.error_class is None and (tmp_path / "out" / "answer.txt").read_text() == "ok"
        assert taken and taken[0] in ready  # started before the task came
    finally:
        sb.close()
    assert _ours(docker_client, sb) == []


def test_close_removes_a_running_task_past_a_container_removed_while_it_lists(
    docker_client, small_cfg, gateway, monkeypatch
) -> None:
    """close() (Ctrl-C mid-task) sweeps the run's containers by label; one that the reaper removes
    between the listing and docker-py's inspect of it must not end the sweep (NotFound, swallowed,
    left the running task's container behind until exit)."""
    sb = DockerSandbox(small_cfg(concurrency=1), docker_client, warm=0)
    socket_dir = str(gateway.lease().socket_path.parent)
    running = sb.pool.take(socket_dir)  # a task's container, never handed back
    list_a_removed_container(docker_client, monkeypatch, {"harnessopt": "1", "harnessopt.run": sb.run_id})
    try:
        sb.close()
    finally:
        monkeypatch.undo()
    assert running.container.id not in {c.id for c in _ours(docker_client, sb)}
    assert _ours(docker_client, sb) == []


def test_close_removes_the_slot_folder_of_a_container_a_task_still_held(
    docker_client, small_cfg, gateway
) -> None:
    """A run stopped mid-task (Ctrl-C, SIGTERM) may exit before the task's thread hands its
    container back: close() removes that container by label, and its slot folder with it."""
    sb = DockerSandbox(small_cfg(concurrency=1), docker_client, warm=1)
    socket_dir = str(gateway.lease().socket_path.parent)
    running = sb.pool.take(socket_dir)  # a task's container, never handed back
    deadline = time.monotonic() + 60
    while sb.pool._ready.qsize() < 1 and time.monotonic() < deadline:  # and one warm, ready
        time.sleep(0.1)
    warm = list(sb.pool._ready.queue)
    assert running.slot.is_dir() and len(warm) == 1 and warm[0].slot.is_dir()
    sb.close()
    assert not running.slot.exists() and not warm[0].slot.exists()
    assert _ours(docker_client, sb) == []
    with pytest.raises(RuntimeError, match="closed"):  # a task that starts as the run stops
        sb.pool.take(socket_dir)
    assert _ours(docker_client, sb) == []


def test_the_warm_containers_of_a_run_killed_with_sigkill_exit_on_their_own(docker_client, tmp_path) -> None:
    """No clean-up reaches a run the OOM killer (or kill -9) ends. Its warm containers waited for a
    job on stdin for ever; with StdinOnce the engine closes their stdin when the run's attach
    sockets close, and the runner, reading EOF, exits."""
    proc, run_id = killed_run.start(
        """
        import time
        from harnessopt.config import RolloutConfig
        from harnessopt.sandbox.docker.sandbox import DockerSandbox
        from harnessopt.sandbox.image.build import docker_client
        sb = DockerSandbox(RolloutConfig(sandbox="docker", concurrency=2), docker_client(), warm=2)
        sb.prewarm(None)
        while sb.pool._ready.qsize() < 2:
            time.sleep(0.1)
        print(sb.run_id, flush=True)
        time.sleep(600)
        """,
        tmp_path,
    )
    try:
        up = docker_client.containers.list(filters={"label": f"harnessopt.run={run_id}"})
        assert run_id and len(up) == 2  # up, waiting for a job
        assert killed_run.running_after_sigkill(docker_client, proc, run_id) == []  # they exited
    finally:
        killed_run.remove_leftovers(docker_client, proc)


def test_a_task_of_a_run_killed_with_sigkill_ends_though_its_harness_would_run_on(
    docker_client, tmp_path
) -> None:
    """The run is what stops a task at its deadline; killed with SIGKILL, it stops nothing. A task
    whose harness sleeps on then ran for good (QA: `Up 52 seconds` past a 15 s limit): the runner
    now watches its stdin while the harness runs, and the run's attach socket closing ends it."""
    proc, run_id = killed_run.start(
        """
        import threading, time
        from pathlib import Path
        from harnessopt.config import RolloutConfig
        from harnessopt.protocols import GatewayLease, RunSpec
        from harnessopt.sandbox.docker.sandbox import DockerSandbox
        from harnessopt.sandbox.image.build import docker_client
        root = Path.cwd()
        (root / "skill").mkdir()
        (root / "skill" / "SKILL.md").write_text("---\\nname: t\\ndescription: t\\n---\\nx\\n")
        (root / "harness").mkdir()
        (root / "harness" / "run.py").write_text("import os\\nos.execv('/bin/sleep', ['sleep', '3600'])\\n")
        sb = DockerSandbox(RolloutConfig(sandbox="docker", concurrency=1), docker_client(), warm=0)
        spec = RunSpec({"id": "t1", "input": "q", "split": "train", "metadata": {}}, root / "skill",
                       root / "harness", {}, GatewayLease("tok", "http://127.0.0.1:9", None), 600.0)
        threading.Thread(target=sb.run, args=(spec, root / "out"), daemon=True).start()
        while not [c for c in sb.client.containers.list(filters={"label": f"harnessopt.run={sb.run_id}"})
                   if "sleep 3600" in str(c.top().get("Processes"))]:
            time.sleep(0.2)  # the harness runs
        print(sb.run_id, flush=True)
        time.sleep(600)
        """,
        tmp_path,
    )
    try:
        assert run_id
        assert killed_run.running_after_sigkill(docker_client, proc, run_id, timeout_s=30) == []
    finally:
        killed_run.remove_leftovers(docker_client, proc)


def test_more_cpus_a_task_than_the_engine_has_are_refused_before_any_task(docker_client) -> None:
    """The engine refuses such a container: every task of the round failed as a sandbox error, the
    round was recorded as failed, and the run exited 3. It is bad input, said before anything runs."""
    from harnessopt.config import RolloutConfig
    from harnessopt.errors import UserError
    from harnessopt.sandbox import docker_sandbox

    ncpu = int(docker_client.info()["NCPU"])
    with pytest.raises(UserError, match=rf"rollout.cpus is {ncpu + 1} .* at most {ncpu}"):
        docker_sandbox(RolloutConfig(sandbox="docker", cpus=ncpu + 1), announce=lambda _m: None)
