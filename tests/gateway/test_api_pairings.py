"""Every harness API x upstream pairing through the gateway, with the real SDKs as clients.

Messages->Anthropic, Messages->OpenAI, Chat->OpenAI and Chat->Anthropic: a tool-use round trip
(streamed and not), checked on three sides: what the harness's SDK parsed, what the fake
upstream received (field by field, literally), and what the gateway recorded and counted
(one canonical form, whatever the pairing). Then errors and budget refusals in the harness's
own API format.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import AnthropicModel, OpenAIModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import ModelError
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_openai import FakeOpenAIServer, completion, function_call

MODEL = "test-model"
SCHEMA = {"type": "object", "properties": {"e": {"type": "string"}}, "required": ["e"]}

# The canonical (Messages API) bodies of the two turns, whichever API the harness spoke.
CANONICAL_1 = {
    "model": MODEL,
    "max_tokens": 100,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "compute 6*7"}],
    "stop_sequences": ["END"],
    "tools": [{"name": "calc", "description": "Evaluate.", "input_schema": SCHEMA}],
    "tool_choice": {"type": "auto"},
}


def canonical_2(call_id: str) -> dict[str, Any]:
    call = {"type": "tool_use", "id": call_id, "name": "calc", "input": {"e": "6*7"}}
    result = {"type": "tool_result", "tool_use_id": call_id, "content": "42"}
    return {
        "model": MODEL,
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "compute 6*7"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ],
    }


# What an OpenAI-compatible upstream must receive for those two turns.
CHAT_1 = {
    "model": MODEL,
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "compute 6*7"}],
    "max_tokens": 100,
    "stop": ["END"],
    "tools": [
        {"type": "function", "function": {"name": "calc", "description": "Evaluate.", "parameters": SCHEMA}}
    ],
    "tool_choice": "auto",
}


def chat_2(call_id: str) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": "compute 6*7"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [function_call(call_id, "calc", '{"e": "6*7"}')],
            },
            {"role": "tool", "tool_call_id": call_id, "content": "42"},
        ],
        "max_tokens": 100,
    }


# --------------------------------------------------------------------------- upstreams


def anthropic_upstream(request: dict[str, Any]) -> dict[str, Any]:
    body = request["body"]
    if body["messages"][-1]["content"] == "compute 6*7":
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": "toolu_up1", "name": "calc", "input": {"e": "6*7"}}
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": "The answer is 42."}], "end_turn"
    return {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


def openai_upstream(request: dict[str, Any]) -> dict[str, Any]:
    if request["body"]["messages"][-1]["content"] == "compute 6*7":
        return completion(
            None, [function_call("call_up1", "calc", '{"e": "6*7"}')], "tool_calls", model=MODEL
        )
    return completion("The answer is 42.", model=MODEL)


class Upstream:
    """A fake upstream of one kind and the model object the gateway forwards to it with."""

    def __init__(self, kind: str, fn: Any = None):
        self.kind = kind
        if kind == "anthropic":
            self.fake: Any = FakeAnthropicServer(fn or anthropic_upstream)
        else:
            self.fake = FakeOpenAIServer(fn or openai_upstream)

    def __enter__(self) -> Upstream:
        self.fake.__enter__()
        if self.kind == "anthropic":
            self.model: Any = AnthropicModel("sk-upstream-key", self.fake.base_url, max_retries=0)
        else:
            self.model = OpenAIModel("sk-upstream-key", self.fake.base_url, max_retries=0)
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.__exit__(*exc)

    @property
    def call_id(self) -> str:
        return "toolu_up1" if self.kind == "anthropic" else "call_up1"

    def expected(self, turn: int) -> dict[str, Any]:
        if self.kind == "anthropic":
            return CANONICAL_1 if turn == 1 else canonical_2(self.call_id)
        return CHAT_1 if turn == 1 else chat_2(self.call_id)


# --------------------------------------------------------------------------- harnesses


class MessagesHarness:
    def __init__(self, base_url: str, token: str):
        self.client = anthropic.Anthropic(base_url=base_url, api_key=token, max_retries=2)

    def first(self, stream: bool) -> tuple[str, str, dict[str, Any], str]:
        """(call id, tool name, tool input, stop reason)"""
        kw: dict[str, Any] = dict(CANONICAL_1)
        if stream:
            with self.client.messages.stream(**kw) as s:
                msg = s.get_final_message()
        else:
            msg = self.client.messages.create(**kw)
        block = msg.content[0]
        assert block.type == "tool_use"
        return block.id, block.name, dict(block.input), str(msg.stop_reason)  # type: ignore[arg-type]

    def second(self, call_id: str, stream: bool) -> tuple[str, str, int, int]:
        """(text, stop reason, input tokens, output tokens)"""
        kw = canonical_2(call_id)
        if stream:
            with self.client.messages.stream(**kw) as s:
                text = "".join(s.text_stream)
                msg = s.get_final_message()
        else:
            msg = self.client.messages.create(**kw)
            text = msg.content[0].text  # type: ignore[union-attr]
        return text, str(msg.stop_reason), msg.usage.input_tokens, msg.usage.output_tokens

    def plain(self, **extra: Any) -> Any:
        return self.client.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}], extra_body=extra or None
        )


class ChatHarness:
    def __init__(self, base_url: str, token: str):
        self.client = openai.OpenAI(base_url=base_url + "/v1", api_key=token, max_retries=2)

    def first(self, stream: bool) -> tuple[str, str, dict[str, Any], str]:
        kw = dict(CHAT_1)
        if stream:
            with self.client.chat.completions.stream(**kw) as s:  # type: ignore[arg-type]
                done = s.get_final_completion()
        else:
            done = self.client.chat.completions.create(**kw)  # type: ignore[call-overload]
        call = done.choices[0].message.tool_calls[0]
        return (
            call.id,
            call.function.name,
            json.loads(call.function.arguments),
            str(done.choices[0].finish_reason),
        )

    def second(self, call_id: str, stream: bool) -> tuple[str, str, int, int]:
        kw = chat_2(call_id)
        if stream:
            chunks = list(
                self.client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = next(
                c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
            )
            usage = chunks[-1].usage
        else:
            done = self.client.chat.completions.create(**kw)
            text, finish, usage = (
                done.choices[0].message.content or "",
                done.choices[0].finish_reason,
                done.usage,
            )
        assert usage is not None
        return text, str(finish), usage.prompt_tokens, usage.completion_tokens

    def plain(self, **extra: Any) -> Any:
        return self.client.chat.completions.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi"}], **extra
        )


HARNESSES = {"messages": MessagesHarness, "chat": ChatHarness}
PAIRINGS = [("messages", "anthropic"), ("messages", "openai"), ("chat", "openai"), ("chat", "anthropic")]
STOP_1 = {"messages": "tool_use", "chat": "tool_calls"}
STOP_2 = {"messages": "end_turn", "chat": "stop"}


def ids(p: tuple[str, str]) -> str:
    return f"{p[0]}->{p[1]}"


@pytest.fixture
def pairing(request: pytest.FixtureRequest) -> Iterator[tuple[Gateway, Upstream, Any, str]]:
    api, kind = request.param
    with Upstream(kind) as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        yield gw, up, HARNESSES[api](lease.base_url, lease.token), lease.token


@pytest.mark.parametrize("pairing", PAIRINGS, ids=ids, indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_tool_use_round_trip(pairing: tuple[Gateway, Upstream, Any, str], stream: bool) -> None:
    gw, up, harness, token = pairing
    api = "messages" if isinstance(harness, MessagesHarness) else "chat"
    call_id, name, args, stop = harness.first(stream)
    assert (call_id, name, args, stop) == (up.call_id, "calc", {"e": "6*7"}, STOP_1[api])
    text, stop, tokens_in, tokens_out = harness.second(call_id, stream)
    assert (text, stop, tokens_in, tokens_out) == ("The answer is 42.", STOP_2[api], 11, 7)

    sent = [r["body"] for r in up.fake.requests]
    assert sent == [up.expected(1), up.expected(2)]  # field by field
    assert [r["stream"] for r in up.fake.requests] == [False, False]  # upstream is never streamed
    assert all(
        r["headers"].get("authorization", r["headers"].get("x-api-key", "")).endswith("sk-upstream-key")
        for r in up.fake.requests
    )

    exchanges = gw.release(token)
    assert [e.request for e in exchanges] == [CANONICAL_1, canonical_2(up.call_id)]
    assert [e.streamed for e in exchanges] == [stream, stream]
    assert [b["type"] for b in exchanges[0].response["content"]] == ["tool_use"]  # type: ignore[index]
    assert [(e.input_tokens, e.output_tokens) for e in exchanges] == [(11, 7), (11, 7)]
    usage = gw.usage()[("target", 1)]
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (2, 22, 14)


def _failing(kind: str) -> Any:
    def fn(request: dict[str, Any]) -> dict[str, Any]:
        raise ModelError(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum")

    return fn


@pytest.mark.parametrize("api,kind", PAIRINGS, ids=[ids(p) for p in PAIRINGS])
def test_upstream_error_reaches_the_harness_in_its_own_format(api: str, kind: str) -> None:
    with Upstream(kind, _failing(kind)) as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        harness = HARNESSES[api](lease.base_url, lease.token)
        error = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
        with pytest.raises(error) as err:
            harness.plain()
        assert "prompt is too long" in str(err.value)
        assert err.value.response.headers["x-should-retry"] == "false"
        body = err.value.response.json()
        if api == "messages":
            assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        else:
            assert body["error"]["type"] == "invalid_request_error" and "message" in body["error"]
        assert len(up.fake.requests) == 1  # nobody retried a 400
        assert gw.release(lease.token)[0].error is not None


@pytest.mark.parametrize("api,kind", PAIRINGS, ids=[ids(p) for p in PAIRINGS])
def test_budget_refusal_in_the_harness_format(api: str, kind: str) -> None:
    with Upstream(kind) as up, Gateway(up.model, BudgetConfig(max_calls=1)) as gw:
        lease = gw.lease("target", 1, "t1")
        harness = HARNESSES[api](lease.base_url, lease.token)
        harness.plain()
        error = anthropic.RateLimitError if api == "messages" else openai.RateLimitError
        with pytest.raises(error) as err:
            harness.plain()
        assert err.value.response.status_code == 429
        assert err.value.response.headers["x-should-retry"] == "false"
        body = err.value.response.json()
        if api == "messages":
            assert body["error"]["type"] == "rate_limit_error"
        else:
            assert (
                body["error"]["type"] == "insufficient_quota"
                and body["error"]["code"] == "insufficient_quota"
            )
        assert "budget.max_calls" in str(err.value)
        assert len(up.fake.requests) == 1 and gw.total().calls == 1  # the SDK did not retry


@pytest.mark.parametrize(
    "api,kind,extra,field",
    [
        ("chat", "anthropic", {"seed": 7}, "seed"),
        ("chat", "openai", {"response_format": {"type": "json_object"}}, "response_format"),
        ("chat", "openai", {"n": 2}, "n"),
        ("messages", "openai", {"top_k": 5}, "top_k"),
        ("messages", "openai", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ],
)
def test_unsupported_feature_is_a_400_naming_the_field(
    api: str, kind: str, extra: dict[str, Any], field: str
) -> None:
    with Upstream(kind) as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        harness = HARNESSES[api](lease.base_url, lease.token)
        error = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
        with pytest.raises(error) as err:
            harness.plain(**extra)
        body = err.value.response.json()
        message = body["error"]["message"]
        assert message.startswith(f"{field}: ")
        if api == "chat":
            assert body["error"]["param"] == field
        assert up.fake.requests == []  # nothing reached upstream
        assert gw.total().calls == 0


def test_chat_harness_bad_token_gets_a_chat_error() -> None:
    with Upstream("openai") as up, Gateway(up.model, BudgetConfig()) as gw:
        harness = ChatHarness(gw.base_url, "ho-not-a-lease")
        with pytest.raises(openai.AuthenticationError) as err:
            harness.plain()
        assert err.value.response.json()["error"]["code"] == "invalid_api_key"
        assert up.fake.requests == []


def test_each_role_has_its_own_upstream() -> None:
    """The optimizer's calls go to its upstream, the target's to theirs; counted per role."""
    with (
        Upstream("openai") as target,
        Upstream("anthropic") as optimizer,
        Gateway(target.model, BudgetConfig(), models={"optimizer": optimizer.model}) as gw,
    ):
        t = gw.lease("target", 1, "t1")
        o = gw.lease("optimizer", 1, None)
        ChatHarness(t.base_url, t.token).plain()
        MessagesHarness(o.base_url, o.token).plain()
        ChatHarness(o.base_url, o.token).plain()
        assert len(target.fake.requests) == 1 and len(optimizer.fake.requests) == 2
        usage = gw.usage()
        assert usage[("target", 1)].calls == 1 and usage[("optimizer", 1)].calls == 2
