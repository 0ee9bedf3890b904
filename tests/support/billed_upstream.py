"""A slow upstream that bills what a test says, and a burst of concurrent SDK calls through a gateway.

upstream = BilledUpstream(lambda request: 1000)  # input tokens billed per call
outcomes = concurrent_calls(gw, 40, model=..., max_tokens=..., messages=[...])
outcomes.count("ok"), outcomes.count("refused")  # refused: a budget 429 the SDK did not retry
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic

from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Forward


class BilledUpstream:
    """Each call takes ``delay_s`` (so a burst is in flight together) and bills ``input_tokens(request)``
    input tokens and its whole ``max_tokens`` of output."""

    name = "billed"

    def __init__(self, input_tokens: Callable[[dict[str, Any]], int], delay_s: float = 0.3) -> None:
        self.input_tokens = input_tokens
        self.delay_s = delay_s
        self.calls = 0
        self.lock = threading.Lock()

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_s)
        usage = {"input_tokens": self.input_tokens(request), "output_tokens": request["max_tokens"]}
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": request["model"],
                "content": [{"type": "text", "text": "x"}], "stop_reason": "max_tokens",
                "stop_sequence": None, "usage": usage}  # fmt: skip


def concurrent_calls(gw: Gateway, n: int, **request: Any) -> list[str]:
    """``n`` harnesses, each with its own lease, make one call at the same moment (no SDK retries);
    each outcome is "ok" or "refused" (a budget refusal, which must say not to retry)."""
    outcomes: list[str] = []
    start = threading.Barrier(n)

    def harness() -> None:
        lease = gw.lease("target", 1, "t")
        client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0, timeout=30)
        start.wait()
        try:
            client.messages.create(**request)
            outcomes.append("ok")
        except anthropic.RateLimitError as e:
            assert e.response.headers["x-should-retry"] == "false"
            outcomes.append("refused")

    threads = [threading.Thread(target=harness) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes
