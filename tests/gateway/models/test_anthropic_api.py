"""AnthropicModel against local fake upstreams: forwarding, the SDK's retries, error mapping, key.

The counting upstream (tests/support/counting_upstream.py) pins how many times one logical call
reaches the API under each kind of fault, alone and through the real gateway with a harness
side anthropic client: retries happen in one place, never multiplied by the client's own.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import anthropic
import pytest

from harnessopt.config import BudgetConfig
from harnessopt.errors import UserError
from harnessopt.gateway.models import AnthropicModel, make_model
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Forward, ModelError
from tests.support.counting_upstream import (
    REPLY,
    CountingUpstream,
    Step,
    api_error,
    cut_body,
    malformed,
    ok,
    overloaded,
    rate_limited,
    reset,
    stall,
)
from tests.support.fake_anthropic import FakeAnthropicServer

KEY = "sk-ant-real-secret-0123456789"
BODY = {"model": "claude-haiku-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
OVERFLOW = "prompt is too long: 212000 tokens > 200000 maximum"


def sent_key(headers: dict[str, str]) -> str | None:
    """The key a request carried, as ``x-api-key`` or ``Authorization: Bearer`` (SDK versions differ)."""
    if key := headers.get("x-api-key"):
        return key
    auth = headers.get("authorization", "")
    return auth[7:] if auth.lower().startswith("bearer ") else None


def flaky(failures: list[ModelError]):
    def respond(request):
        if failures:
            raise failures.pop(0)
        return REPLY

    return respond


def test_forwards_body_and_key_and_returns_raw_body():
    with FakeAnthropicServer(flaky([])) as fake:
        model = AnthropicModel("sk-test", fake.base_url + "/")
        assert model.create({**BODY, "stream": True}, "target") == REPLY  # unknown fields survive
    sent = fake.requests[0]
    assert sent["body"] == BODY and sent["stream"] is False
    assert sent_key(sent["headers"]) == "sk-test" and sent["headers"]["anthropic-version"]


def test_retries_overloaded_and_rate_limited_then_succeeds():
    script = [overloaded(), rate_limited(), ok()]
    with CountingUpstream(script) as up:
        model = AnthropicModel("k", up.base_url)
        assert model.create(BODY, "target")["content"][0]["text"] == "hello"
    assert len(up.attempts) == 3


def test_gives_up_after_max_retries_and_keeps_status():
    with CountingUpstream([api_error(500, "api_error", "boom")]) as up:
        model = AnthropicModel("k", up.base_url, max_retries=2)
        with pytest.raises(ModelError) as err:
            model.create(BODY, "target")
    assert err.value.status == 500 and err.value.error_type == "api_error" and "boom" in err.value.message
    assert "gave up after 3 attempts" in err.value.message and not err.value.retryable
    assert len(up.attempts) == 3


def test_client_errors_are_not_retried():
    with FakeAnthropicServer(
        flaky([ModelError(400, "invalid_request_error", "max_tokens: required")])
    ) as fake:
        model = AnthropicModel("k", fake.base_url)
        with pytest.raises(ModelError) as err:
            model.create(BODY, "target")
    assert (err.value.status, err.value.error_type) == (400, "invalid_request_error")
    assert "max_tokens: required" in err.value.message and len(fake.requests) == 1


def test_unreachable_upstream_is_a_502_that_clients_must_not_retry():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = AnthropicModel("k", f"http://127.0.0.1:{port}", max_retries=1)
    with pytest.raises(ModelError) as err:
        model.create(BODY, "target")
    assert err.value.status == 502 and not err.value.retryable
    assert f"127.0.0.1:{port}" in err.value.message and "gave up after 2 attempts" in err.value.message


def test_missing_key_is_a_user_error():
    with pytest.raises(UserError, match="set ANTHROPIC_API_KEY.*scripted"):
        make_model("anthropic", env={})
    model = make_model(
        "anthropic", env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}
    )
    assert isinstance(model, AnthropicModel) and model.base_url == "http://127.0.0.1:1"


# --------------------------------------------------------------------------- attempts per fault

# (id, script, max_retries, upstream attempts, (status, error type) raised or None for success)
FAULTS: list[tuple[str, list[Step], int, int, tuple[int, str] | None]] = [
    ("429 then ok", [rate_limited(), ok()], 4, 2, None),
    ("persistent 429", [rate_limited()], 2, 3, (429, "rate_limit_error")),
    ("persistent 500", [api_error(500, "api_error", "Internal server error")], 2, 3, (500, "api_error")),
    ("persistent 502", [api_error(502, "api_error", "Bad gateway")], 2, 3, (502, "api_error")),
    ("503 twice then ok", [api_error(503, "api_error", "Unavailable")] * 2 + [ok()], 4, 3, None),
    ("persistent 529", [overloaded()], 4, 5, (529, "overloaded_error")),
    ("529 said not to retry", [api_error(529, "overloaded_error", "x", {"x-should-retry": "false"})], 4, 1, (529, "overloaded_error")),
    ("401 revoked key", [api_error(401, "authentication_error", "invalid x-api-key")], 4, 1, (401, "authentication_error")),
    ("400 context overflow", [api_error(400, "invalid_request_error", OVERFLOW)], 4, 1, (400, "invalid_request_error")),
    ("reset then ok", [reset(), ok()], 4, 2, None),
    ("persistent reset", [reset()], 1, 2, (502, "api_error")),
    ("body cut mid-way then ok", [cut_body(), ok()], 4, 2, None),
    ("read timeout then ok", [stall(2.0), ok()], 4, 2, None),
    ("persistent read timeout", [stall(2.0)], 1, 2, (504, "timeout_error")),
    ("malformed JSON 200", [malformed(), ok()], 4, 1, (502, "api_error")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "max_retries", "attempts", "raised"), [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS]
)
def test_upstream_attempts_per_logical_call(script, max_retries, attempts, raised):
    with CountingUpstream(script) as up:
        model = AnthropicModel(KEY, up.base_url, max_retries=max_retries, timeout_s=0.3)
        if raised is None:
            assert model.create(BODY, "target") == REPLY
        else:
            with pytest.raises(ModelError) as err:
                model.create(BODY, "target")
            assert (err.value.status, err.value.error_type) == raised
            assert not err.value.retryable  # the SDK decided; nobody downstream retries again
            assert KEY not in str(err.value) and KEY not in err.value.message
            if attempts > 1:
                assert f"gave up after {attempts} attempts" in err.value.message
    assert len(up.attempts) == attempts
    assert all(a["body"] == BODY and a["path"] == "/v1/messages" for a in up.attempts)


def test_error_messages_say_what_upstream_said():
    overflow = api_error(400, "invalid_request_error", OVERFLOW)
    with CountingUpstream([overflow]) as up, pytest.raises(ModelError, match="prompt is too long: 212000"):
        AnthropicModel(KEY, up.base_url).create(BODY, "target")
    revoked = api_error(401, "authentication_error", "invalid x-api-key")
    with CountingUpstream([revoked]) as up, pytest.raises(ModelError, match="refused the API key.*check"):
        AnthropicModel(KEY, up.base_url).create(BODY, "target")


def test_retry_after_is_honoured():
    # One second, longer than any first backoff of the SDK's own (at most 0.5 s).
    with CountingUpstream([rate_limited(retry_after="1"), ok()]) as up:
        t0 = time.monotonic()
        assert AnthropicModel(KEY, up.base_url).create(BODY, "target") == REPLY
        waited = time.monotonic() - t0
    assert len(up.attempts) == 2 and waited >= 0.95


def test_the_key_never_appears_in_errors_or_repr():
    echo = api_error(401, "authentication_error", f"invalid x-api-key: {KEY}")
    with CountingUpstream([echo]) as up:
        model = AnthropicModel(KEY, up.base_url)
        with pytest.raises(ModelError) as err:
            model.create(BODY, "target")
    assert sent_key(up.attempts[0]["headers"]) == KEY  # it did go upstream
    assert KEY not in err.value.message and KEY not in str(err.value) and "[redacted]" in err.value.message
    assert KEY not in repr(model) and KEY not in str(model)


def test_forward_passes_beta_header_and_query_but_no_other_header():
    forward = Forward(
        {"anthropic-beta": "context-1m-2025-08-07", "anthropic-version": "2023-06-01", "x-api-key": "lease"},
        "beta=true",
    )
    with CountingUpstream([ok()]) as up:
        AnthropicModel(KEY, up.base_url).create(BODY, "target", forward=forward)
    sent = up.attempts[0]
    assert sent["query"] == "beta=true" and sent["headers"]["anthropic-beta"] == "context-1m-2025-08-07"
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    assert sent_key(sent["headers"]) == KEY and "lease" not in json.dumps(sent["headers"])


def test_forward_keeps_only_the_allow_list():
    got = Forward.of(
        {"Anthropic-Beta": "b", "Authorization": "Bearer t", "X-Api-Key": "t", "Cookie": "c"}, "q=1"
    )
    assert dict(got.headers) == {"anthropic-beta": "b"} and got.query == "q=1"


# --------------------------------------------------------------------------- through the gateway


def lease_client(gw: Gateway, **kwargs) -> tuple[anthropic.Anthropic, str]:
    lease = gw.lease("target", 1)
    return anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, **kwargs), lease.token


def test_retries_do_not_stack_through_the_gateway():
    """A persistent 503: 1 + the upstream's max_retries attempts, not times the client's retries."""
    with CountingUpstream([api_error(503, "api_error", "Service unavailable")]) as up:
        model = AnthropicModel(KEY, up.base_url, max_retries=3)
        with Gateway(model, BudgetConfig()) as gw:
            client, token = lease_client(gw)  # the SDK's default max_retries=2
            assert client.max_retries == 2
            with pytest.raises(anthropic.APIStatusError) as err:
                client.messages.create(**BODY)
            exchanges = gw.release(token)
    assert len(up.attempts) == 1 + 3
    assert err.value.status_code == 503 and err.value.response.headers["x-should-retry"] == "false"
    assert len(exchanges) == 1 and "gave up after 4 attempts" in (exchanges[0].error or "")
    assert KEY not in str(err.value) and KEY not in (exchanges[0].error or "")


def test_a_revoked_key_reaches_the_harness_as_one_401():
    revoked = api_error(401, "authentication_error", "invalid x-api-key")
    with CountingUpstream([revoked]) as up, Gateway(AnthropicModel(KEY, up.base_url), BudgetConfig()) as gw:
        client, _ = lease_client(gw)
        with pytest.raises(anthropic.AuthenticationError, match="refused the API key"):
            client.messages.create(**BODY)
    assert len(up.attempts) == 1


def test_beta_header_and_query_reach_upstream_and_the_lease_token_does_not():
    with CountingUpstream([ok()]) as up, Gateway(AnthropicModel(KEY, up.base_url), BudgetConfig()) as gw:
        client, token = lease_client(gw)
        reply = client.beta.messages.create(**BODY, betas=["context-1m-2025-08-07"])
        assert reply.content[0].text == "hello"  # type: ignore[union-attr]
        # Claude Code's shape: x-api-key and ?beta=true on the path, raw HTTP.
        request = urllib.request.Request(
            f"{gw.base_url}/v1/messages?beta=true",
            data=json.dumps(BODY).encode(),
            headers={
                "x-api-key": token,
                "anthropic-version": "2023-06-01",
                "anthropic-beta": "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
                "content-type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read())["some_future_field"] == {"kept": True}
    sdk_call, raw_call = up.attempts
    assert sdk_call["headers"]["anthropic-beta"] == "context-1m-2025-08-07"
    assert raw_call["query"] == "beta=true" and raw_call["headers"]["anthropic-version"] == "2023-06-01"
    assert raw_call["headers"]["anthropic-beta"].startswith("interleaved-thinking-2025-05-14,")
    for sent in up.attempts:
        assert sent_key(sent["headers"]) == KEY and token not in json.dumps(sent["headers"])
