"""What the real Claude Code CLI needs in tests: scripted replies to its requests, and its image.

``CliScript(steps)`` answers the CLI the way a model would, whatever extra calls it makes: a
call without tools (a title or other side call) gets a short text; a call of the main loop gets
``steps[n]``, n being how many assistant turns its messages already hold, so the script goes
tool call, tool result, next tool call, ..., final text.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any

import pytest

CLAUDE_CODE_IMAGE = "harnessopt-sandbox:claude-code"

_ids = itertools.count(1)


def tool_use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": name, "input": tool_input}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


class CliScript:
    """A request function for ``FakeAnthropicServer`` that drives the CLI through ``steps``."""

    def __init__(self, steps: list[dict[str, Any]], *, title: str = "Task at hand"):
        self.steps = steps
        self.title = title
        self.main_calls: list[dict[str, Any]] = []
        self.side_calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        with self._lock:
            if not body.get("tools"):
                self.side_calls.append(request)
                return reply(body, [text(self.title)])
            self.main_calls.append(request)
        turns = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        return reply(body, [self.steps[min(turns, len(self.steps) - 1)]])


def reply(body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{next(_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "fake"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1000, "output_tokens": 20},
    }


def claude_code_image(docker_client: Any) -> str:
    """The sandbox image with the CLI (built here when missing or stale; CI builds it in .ci/run)."""
    return variant_image(docker_client, CLAUDE_CODE_IMAGE, "claude-code", ".ci/claude_code_setup.sh")


def variant_image(docker_client: Any, tag: str, variant: str, setup: str) -> str:
    """Image ``tag`` built ``--with variant`` (built here when missing or stale; CI runs ``setup``)."""
    from harnessopt.errors import UserError
    from harnessopt.sandbox.image.build import image_status
    from harnessopt.sandbox.image.variants import build_image_with, image_has

    if image_status(docker_client, tag) != "ok" or not image_has(docker_client, tag, variant):
        try:
            build_image_with(None, tag, [variant], announce=lambda _m: None)
        except UserError as e:
            why = f"the {variant} image cannot be built ({e}); run {setup}"
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why + "; set CI=true to make this a failure")
    return tag
