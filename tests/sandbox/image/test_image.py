"""`harnessopt sandbox build` and `harnessopt sandbox cleanup` through the CLI, on real Docker."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from typing import Any

import docker
import pytest

from harnessopt.sandbox.docker.pool import LABEL
from harnessopt.sandbox.image.build import cleanup_containers
from tests.support.cli import cli
from tests.support.docker_listing import list_a_removed_container

pytestmark = pytest.mark.docker


def test_cleanup_removes_leftover_containers_by_label(docker_client: Any) -> None:
    leftover = docker_client.containers.create(
        "harnessopt-sandbox:latest", ["sleep", "600"], labels={LABEL: "1", f"{LABEL}.run": "test-leftover"}
    )
    r = cli("sandbox", "cleanup")
    assert r.returncode == 0, r.stderr
    assert "removed" in r.stdout
    assert docker_client.containers.list(all=True, filters={"id": leftover.id}) == []


def test_cleanup_spares_the_containers_of_live_runs(docker_client: Any) -> None:
    """`sandbox cleanup` on a shared engine: only runs that are no longer alive lose their containers."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    made = {}
    for name, pid in (("live", os.getpid()), ("dead", dead.pid)):
        labels = {LABEL: "1", f"{LABEL}.run": f"test-{name}", f"{LABEL}.pid": str(pid)}
        labels[f"{LABEL}.host"] = socket.gethostname()
        made[name] = docker_client.containers.create(
            "harnessopt-sandbox:latest", ["sleep", "600"], labels=labels
        )
    try:
        assert cli("sandbox", "cleanup").returncode == 0
        assert docker_client.containers.list(all=True, filters={"id": made["dead"].id}) == []
        assert docker_client.containers.list(all=True, filters={"id": made["live"].id}) != []
    finally:
        made["live"].remove(force=True)


def test_cleanup_goes_on_past_a_container_removed_while_it_lists(docker_client: Any, monkeypatch) -> None:
    """Another run removes a container between the engine's listing and the inspect docker-py makes
    of each: the clean-up skips it and removes the rest (before, NotFound ended it, a traceback)."""
    list_a_removed_container(docker_client, monkeypatch, {LABEL: "1", f"{LABEL}.run": "test-gone"})
    labels = {LABEL: "1", f"{LABEL}.run": "test-left"}
    leftover = docker_client.containers.create("harnessopt-sandbox:latest", ["sleep", "600"], labels=labels)
    try:
        assert cleanup_containers() >= 1
    finally:
        monkeypatch.undo()
        with contextlib.suppress(docker.errors.NotFound):
            leftover.remove(force=True)
            raise AssertionError("the leftover was not removed")


def test_build_tags_an_image_that_runs_the_sdk(docker_client: Any) -> None:
    tag = "harnessopt-sandbox:cli-test"
    try:
        r = cli("sandbox", "build", "--tag", tag, timeout=900)
        assert r.returncode == 0, r.stderr
        out = docker_client.containers.run(
            tag, ["python3", "-c", "import anthropic; print('sdk', anthropic.__version__)"], remove=True
        )
        assert out.decode().startswith("sdk ")
    finally:
        docker_client.images.remove(tag, force=True)


def test_build_with_a_missing_base_is_one_line(docker_client: Any) -> None:
    r = cli("sandbox", "build", "--base", "no-such-base:never", "--tag", "harnessopt-sandbox:never")
    assert r.returncode == 2 and "make_base_image.sh" in r.stderr and "Traceback" not in r.stderr


def test_a_docker_run_removes_the_containers_a_killed_run_left(docker_client: Any) -> None:
    """A run killed with SIGKILL removes none of its containers (they stop by themselves): the
    next run on the engine removed none either, and said nothing (QA). It removes those whose run
    (named by host and pid) is gone, and spares any that name no run."""
    from harnessopt.config import RolloutConfig
    from harnessopt.sandbox import docker_sandbox

    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL: "1", f"{LABEL}.run": "test-killed", f"{LABEL}.pid": str(dead.pid)}
    killed = docker_client.containers.create(
        "harnessopt-sandbox:latest",
        ["sleep", "600"],
        labels={**labels, f"{LABEL}.host": socket.gethostname()},
    )
    unnamed = docker_client.containers.create(
        "harnessopt-sandbox:latest", ["sleep", "600"], labels={LABEL: "1", f"{LABEL}.run": "test-unnamed"}
    )
    said: list[str] = []
    try:
        docker_sandbox(RolloutConfig(sandbox="docker"), announce=said.append).close()
        assert docker_client.containers.list(all=True, filters={"id": killed.id}) == []
        assert docker_client.containers.list(all=True, filters={"id": unnamed.id}) != []
        assert any("container(s) left by runs that were killed" in line for line in said), said
    finally:
        unnamed.remove(force=True)
        with contextlib.suppress(docker.errors.NotFound):
            killed.remove(force=True)


def test_a_missing_base_names_the_base_asked_for() -> None:
    """`sandbox build --base X` with no image X: the line said to make harnessopt-base:bookworm (QA)."""
    from tests.support.cli_errors import assert_user_error

    r = cli("sandbox", "build", "--base", "harnessopt-test-absent:zz", "--tag", "harnessopt-test-absent:out")
    assert_user_error(r, "base image harnessopt-test-absent:zz is not present", "pass --base an image")
