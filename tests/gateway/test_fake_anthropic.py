"""The fake Messages API is as strict as the real one on beta fields, and the gateway keeps them working.

A body field that exists only in a beta (Claude Code's ``context_management``) is refused by the
real API unless the ``anthropic-beta`` header names that beta; the fake does the same, so a
gateway that drops the header (or ``?beta=true``) fails the tests that use the fake.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models.anthropic_api import AnthropicModel
from harnessopt.gateway.server import Gateway
from tests.support.fake_anthropic import FakeAnthropicServer

BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
}
BETA = "claude-code-20250219,context-management-2025-06-27"


def _ok(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": request["body"]["model"],
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def _post(base_url: str, key: str, body: dict[str, Any], beta: str | None) -> Any:
    client = anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0)
    headers = {"anthropic-beta": beta} if beta else {}
    return client.post("/v1/messages?beta=true", body=body, cast_to=object, options={"headers": headers})


def test_a_beta_field_without_its_beta_header_is_refused_naming_the_field() -> None:
    with FakeAnthropicServer(_ok) as fake:
        with pytest.raises(anthropic.BadRequestError) as refused:
            _post(fake.base_url, "k", BODY, None)
        assert refused.value.body["error"]["type"] == "invalid_request_error"
        assert refused.value.body["error"]["message"].startswith("context_management: Extra inputs")
        memory_tool = {**BODY, "tools": [{"type": "memory_20250818", "name": "memory"}]}
        memory_tool.pop("context_management")
        with pytest.raises(anthropic.BadRequestError, match="tools.0.type"):
            _post(fake.base_url, "k", memory_tool, "claude-code-20250219")
        assert _post(fake.base_url, "k", BODY, BETA)["content"][0]["text"] == "hello"
        assert fake.requests[-1]["query"] == "beta=true"
        # a system-role message (Claude Code on newer models) needs its beta as much
        system = {**BODY, "messages": [*BODY["messages"], {"role": "system", "content": "note"}]}
        with pytest.raises(anthropic.BadRequestError, match="messages.1.role"):
            _post(fake.base_url, "k", system, BETA)
        assert _post(fake.base_url, "k", system, f"{BETA},mid-conversation-system-2026-04-07")


def test_the_gateway_forwards_the_beta_header_and_query_upstream(tmp_path) -> None:
    with FakeAnthropicServer(_ok) as fake:
        upstream = AnthropicModel("sk-real", fake.base_url, max_retries=0)
        with Gateway(upstream, BudgetConfig()) as gw:
            lease = gw.lease("target", 1, "t1")
            assert _post(gw.base_url, lease.token, BODY, BETA)["content"][0]["text"] == "hello"
            with pytest.raises(anthropic.BadRequestError, match="context_management"):
                _post(gw.base_url, lease.token, BODY, None)  # what the real API says without it
        sent = fake.requests[0]
        assert sent["query"] == "beta=true" and sent["headers"]["anthropic-beta"] == BETA
        assert "context_management" in sent["body"] and lease.token not in str(sent["headers"])
