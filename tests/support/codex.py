"""What the real Codex CLI needs in tests: its sandbox image, and a model that drives it by turns.

``CodexScript(steps)`` answers Codex the way a model would: a call gets ``steps[n](body)``, n
being how many assistant turns its messages already hold (Codex sends the whole conversation
each call), so the script goes command, its output, next command, ..., final text. Steps see
the canonical (Messages API) body the gateway forwards, e.g. to read a tool result.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.support.claude_code import variant_image

CODEX_IMAGE = "harnessopt-sandbox:codex"
Step = Callable[[dict[str, Any]], dict[str, Any]]

_ids = itertools.count(1)


def command(cmd: str) -> Step:
    """A step calling Codex's shell tool (``exec_command``) with ``cmd``."""
    return lambda body: {
        "type": "tool_use",
        "id": f"call_{next(_ids):06d}",
        "name": "exec_command",
        "input": {"cmd": cmd},
    }


def say(text: str | Callable[[dict[str, Any]], str]) -> Step:
    return lambda body: {"type": "text", "text": text(body) if callable(text) else text}


def tool_results(body: dict[str, Any]) -> str:
    """The text of every tool result in the conversation (what Codex's commands printed)."""
    out = []
    for message in body.get("messages") or []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_result":
                out.append(json.dumps(block.get("content")))
    return "\n".join(out)


class CodexScript:
    """A request function for ``FakeAnthropicServer`` that drives Codex through ``steps``."""

    def __init__(self, steps: list[Step]):
        self.steps = steps
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        with self._lock:
            self.calls.append(request)
        turns = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        block = self.steps[min(turns, len(self.steps) - 1)](body)
        stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
        return {
            "id": f"msg_{next(_ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": [block],
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 20},
        }


def codex_image(docker_client: Any) -> str:
    """The sandbox image with the Codex CLI (built here when missing or stale; CI builds it in .ci/run)."""
    return variant_image(docker_client, CODEX_IMAGE, "codex", ".ci/codex_setup.sh")
