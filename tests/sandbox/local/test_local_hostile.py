"""Hostile harnesses against the local sandbox, in every isolation this machine offers.

Each wraps: ``session`` (a subreaper, always there), ``unshare`` (util-linux, when it may make a
PID namespace), ``bwrap`` (when bubblewrap is installed and works). A mode missing here is skipped
with the reason, never passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import shutil
import signal
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import NPROC_SLACK, LocalSandbox, tasks_of_uid
from tests.sandbox.conftest import HARNESS_PRELUDE, make_spec

ALL_MODES = [
    pytest.param(m, marks=pytest.mark.skipif(not isolation.available(m), reason=f"{m} cannot run here"))
    for m in isolation.MODES
]
PID_NAMESPACES = [p for p in ALL_MODES if p.values[0] != "session"]
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="checks processes in /proc")


def _sandbox(cfg: Any, mode: str) -> LocalSandbox:
    return LocalSandbox(cfg, isolation_mode=mode)


def _pids_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose argv holds ``marker``: only this test's own processes."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() not in (entry / "cmdline").read_bytes():
                    continue
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
            except (OSError, IndexError):
                continue
    return found


def _none_left(marker: str, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while _pids_with(marker):
        if time.monotonic() > end:
            for pid in _pids_with(marker):  # never leave them running for the next test
                os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


def _sleeper_source(marker: str) -> str:
    """Harness code: double fork, ``setsid``, exec a sleeper carrying ``marker``; wait until it is up."""
    return textwrap.dedent(f"""
        up = os.path.join(OUT, "sleeper-up")
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                code = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60)"
                os.execv(sys.executable, [sys.executable, "-c", code, up, {marker!r}])
            os._exit(0)
        os.waitpid(pid, 0)
        for _ in range(200):
            if os.path.exists(up):
                break
            time.sleep(0.025)
    """)


@needs_proc
@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_double_forked_setsid_sleeper_is_gone_after_the_task(
    mode: str, candidate, gateway, tmp_path, spec_for, small_cfg
) -> None:
    marker = f"ho-local-test-{uuid.uuid4().hex}"
    skill, harness = candidate(_sleeper_source(marker) + 'answer("left a sleeper behind")\n')
    out = _sandbox(small_cfg(), mode).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None, out
    assert (tmp_path / "out" / "sleeper-up").exists()  # the escape did happen
    assert _none_left(marker)
    assert out.notes[0] == isolation.NOTES[mode]


@needs_proc
@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_double_forked_setsid_sleeper_is_gone_after_a_timeout(
    mode: str, candidate, gateway, tmp_path, spec_for, small_cfg
) -> None:
    marker = f"ho-local-test-{uuid.uuid4().hex}"
    skill, harness = candidate(_sleeper_source(marker) + "time.sleep(100)\n")
    t0 = time.monotonic()
    out = _sandbox(small_cfg(), mode).run(spec_for(skill, harness, gateway.lease(), 2), tmp_path / "out")
    assert out.error_class == "timeout" and time.monotonic() - t0 < 8
    assert (tmp_path / "out" / "sleeper-up").exists()
    assert _none_left(marker)


@needs_proc
@pytest.mark.parametrize("mode", ALL_MODES)
def test_close_kills_a_running_task_and_what_it_left(
    mode: str, candidate, gateway, tmp_path, spec_for, small_cfg
) -> None:
    import threading

    marker = f"ho-local-test-{uuid.uuid4().hex}"
    skill, harness = candidate(_sleeper_source(marker) + "time.sleep(100)\n")
    sandbox = _sandbox(small_cfg(), mode)
    result: list[Any] = []
    worker = threading.Thread(
        target=lambda: result.append(
            sandbox.run(spec_for(skill, harness, gateway.lease(), 60), tmp_path / "o")
        )
    )
    worker.start()
    end = time.monotonic() + 10
    while not (tmp_path / "o" / "sleeper-up").exists() and time.monotonic() < end:
        time.sleep(0.05)
    sandbox.close()  # Ctrl-C: the run is ending
    worker.join(10)
    assert not worker.is_alive() and result
    assert _none_left(marker)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_harness_runs_under_an_nproc_limit(mode: str, candidate, gateway, tmp_path, spec_for, small_cfg):
    skill, harness = candidate("import resource\nanswer(resource.getrlimit(resource.RLIMIT_NPROC)[0])\n")
    cfg = small_cfg(pids=32)
    running = tasks_of_uid(os.getuid())
    out = _sandbox(cfg, mode).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None, out
    limit = int((tmp_path / "out" / "answer.txt").read_text())
    # What the uid ran at the start, plus rollout.pids, plus the slack (give or take the threads
    # that came and went meanwhile); not the inherited limit. The kernel does not apply it to root.
    assert limit != resource.RLIM_INFINITY
    assert abs(limit - (running + cfg.pids + NPROC_SLACK)) <= 40, (limit, running)


@pytest.fixture
def outside_tmp_workspace() -> Iterator[Path]:
    """A workspace outside /tmp (bwrap gives every task a private /tmp, which would hide it anyway)."""
    base = Path(
        tempfile.mkdtemp(prefix="ho-local-ws-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    )
    ws = base / "ws"
    (ws / "skill").mkdir(parents=True)
    (ws / "skill" / "SKILL.md").write_text("---\nname: t\ndescription: test skill\n---\nAnswer.\n")
    (ws / "tasks").mkdir()
    (ws / "tasks" / "val.jsonl").write_text('{"id": "v1", "input": "q", "answer": "GOLD-VAL-3c9e"}\n')
    (ws / "scorer.py").write_text("# SCORER-SECRET-77d1\n")
    (ws / "harnessopt.yaml").write_text("rollout: {}\n")
    (ws / "harness").mkdir()
    yield ws
    shutil.rmtree(base, ignore_errors=True)


PROBE = """
import glob
report = {}
def attempt(name, fn):
    try:
        report[name] = ["ok", str(fn())[:200]]
    except Exception as e:
        report[name] = ["refused", type(e).__name__]
WS = os.environ["HO_TEST_WS"]
HOST_PID = os.environ["HO_TEST_HOST_PID"]
attempt("read_val", lambda: open(os.path.join(WS, "tasks", "val.jsonl")).read())
attempt("read_scorer", lambda: open(os.path.join(WS, "scorer.py")).read())
attempt("write_skill", lambda: open(os.path.join(WS, "skill", "SKILL.md"), "a").write("owned"))
attempt("write_host", lambda: open(os.path.join(os.path.dirname(WS), "planted"), "w").write("x"))
attempt("host_environ", lambda: open(f"/proc/{HOST_PID}/environ", "rb").read())
report["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
attempt("read_own_out", lambda: open(os.path.join(OUT, "probe"), "w").write("fine"))
answer(json.dumps(report))
"""


def _probe(ws: Path, mode: str, gateway: Any, out_dir: Path, small_cfg: Any) -> tuple[Any, dict[str, Any]]:
    (ws / "harness" / "run.py").write_text(HARNESS_PRELUDE + PROBE)
    spec = make_spec(ws / "skill", ws / "harness", gateway.lease())
    env = {**spec.env, "HO_TEST_WS": str(ws), "HO_TEST_HOST_PID": str(os.getpid())}
    out = _sandbox(small_cfg(), mode).run(dataclasses.replace(spec, env=env), out_dir)
    assert out.error_class is None, out
    return out, json.loads((out_dir / "answer.txt").read_text())


@pytest.mark.skipif(not isolation.available("bwrap"), reason="bubblewrap is not installed or cannot run here")
def test_under_bwrap_the_workspace_is_hidden_and_the_host_read_only(
    outside_tmp_workspace: Path, gateway, tmp_path, small_cfg
) -> None:
    ws = outside_tmp_workspace
    out, report = _probe(ws, "bwrap", gateway, tmp_path / "out", small_cfg)
    assert report["read_val"][0] == "refused" and "GOLD-VAL" not in json.dumps(report)
    assert report["read_scorer"][0] == "refused" and "SCORER-SECRET" not in json.dumps(report)
    assert report["write_skill"][0] == "refused" and "owned" not in (ws / "skill" / "SKILL.md").read_text()
    assert report["write_host"][0] == "refused" and not (ws.parent / "planted").exists()
    assert report["host_environ"][0] == "refused" and os.getpid() not in report["pids"]
    assert report["read_own_out"][0] == "ok"
    assert out.notes[0] == isolation.NOTES["bwrap"] and "bwrap" in out.notes[0]


def test_without_bwrap_the_workspace_is_readable_and_the_note_says_so(
    outside_tmp_workspace: Path, gateway, tmp_path, small_cfg
) -> None:
    # What the weaker modes leave open, stated as the note and the warning say: no file-system isolation.
    out, report = _probe(outside_tmp_workspace, "session", gateway, tmp_path / "out", small_cfg)
    assert report["read_val"][0] == "ok" and "GOLD-VAL" in report["read_val"][1]
    assert "no file-system" in out.notes[0] and "tasks/" in isolation.HARNESS_REACH["session"]


@needs_proc
@pytest.mark.parametrize("mode", PID_NAMESPACES)
def test_in_a_pid_namespace_host_processes_are_out_of_sight(
    mode: str, outside_tmp_workspace: Path, gateway, tmp_path, small_cfg
) -> None:
    _, report = _probe(outside_tmp_workspace, mode, gateway, tmp_path / "out", small_cfg)
    assert os.getpid() not in report["pids"] and max(report["pids"]) < 50
    assert report["host_environ"][0] == "refused"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_gateway_port_on_loopback_is_reachable_in_every_mode(
    mode: str, candidate, tmp_path, spec_for, small_cfg
) -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        skill, harness = candidate(f"""
            import socket
            s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
            s.sendall(b"hello"); s.close()
            answer("sent")
        """)
        from harnessopt.protocols import GatewayLease

        lease = GatewayLease(token="t", base_url=f"http://127.0.0.1:{port}", socket_path=None)
        out = _sandbox(small_cfg(), mode).run(spec_for(skill, harness, lease), tmp_path / "out")
        assert out.error_class is None, out
        listener.settimeout(5)
        conn, _ = listener.accept()
        assert conn.recv(5) == b"hello"
        conn.close()
    finally:
        listener.close()


def test_workspace_roots_are_found_from_any_path_inside_and_never_slash(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".harnessopt" / "scratch" / "round-1" / "candidate" / "skill").mkdir(parents=True)
    (ws / "harnessopt.yaml").write_text("{}\n")
    inside = ws / ".harnessopt" / "scratch" / "round-1" / "candidate" / "skill"
    assert isolation.workspace_roots([inside, tmp_path / "elsewhere"]) == [ws.resolve()]
    assert isolation.workspace_roots([Path("/")]) == []


_HOST = """
import sys, threading
from pathlib import Path
from harnessopt.sandbox.local import isolation
from harnessopt.util.proc import Prestarted, run_in_session

mode, how, marker, up, cwd = sys.argv[1:]
# the task: a sleeper that double-forks out of its session, then one of its own
code = (
    "import os, sys, time\\n"
    "if os.fork() == 0:\\n"
    "    os.setsid()\\n"
    "    if os.fork() == 0:\\n"
    "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[2]])\\n"
    "    os._exit(0)\\n"
    "open(sys.argv[1], 'w').close()\\n"
    "time.sleep(120)\\n"
)
argv = isolation.wrap([sys.executable, "-c", code, up, marker], mode, writable=[Path(cwd)], hide=[],
                      cwd=Path(cwd), grace_s=0.5)
if how == "cold":
    threading.Thread(target=run_in_session, args=(argv,), kwargs={"timeout_s": 600, "cap": 1000}).start()
else:  # a warm slot made by a thread of its own, as the local pool's
    threading.Thread(target=lambda: Prestarted(argv, cap=1000) and threading.Event().wait()).start()
threading.Event().wait()
"""


@needs_proc
@pytest.mark.parametrize("how", ["cold", "warm"])
@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_task_ends_when_the_run_is_killed_with_sigkill(mode: str, how: str, tmp_path) -> None:
    """SIGKILL of the run runs none of its clean-up: the task and what it left die with it all the same
    (the parent-death signal of ``util.proc``, which the wrappers turn into the end of their tree)."""
    import subprocess
    import sys

    marker, up = f"ho-local-test-{uuid.uuid4().hex}", tmp_path / "up"
    (tmp_path / "host.py").write_text(_HOST)
    root = Path(__file__).resolve().parents[3]
    host = subprocess.Popen(
        [sys.executable, str(tmp_path / "host.py"), mode, how, marker, str(up), str(tmp_path)],
        cwd=root,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 20
        while how == "cold" and not up.exists() and time.monotonic() < end:
            time.sleep(0.05)
        while how == "warm" and not _pids_with(marker) and time.monotonic() < end:
            time.sleep(0.05)
        if how == "cold":
            assert up.exists() and _pids_with(marker)  # the task and its escaped sleeper are up
        host.kill()
        host.wait(10)
        assert _none_left(marker, within=5.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(host.pid, signal.SIGKILL)
