"""AnthropicModel against a local fake upstream: forwarding, retries, error mapping, key."""

from __future__ import annotations

import socket

import pytest

from harnessopt.errors import UserError
from harnessopt.models import AnthropicModel, make_model
from harnessopt.protocols import ModelError
from tests.fake_anthropic import FakeAnthropicServer

BODY = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
    "some_future_field": {"kept": True},
}


def flaky(failures: list[ModelError]):
    def respond(request):
        if failures:
            raise failures.pop(0)
        return REPLY

    return respond


def test_forwards_body_and_key_and_returns_raw_body():
    with FakeAnthropicServer(flaky([])) as fake:
        model = AnthropicModel("sk-test", fake.base_url + "/")
        assert model.create({**BODY, "stream": True}, "target") == REPLY
    sent = fake.requests[0]
    assert sent["body"] == BODY and sent["stream"] is False
    assert sent["headers"]["x-api-key"] == "sk-test" and sent["headers"]["anthropic-version"] == "2023-06-01"


def test_retries_overloaded_and_rate_limited_then_succeeds():
    failures = [
        ModelError(529, "overloaded_error", "busy", retryable=True),
        ModelError(429, "rate_limit_error", "slow", retryable=True),
    ]
    with FakeAnthropicServer(flaky(failures)) as fake:
        model = AnthropicModel("k", fake.base_url, backoff_s=0.01)
        assert model.create(BODY, "target")["content"][0]["text"] == "hello"
    assert len(fake.requests) == 3


def test_gives_up_after_max_retries_and_keeps_status():
    errors = [ModelError(500, "api_error", "boom", retryable=True) for _ in range(5)]
    with FakeAnthropicServer(flaky(errors)) as fake:
        model = AnthropicModel("k", fake.base_url, max_retries=2, backoff_s=0.01)
        with pytest.raises(ModelError) as err:
            model.create(BODY, "target")
    assert err.value.status == 500 and err.value.error_type == "api_error" and "boom" in err.value.message
    assert len(fake.requests) == 3


def test_client_errors_are_not_retried():
    with FakeAnthropicServer(
        flaky([ModelError(400, "invalid_request_error", "max_tokens: required")])
    ) as fake:
        model = AnthropicModel("k", fake.base_url, backoff_s=0.01)
        with pytest.raises(ModelError) as err:
            model.create(BODY, "target")
    assert (err.value.status, err.value.error_type) == (400, "invalid_request_error")
    assert "max_tokens: required" in err.value.message and len(fake.requests) == 1


def test_unreachable_upstream_is_a_retryable_502():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = AnthropicModel("k", f"http://127.0.0.1:{port}", max_retries=1, backoff_s=0.01)
    with pytest.raises(ModelError) as err:
        model.create(BODY, "target")
    assert err.value.status == 502 and err.value.retryable


def test_missing_key_is_a_user_error():
    with pytest.raises(UserError, match="set ANTHROPIC_API_KEY.*scripted"):
        make_model("anthropic", env={})
    model = make_model(
        "anthropic", env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}
    )
    assert isinstance(model, AnthropicModel) and model.base_url == "http://127.0.0.1:1"
