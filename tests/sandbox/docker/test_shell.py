"""DockerShell: the optimizer's bash in a container that sees only the view."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.docker.shell import DockerShell

pytestmark = pytest.mark.docker


@pytest.fixture
def shell(docker_client: Any, tmp_path: Path, small_cfg: Any) -> Any:
    view = tmp_path / "view"
    (view / "skill").mkdir(parents=True)
    (view / "skill" / "SKILL.md").write_text("hello skill\n")
    sh = DockerShell(view, small_cfg(), client=docker_client)
    yield sh
    sh.close()
    left = docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sh.run_id}"})
    assert left == []


def test_commands_run_in_the_view_and_edits_land_on_the_host(shell):
    r = shell.run("pwd; cat skill/SKILL.md; echo edited >> skill/SKILL.md; exit 3", 10)
    assert r.output.splitlines()[:2] == ["/view", "hello skill"]
    assert r.exit_code == 3 and not r.timed_out
    assert (shell.view / "skill" / "SKILL.md").read_text() == "hello skill\nedited\n"


def test_no_network_and_no_writes_outside_the_view(shell, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    r = shell.run(
        f"ls /sys/class/net; (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED; "
        f"for p in /etc/x /opt/x /x {tmp_path}/x; do (echo hi > $p) 2>/dev/null && echo WROTE $p; done; true",
        10,
    )
    assert r.output.split() == ["lo"], r.output
    with pytest.raises(socket.timeout):
        listener.accept()
    assert not (tmp_path / "x").exists()


def test_timeout_kills_the_command_and_its_background_jobs(shell):
    r = shell.run("(sleep 3; echo late > late.txt) & sleep 100", 1)
    assert r.timed_out and r.exit_code is None
    r2 = shell.run("sleep 4; ls", 10)
    assert "late.txt" not in r2.output


def test_output_is_capped(shell):
    r = shell.run("head -c 5000000 /dev/zero | tr '\\0' x", 10)
    assert r.exit_code == 0 and len(r.output) < 40_000 and "not shown" in r.output


def test_the_docker_sandbox_gives_its_shell_and_installs_no_signal_handler(
    docker_client, tmp_path, small_cfg
):
    import signal

    from harnessopt.protocols import Sandbox, Shell
    from harnessopt.sandbox.docker.sandbox import DockerSandbox

    before = signal.getsignal(signal.SIGTERM)
    sandbox = DockerSandbox(small_cfg(), docker_client, warm=0)
    try:
        assert isinstance(sandbox, Sandbox)
        assert signal.getsignal(signal.SIGTERM) is before  # signal policy lives in interrupts.install
        (tmp_path / "view").mkdir()
        shell = sandbox.shell(tmp_path / "view")
        assert isinstance(shell, Shell) and isinstance(shell, DockerShell) and shell.view_root == "/view"
        shell.close()
    finally:
        sandbox.close()


def test_a_command_stopped_at_its_timeout_keeps_what_it_wrote(shell):
    r = shell.run("echo early > early.txt; sleep 100", 1)
    assert r.timed_out and r.exit_code is None
    assert (shell.view / "early.txt").read_text() == "early\n"


def test_the_view_goes_into_a_new_container_and_back_unchanged(shell, docker_client, small_cfg):
    import os
    import stat

    r = shell.run(
        "mkdir -p a/empty && printf '#!/bin/sh\\necho ran\\n' > a/run.sh && chmod +x a/run.sh && "
        "./a/run.sh && touch \"$(printf 'n\\377m')\"",
        10,
    )
    assert r.exit_code == 0 and "ran" in r.output, r.output
    view = shell.view
    assert (view / "a" / "empty").is_dir() and b"n\xffm" in os.listdir(bytes(view))
    assert stat.S_IMODE((view / "a" / "run.sh").stat().st_mode) == 0o755
    again = DockerShell(view, small_cfg(), client=docker_client)  # a new container, seeded from the host
    try:
        r = again.run("./a/run.sh && ls -d a/empty && ls | od -c | grep -c 377", 10)
    finally:
        again.close()
    assert r.exit_code == 0 and r.output.split() == ["ran", "a/empty", "1"], r.output
