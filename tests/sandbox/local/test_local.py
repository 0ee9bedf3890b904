"""LocalSandbox (subprocess fallback) and make_sandbox's choice of backend."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from typing import Any

import pytest

from harnessopt.config import RolloutConfig
from harnessopt.errors import UserError
from harnessopt.sandbox import make_sandbox
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import LocalSandbox

REAL_KEY = "sk-ant-REALKEY-local-0d1f"
MODES = [
    pytest.param(m, marks=pytest.mark.skipif(not isolation.available(m), reason=f"{m} cannot run here"))
    for m in isolation.MODES
]


def test_env_is_scrubbed_and_gateway_vars_set(candidate, gateway, tmp_path, spec_for, small_cfg, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    monkeypatch.setenv("SOME_HOST_SECRET", "s3cr3t")
    skill, harness = candidate("answer(json.dumps(dict(os.environ)))\n")
    lease = gateway.lease("tok-local")
    out = LocalSandbox(small_cfg()).run(spec_for(skill, harness, lease), tmp_path / "out")
    env = __import__("json").loads((tmp_path / "out" / "answer.txt").read_text())
    assert out.error_class is None and out.exit_code == 0
    assert env["ANTHROPIC_API_KEY"] == "tok-local" and env["ANTHROPIC_BASE_URL"] == lease.base_url
    assert env["HARNESSOPT_TARGET_MODEL"] == "m"
    assert "SOME_HOST_SECRET" not in env and REAL_KEY not in str(env)


def test_harness_gets_private_copies(candidate, gateway, tmp_path, spec_for, small_cfg):
    """With bwrap the candidate's shared copy is bound read-only (as in Docker, issue 15): the
    write fails; without a mount namespace each task writes its own private copy."""
    skill, harness = candidate("""
        try:
            open(os.path.join(ARGS.skill, "SKILL.md"), "w").write("changed")
            wrote = "written"
        except OSError:
            wrote = "read-only"
        answer(wrote + " " + os.getcwd())
    """)
    sb = LocalSandbox(small_cfg())
    out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None
    assert "test skill" in (skill / "SKILL.md").read_text()
    wrote, cwd = (tmp_path / "out" / "answer.txt").read_text().split(" ", 1)
    assert not cwd.startswith(str(candidate.ws))
    assert wrote == ("read-only" if sb.isolation == "bwrap" else "written")


@pytest.mark.parametrize("mode", MODES)
def test_timeout_kills_the_whole_group(mode, candidate, gateway, tmp_path, spec_for, small_cfg):
    late = tmp_path / "out" / "late.txt"  # in the task's own out dir: writable in every isolation mode
    skill, harness = candidate(f"""
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2); open({str(late)!r}, 'w').write('x')"])
        time.sleep(100)
    """)
    t0 = time.monotonic()
    sandbox = LocalSandbox(small_cfg(), isolation_mode=mode)
    out = sandbox.run(spec_for(skill, harness, gateway.lease(), 1), tmp_path / "out")
    assert out.error_class == "timeout" and out.exit_code is None
    assert time.monotonic() - t0 < 5
    time.sleep(2.5)
    assert not late.exists()


def test_output_is_capped_head_and_tail(candidate, gateway, tmp_path, spec_for, small_cfg):
    skill, harness = candidate("""
        print("FIRST")
        for _ in range(20000):
            print("y" * 100)
        print("LAST")
    """)
    out = LocalSandbox(small_cfg(output_cap_kb=4)).run(
        spec_for(skill, harness, gateway.lease()), tmp_path / "o"
    )
    assert out.stdout_tail.startswith("FIRST") and out.stdout_tail.endswith("LAST")
    assert "elided" in out.stdout_tail and len(out.stdout_tail) < 5000


def test_file_size_limit_is_output_cap(candidate, gateway, tmp_path, spec_for, small_cfg):
    skill, harness = candidate("""
        with open(os.path.join(OUT, "big.bin"), "wb") as f:
            for _ in range(16):
                f.write(b"0" * (1 << 20))
    """)
    out = LocalSandbox(small_cfg(out_mb=2)).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "output_cap", out


def test_crash(candidate, gateway, tmp_path, spec_for, small_cfg):
    skill, harness = candidate("sys.exit(7)\n")
    out = LocalSandbox(small_cfg()).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "crash" and out.exit_code == 7


def test_make_sandbox_choices(monkeypatch):
    said: list[str] = []
    assert make_sandbox(RolloutConfig(sandbox="local"), announce=said.append).name == "local"
    bogus = RolloutConfig.model_construct(**{**RolloutConfig().model_dump(), "sandbox": "vm"})
    with pytest.raises(UserError, match="known: auto, docker, local"):
        make_sandbox(bogus, announce=said.append)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(UserError, match="Docker is not reachable.* or use --sandbox local"):
        make_sandbox(RolloutConfig(sandbox="docker"), announce=said.append)
    # the sandbox command's cleanup and build need Docker itself: no --sandbox to suggest there
    from tests.support.cli import cli

    for action in ("cleanup", "build"):
        r = cli("sandbox", action, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
        assert r.returncode == 2 and "Docker is not reachable" in r.stderr and "--sandbox" not in r.stderr
    assert make_sandbox(RolloutConfig(sandbox="auto"), announce=said.append).name == "local"
    assert "isolation is weaker" in said[-1]


@pytest.mark.docker
def test_make_sandbox_missing_image(docker_client: Any):
    said: list[str] = []
    cfg = RolloutConfig(sandbox="docker", image="harnessopt-no-such-image:0")
    with pytest.raises(UserError, match="harnessopt sandbox build"):
        make_sandbox(cfg, announce=said.append)
    sb = make_sandbox(RolloutConfig(sandbox="auto"), announce=said.append)
    try:
        assert sb.name == "docker" and said == []
    finally:
        sb.close()


def test_the_local_sandbox_gives_the_optimizer_a_host_shell_in_the_view(tmp_path, small_cfg):
    from harnessopt.protocols import Sandbox, Shell

    view = tmp_path / "view"
    view.mkdir()
    sandbox = LocalSandbox(small_cfg())
    assert isinstance(sandbox, Sandbox)
    shell = sandbox.shell(view)
    assert isinstance(shell, Shell) and shell.view_root == str(view.resolve())
    res = shell.run("pwd", 10)
    assert res.output.strip() == str(view.resolve()) and res.exit_code == 0


def test_the_sandbox_package_imports_nothing_from_the_optimizer():
    import ast
    from pathlib import Path

    import harnessopt.sandbox

    for path in Path(harnessopt.sandbox.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not [n for n in names if n.startswith("harnessopt.optimizer")], path


# What each isolation mode must name in its warning: (harness line, optimizer bash line).
HOST_FILES = ["the host's files", "tasks/", "gold answers", "scorer.py", "the network"]
REACHES = {
    "session": (
        HOST_FILES + ["other processes of the same uid"],
        HOST_FILES + ["other processes of the same uid"],
    ),
    "unshare": (HOST_FILES + ["own PID namespace"], HOST_FILES),
    "bwrap": (
        ["read-only", "tasks/", "scorer.py hidden", "the network", "own PID namespace"],
        ["read-only", "tasks/", "gold answers", "scorer.py", "only the view writable", "the network"],
    ),
}


@pytest.mark.parametrize("mode", MODES)
def test_an_explicit_local_sandbox_warns_naming_what_is_exposed(mode, monkeypatch, tmp_path):
    monkeypatch.setattr(isolation, "detect", lambda: mode)
    said: list[str] = []
    sandbox = make_sandbox(RolloutConfig(sandbox="local"), announce=said.append)
    assert sandbox.name == "local" and len(said) == 1 and "\n" not in said[0]
    assert "isolation is weaker" in said[0] and f"as uid {os.getuid()}" in said[0]
    harness_words, shell_words = REACHES[mode]
    assert [w for w in harness_words if w not in said[0]] == []

    # The optimizer's bash on the host: its own line, once, when it is first handed out.
    sandbox.shell(tmp_path)
    sandbox.shell(tmp_path)
    assert len(said) == 2 and said[1].startswith("optimizer: its bash tool runs on this host")
    assert "isolation is weaker" in said[1] and [w for w in shell_words if w not in said[1]] == []


@pytest.mark.parametrize("mode", MODES)
def test_the_auto_fallback_names_what_is_exposed_too(mode, monkeypatch):
    monkeypatch.setattr(isolation, "detect", lambda: mode)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    said: list[str] = []
    assert make_sandbox(RolloutConfig(sandbox="auto"), announce=said.append).name == "local"
    assert len(said) == 1 and "isolation is weaker" in said[0] and "Docker is not reachable" in said[0]
    assert [w for w in REACHES[mode][0] if w not in said[0]] == []


@pytest.mark.parametrize("mode", MODES)
def test_the_optimizer_shell_is_wrapped_like_the_tasks(mode, tmp_path, small_cfg):
    view = tmp_path / "view"
    view.mkdir()
    shell = LocalSandbox(small_cfg(), isolation_mode=mode).shell(view)
    res = shell.run("pwd; echo x > made-here; cat made-here", 10)
    assert res.exit_code == 0 and res.output.split() == [str(view.resolve()), "x"]
    outside = tmp_path / "outside.txt"
    res = shell.run(f"echo x > {outside}", 10)
    assert outside.exists() == (mode != "bwrap")  # bwrap: only the view is writable


def test_a_task_that_starts_after_close_leaves_no_folder(
    candidate, gateway, tmp_path, spec_for, small_cfg, monkeypatch
) -> None:
    """A run stopping: a task thread that reaches the sandbox after close() must not make a copy
    folder that nothing would remove (it made a new prepared-copies folder in /tmp)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    skill, harness = candidate("answer('ok')\n")
    sb = LocalSandbox(small_cfg())
    assert sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out1").exit_code == 0
    sb.close()
    assert list(tmp.iterdir()) == []
    with contextlib.suppress(RuntimeError):  # refused, or killed as it starts: either way, nothing kept
        sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out2")
    assert list(tmp.iterdir()) == []
