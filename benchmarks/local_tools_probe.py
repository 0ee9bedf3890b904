"""What the tools check sees on the real llama-cpp-python server (SmolLM2-135M, .ci/llm_setup.sh).

Starts ``python -m llama_cpp.server`` once with its default chat format and once with
``--chat_format chatml-function-calling``, sends the tools check's two requests ("Call the ping
tool." without and with one tool) and prints the prompt tokens each counted, whether a tool was
called, and what ``OpenAIModel.check_tools`` says.
Usage: python benchmarks/local_tools_probe.py  (a few seconds of CPU per server)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.local_llm import ALIAS, gguf_path  # noqa: E402
from harnessopt.gateway.models import OpenAIModel  # noqa: E402

PING = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Answer a ping with pong.",
        "parameters": {"type": "object", "properties": {}},
    },
}


def post(base: str, body: dict) -> dict:
    req = urllib.request.Request(
        base + "/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "authorization": "Bearer none"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def measure(extra: list[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf_path()),
        "--model_alias",
        ALIAS,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "1",
        "--n_ctx",
        "2048",
        "--verbose",
        "False",
        *extra,
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        body = {
            "model": ALIAS,
            "messages": [{"role": "user", "content": "Call the ping tool."}],
            "max_tokens": 1,
        }
        plain = post(base, body)
        tooled = post(base, {**body, "tools": [PING], "max_tokens": 64})
        called = bool(tooled["choices"][0]["message"].get("tool_calls"))
        said = OpenAIModel("none", base).check_tools(ALIAS, "model.target")
        print(
            f"{' '.join(extra) or 'default chat format'}: prompt tokens without a tool "
            f"{plain['usage']['prompt_tokens']}, with one {tooled['usage']['prompt_tokens']}; tool called: {called}; "
            f"check: {'warns' if said else 'passes'}"
        )
    finally:
        os.killpg(proc.pid, 9)


def main() -> None:
    measure([])
    measure(["--chat_format", "chatml-function-calling"])


if __name__ == "__main__":
    main()
