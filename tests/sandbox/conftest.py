"""Fixtures for the sandbox tests: a Docker engine (required in CI), the image, a gateway echo."""

from __future__ import annotations

import os
import shutil
import socketserver
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import RolloutConfig
from harnessopt.protocols import GatewayLease, RunSpec

IMAGE = "harnessopt-sandbox:latest"


class EchoGateway:
    """A Unix-socket HTTP server standing in for the model gateway; records what reached it."""

    def __init__(self) -> None:
        # 0700 like tempfile.mkdtemp: the sandbox must make it traversable for uid 65534.
        self.dir = Path(tempfile.mkdtemp(prefix="ho-gwt-"))
        self.path = self.dir / "gw.sock"
        self.requests: list[dict[str, str]] = []
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append({"path": self.path, "key": self.headers.get("x-api-key", "")})
                body = f"echo {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args: Any) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.server = Server(str(self.path), Handler)
        os.chmod(self.path, 0o666)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lease(self, token: str = "ho-run-token-123") -> GatewayLease:
        return GatewayLease(token=token, base_url="http://127.0.0.1:9", socket_path=self.path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def gateway() -> Iterator[EchoGateway]:
    gw = EchoGateway()
    yield gw
    gw.close()


@pytest.fixture
def candidate(tmp_path: Path) -> Any:
    """make(harness_source) -> (skill_dir, harness_dir) inside a fake workspace with secrets around."""
    ws = tmp_path / "ws"
    (ws / "skill").mkdir(parents=True)
    (ws / "skill" / "SKILL.md").write_text("---\nname: t\ndescription: test skill\n---\nAnswer briefly.\n")
    (ws / "tasks").mkdir()
    (ws / "tasks" / "tasks.jsonl").write_text('{"id": "t2", "input": "q", "answer": "GOLD-ANSWER-7f3a"}\n')
    (ws / "scorer.py").write_text("# SCORER-SECRET-91c2\n")

    def make(source: str) -> tuple[Path, Path]:
        (ws / "harness").mkdir(exist_ok=True)
        (ws / "harness" / "run.py").write_text(HARNESS_PRELUDE + textwrap.dedent(source))
        return ws / "skill", ws / "harness"

    make.ws = ws  # type: ignore[attr-defined]
    return make


HARNESS_PRELUDE = """\
import argparse, json, os, sys, time
_ap = argparse.ArgumentParser()
_ap.add_argument("--task"); _ap.add_argument("--skill"); _ap.add_argument("--out")
ARGS = _ap.parse_args()
OUT = ARGS.out
def answer(text):
    with open(os.path.join(OUT, "answer.txt"), "w") as f:
        f.write(str(text))
"""


def make_spec(skill: Path, harness: Path, lease: GatewayLease, timeout_s: float = 20.0) -> RunSpec:
    task = {"id": "t1", "input": "what?", "split": "train", "metadata": {}}
    return RunSpec(task, skill, harness, {"HARNESSOPT_TARGET_MODEL": "m"}, lease, timeout_s)


def make_cfg(**kw: Any) -> RolloutConfig:
    base: dict[str, Any] = dict(
        concurrency=1, memory_mb=256, pids=64, out_mb=8, output_cap_kb=16, timeout_s=20.0
    )
    base.update(kw)
    return RolloutConfig(**base)


@pytest.fixture
def spec_for() -> Any:
    """spec_for(skill, harness, lease, timeout_s=20) -> RunSpec of a small public task."""
    return make_spec


@pytest.fixture
def small_cfg() -> Any:
    """small_cfg(**overrides) -> a RolloutConfig with small limits."""
    return make_cfg
