"""The warm interpreter in real task containers: the same harnesses through DockerSandbox with
``rollout.warm_interpreter`` off and on give the same RunOutput and the same /out bytes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socketserver
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harnessopt.protocols import GatewayLease
from harnessopt.sandbox.docker.pool import TASK_ENV, task_command
from harnessopt.sandbox.docker.sandbox import DockerSandbox

pytestmark = pytest.mark.docker

# The bridge's loopback port differs from container to container: the harnesses print the rest.
SHOW_ENV = """
def shown_env():
    return sorted((k, v.rsplit(":", 1)[0] if k.endswith("_BASE_URL") else v) for k, v in os.environ.items())
"""

HARNESSES = {
    "answer-and-files": """
        import re, urllib.request
        req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models",
                                     headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
        print(urllib.request.urlopen(req, timeout=10).read().decode())
        print("to stderr", file=sys.stderr)
        answer("the answer")
        os.makedirs(os.path.join(OUT, "sub"))
        with open(os.path.join(OUT, "sub", "raw.bin"), "wb") as f:
            f.write(bytes(range(256)) * 100)
        with open(os.path.join(OUT, "trajectory.jsonl"), "w") as f:
            # the candidate's copy has a random name under /ho-cand, one per sandbox
            path = [re.sub("/ho-cand/[0-9a-f]+/", "/ho-cand/COPY/", p) for p in sys.path]
            f.write(json.dumps({"argv": sys.argv, "orig": sys.orig_argv[1:], "path": path,
                                "file": __file__, "name": __name__, "cwd": os.getcwd()}) + "\\n")
        """,
    "environment-and-child": SHOW_ENV
    + """
        import subprocess
        print(shown_env())
        child = "import os; print(sorted(k for k in os.environ))"
        subprocess.run([sys.executable, "-c", child], check=True)
        answer(len(os.environ))
        """,
    "crash-traceback": """
        def parse(x):
            return int(x)
        try:
            parse("nope")
        except ValueError as e:
            raise RuntimeError("could not parse") from e
        """,
    "exit-message": """
        import atexit
        atexit.register(lambda: print("atexit ran"))
        answer("partial")
        sys.exit("giving up")
        """,
    "exit-3": "print('out'); sys.exit(3)\n",
    "pickle-main-class": """
        import pickle
        class Point:
            def __init__(self, x):
                self.x = x
            def __repr__(self):
                return f"Point({self.x})"
        data = pickle.dumps(Point(3))
        print(pickle.loads(data), Point.__module__)
        with open(os.path.join(OUT, "p.pickle"), "wb") as f:
            f.write(data)
        """,
}


@pytest.fixture
def sandboxes(docker_client: Any, small_cfg: Any) -> Iterator[dict[str, DockerSandbox]]:
    made = {
        "cold": DockerSandbox(small_cfg(warm_interpreter=False), docker_client, warm=1),
        "warm": DockerSandbox(small_cfg(warm_interpreter=True), docker_client, warm=1),
    }
    yield made
    for sb in made.values():
        sb.close()
        left = docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sb.run_id}"})
        assert left == [], f"containers left behind: {left}"


def comparable(out: Any) -> dict[str, Any]:
    """A RunOutput without its wall time, plus every file of its /out."""
    seen = {k: v for k, v in dataclasses.asdict(out).items() if k not in ("wall_s", "out_dir")}
    root = Path(out.out_dir)
    seen["files"] = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return seen


def run_both(sandboxes: dict[str, DockerSandbox], spec: Any, tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {mode: comparable(sb.run(spec, tmp_path / mode)) for mode, sb in sandboxes.items()}


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_cold_and_warm_give_the_same_output(sandboxes, candidate, gateway, tmp_path, spec_for, name):
    skill, harness = candidate(HARNESSES[name])
    got = run_both(sandboxes, spec_for(skill, harness, gateway.lease()), tmp_path)
    for key in got["cold"]["files"]:  # file by file first: a clearer message
        assert got["cold"]["files"][key] == got["warm"]["files"].get(key), key
    assert got["cold"] == got["warm"]
    assert got["cold"]["error_class"] != "sandbox_error", got["cold"]
    if name == "answer-and-files":
        assert got["cold"]["files"]["answer.txt"] == b"the answer" and got["cold"]["error_class"] is None
        assert "echo /v1/models" in got["cold"]["stdout_tail"]
        assert b'"path": ["/ho-cand/COPY/harness", ' in got["cold"]["files"]["trajectory.jsonl"]
    if name == "crash-traceback":
        assert 'File "/ho/harness/run.py"' in got["cold"]["stderr_tail"]
        assert "runner.py" not in got["warm"]["stderr_tail"]


def test_the_warm_one_is_warm_and_the_cold_one_cold(sandboxes, candidate, gateway, tmp_path, spec_for):
    """What tells them apart by design: the warm interpreter has imported modules ahead."""
    skill, harness = candidate("answer('difflib' in sys.modules)\n")
    got = run_both(sandboxes, spec_for(skill, harness, gateway.lease()), tmp_path)
    assert (got["cold"]["files"]["answer.txt"], got["warm"]["files"]["answer.txt"]) == (b"False", b"True")


def test_a_task_variable_read_at_startup_gets_a_real_cold_start(
    sandboxes, candidate, gateway, tmp_path, spec_for
):
    skill, harness = candidate("answer(f\"{hash('abc')} {'difflib' in sys.modules}\")\n")
    spec = spec_for(skill, harness, gateway.lease())
    spec = dataclasses.replace(spec, env={**spec.env, "PYTHONHASHSEED": "7"})
    got = run_both(sandboxes, spec, tmp_path)
    assert got["cold"] == got["warm"] and got["warm"]["files"]["answer.txt"].endswith(b" False")


def test_the_container_command_holds_no_secret(small_cfg):
    """The warm interpreter's environment is in the container's command: only the static part."""
    assert task_command(small_cfg(warm_interpreter=False)) == ["python3", "/opt/ho/runner.py", "task"]
    command = task_command(small_cfg())
    assert command[:4] == ["python3", "/opt/ho/runner.py", "task", "--warm-env"]
    assert set(TASK_ENV) == {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
    }


def test_a_dead_warm_interpreter_gives_a_cold_start(
    docker_client, small_cfg, candidate, gateway, tmp_path, spec_for
):
    """Kill the waiting stub inside a pooled container: the runner starts the harness cold."""
    sandbox = DockerSandbox(small_cfg(), docker_client, warm=1)
    take = sandbox.pool.take
    kill_stub = "import os; [os.kill(int(p), 9) for p in os.listdir('/proc') if p.isdigit() and p not in ('1', str(os.getpid()))]"

    def take_and_kill(socket_dir: Any) -> Any:
        warm = take(socket_dir)
        for _ in range(200):  # the stub is the runner's only child until the job comes
            ps = warm.container.exec_run(
                ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], user="65534:65534"
            )
            if b"runner.py warm" in ps.output:
                break
            time.sleep(0.1)
        assert b"runner.py warm" in ps.output
        warm.container.exec_run(["python3", "-c", kill_stub], user="65534:65534")
        for _ in range(200):  # SIGKILL lands when the stub is next scheduled: wait until it is a zombie
            ps = warm.container.exec_run(
                ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], user="65534:65534"
            )
            if b"runner.py warm" not in ps.output:
                break
            time.sleep(0.05)
        return warm

    sandbox.pool.take = take_and_kill  # type: ignore[method-assign]
    try:
        skill, harness = candidate("print('hello'); answer('difflib' in sys.modules)\n")
        out = sandbox.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    finally:
        sandbox.close()
    assert (out.error_class, out.exit_code, out.stdout_tail) == (None, 0, "hello"), out
    assert (tmp_path / "out" / "answer.txt").read_text() == "False", out


class FakeMessages:
    """A Unix-socket server answering every POST /v1/messages with one fixed message."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ho-warm-gw-"))
        self.path = self.dir / "gw.sock"
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                reply = {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": bodies[-1]["model"],
                    "content": [{"type": "text", "text": "  forty-two \n"}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 5, "output_tokens": 2},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args: Any) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(str(self.path), Handler)
        os.chmod(self.path, 0o666)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_the_chat_template_cold_and_warm(sandboxes, candidate, tmp_path, spec_for):
    """The shipped chat template, its one Messages call answered: same output, same /out but
    the trajectory's timestamps."""
    skill, harness = candidate("")
    shutil.copy(
        Path(__file__).resolve().parents[3] / "workspace_templates" / "chat" / "run.py", harness / "run.py"
    )
    fake = FakeMessages()
    try:
        lease = GatewayLease(token="ho-run-token-9", base_url="http://127.0.0.1:9", socket_path=fake.path)
        got = run_both(sandboxes, spec_for(skill, harness, lease), tmp_path)
    finally:
        fake.close()
    for mode in got.values():
        events = [json.loads(line) for line in mode["files"].pop("trajectory.jsonl").splitlines()]
        mode["events"] = [{k: v for k, v in e.items() if k != "t"} for e in events]
    assert got["cold"] == got["warm"]
    assert got["warm"]["files"]["answer.txt"] == b"forty-two" and got["warm"]["error_class"] is None
    assert len(fake.bodies) == 2 and fake.bodies[0] == fake.bodies[1]
