"""The Responses API on the gateway, with the official openai SDK's ``responses.create`` as the client.

A Responses harness against each upstream kind (Anthropic Messages, OpenAI Chat Completions, an
upstream serving the Responses API itself, which the fake checks as strictly as the real API):
a tool-call round trip, streamed and not, checked on the SDK's side, on what the upstream
received and on what the gateway recorded and counted. Then the event sequence of a stream,
stop reasons, reasoning, budget refusals and the stateful features the gateway refuses.
"""

from __future__ import annotations

import http.client
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
from tests.support.fake_openai import (
    FakeOpenAIServer,
    check_responses_request,
    completion,
    function_call,
    response,
)

MODEL = "test-model"
SCHEMA = {"type": "object", "properties": {"e": {"type": "string"}}, "required": ["e"]}
TOOLS: list[Any] = [{"type": "function", "name": "calc", "description": "Evaluate.", "parameters": SCHEMA}]
FIRST = {"model": MODEL, "instructions": "Be brief.", "input": "compute 6*7", "tools": TOOLS}
FIRST |= {"max_output_tokens": 100}

CANONICAL_1 = {
    "model": MODEL,
    "max_tokens": 100,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "compute 6*7"}],
    "tools": [{"name": "calc", "description": "Evaluate.", "input_schema": SCHEMA}],
}


def second_input(call_id: str) -> list[Any]:
    return [
        {"role": "user", "content": "compute 6*7"},
        {"type": "function_call", "call_id": call_id, "name": "calc", "arguments": '{"e": "6*7"}'},
        {"type": "function_call_output", "call_id": call_id, "output": "42"},
    ]


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
        "tools": CANONICAL_1["tools"],
    }


# --------------------------------------------------------------------------- upstreams


def _first_turn(last: Any) -> bool:
    return "6*7" in json.dumps(last) and "42" not in json.dumps(last)


def anthropic_upstream(request: dict[str, Any]) -> dict[str, Any]:
    if _first_turn(request["body"]["messages"]):
        content: list[Any] = [{"type": "tool_use", "id": "toolu_up1", "name": "calc", "input": {"e": "6*7"}}]
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


def chat_upstream(request: dict[str, Any]) -> dict[str, Any]:
    if _first_turn(request["body"]["messages"]):
        return completion(
            None, [function_call("call_up1", "calc", '{"e": "6*7"}')], "tool_calls", model=MODEL
        )
    return completion("The answer is 42.", model=MODEL)


def responses_upstream(request: dict[str, Any]) -> dict[str, Any]:
    assert request["path"] == "/v1/responses"
    if _first_turn(request["body"]["input"]):
        return response(None, [("call_up1", "calc", '{"e": "6*7"}')], model=MODEL)
    return response("The answer is 42.", model=MODEL)


KINDS = {"anthropic": anthropic_upstream, "chat": chat_upstream, "responses": responses_upstream}
CALL_IDS = {"anthropic": "toolu_up1", "chat": "call_up1", "responses": "call_up1"}


class Upstream:
    def __init__(self, kind: str, fn: Any = None):
        self.kind = kind
        fn = fn or KINDS[kind]
        self.fake: Any = FakeAnthropicServer(fn) if kind == "anthropic" else FakeOpenAIServer(fn)

    def __enter__(self) -> Upstream:
        self.fake.__enter__()
        if self.kind == "anthropic":
            self.model: Any = AnthropicModel("sk-upstream-key", self.fake.base_url, max_retries=0)
        else:
            self.model = OpenAIModel("sk-upstream-key", self.fake.base_url, max_retries=0, wire_api=self.kind)
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.__exit__(*exc)


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Gateway, Upstream, openai.OpenAI, str]]:
    kind, budget = request.param if isinstance(request.param, tuple) else (request.param, BudgetConfig())
    with Upstream(kind) as up, Gateway(up.model, budget) as gw:
        lease = gw.lease("target", 1, "t1")
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=2)
        yield gw, up, client, lease.token


def _create(client: openai.OpenAI, stream: bool, **kw: Any) -> Any:
    if stream:
        with client.responses.stream(**kw) as s:
            return s.get_final_response()
    return client.responses.create(**kw)


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("served", list(KINDS), indirect=True)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_function_call_round_trip(served: tuple[Gateway, Upstream, openai.OpenAI, str], stream: bool) -> None:
    gw, up, client, token = served
    first = _create(client, stream, **FIRST)
    call = first.output[0]
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "calc", {"e": "6*7"})
    assert call.call_id == CALL_IDS[up.kind] and first.status == "completed"
    second = _create(
        client, stream, model=MODEL, input=second_input(call.call_id), tools=TOOLS, max_output_tokens=100
    )
    assert second.output_text == "The answer is 42." and second.status == "completed"
    assert second.incomplete_details is None
    assert (second.usage.input_tokens, second.usage.output_tokens, second.usage.total_tokens) == (11, 7, 18)

    exchanges = gw.release(token)
    assert [e.request for e in exchanges] == [CANONICAL_1, canonical_2(call.call_id)]
    assert [e.streamed for e in exchanges] == [stream, stream]
    usage = gw.usage()[("target", 1)]
    assert (usage.calls, usage.input_tokens, usage.output_tokens) == (2, 22, 14)
    assert [r["stream"] for r in up.fake.requests] == [False, False]
    if up.kind == "responses":  # what a Responses upstream received, literally
        sent = up.fake.requests[1]["body"]
        assert sent["input"] == [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "compute 6*7"}]},
            {"type": "function_call", "call_id": "call_up1", "name": "calc", "arguments": '{"e": "6*7"}'},
            {"type": "function_call_output", "call_id": "call_up1", "output": "42"},
        ]
        assert sent["store"] is False and sent["max_output_tokens"] == 100


def test_without_max_output_tokens_the_role_cap_applies() -> None:
    """Codex sends no max_output_tokens: the call may use (and reserves) the role's cap."""
    budget = BudgetConfig(target_max_output_tokens=321)
    with Upstream("anthropic") as up, Gateway(up.model, budget) as gw:
        lease = gw.lease("target", 1)
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
        client.responses.create(model=MODEL, input="hi")
        assert up.fake.requests[0]["body"]["max_tokens"] == 321


# --------------------------------------------------------------------------- the stream itself


def _raw_events(base_url: str, token: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    conn = http.client.HTTPConnection(base_url.removeprefix("http://"), timeout=30)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    conn.request("POST", "/v1/responses", json.dumps({**body, "stream": True}), headers)
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("content-type", "").startswith("text/event-stream")
    text = r.read().decode()
    conn.close()
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]  # the event name and the payload's type agree
        events.append((lines["event"], data))
    return events


def check_event_order(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The order the real API keeps; returns the final response."""
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] in ("response.completed", "response.incomplete") and names.count(names[-1]) == 1
    final = events[-1][1]["response"]
    open_item: int | None = None
    done_items: list[Any] = []
    for name, data in events[2:-1]:
        if name == "response.output_item.added":
            assert open_item is None and data["output_index"] == len(done_items)
            open_item = data["output_index"]
        elif name == "response.output_item.done":
            assert data["output_index"] == open_item
            done_items.append(data["item"])
            open_item = None
        else:  # every delta, part and done event belongs to the item that is open
            assert data["output_index"] == open_item and data["item_id"] == final["output"][open_item]["id"]
    assert open_item is None and done_items == final["output"]
    return final


@pytest.mark.parametrize("served", ["anthropic"], indirect=True)
def test_stream_event_sequence(served: tuple[Gateway, Upstream, openai.OpenAI, str]) -> None:
    gw, up, client, token = served
    events = _raw_events(gw.base_url, token, FIRST)
    final = check_event_order(events)
    assert [n for n, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final["status"] == "completed" and final["usage"]["total_tokens"] == 18
    text_events = _raw_events(gw.base_url, token, {**FIRST, "input": second_input("toolu_up1")})
    check_event_order(text_events)
    assert [n for n, _ in text_events][2:-1] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]


def test_truncation_is_incomplete_with_its_reason() -> None:
    def cut(request: dict[str, Any]) -> dict[str, Any]:
        return {**anthropic_upstream({"body": {"messages": ["42"]}}), "stop_reason": "max_tokens"}

    with Upstream("anthropic", cut) as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1)
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
        done = client.responses.create(model=MODEL, input="hi", max_output_tokens=5)
        assert done.status == "incomplete" and done.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
        events = _raw_events(
            gw.base_url, lease.token, {"model": MODEL, "input": "hi", "max_output_tokens": 5}
        )
        assert events[-1][0] == "response.incomplete" and check_event_order(events)["status"] == "incomplete"


def test_reasoning_effort_is_thinking_and_comes_back_replayable() -> None:
    thinking = {"type": "thinking", "thinking": "6*7 is 42", "signature": "sig-abc"}

    def think(request: dict[str, Any]) -> dict[str, Any]:
        reply = anthropic_upstream({"body": {"messages": ["42"]}})
        return {**reply, "content": [thinking, *reply["content"]]}

    with Upstream("anthropic", think) as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1)
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
        done = client.responses.create(
            model=MODEL, input="hi", max_output_tokens=8000, reasoning={"effort": "medium"}
        )
        assert up.fake.requests[0]["body"]["thinking"] == {"type": "enabled", "budget_tokens": 4096}
        reasoning = done.output[0]
        assert reasoning.type == "reasoning" and reasoning.summary[0].text == "6*7 is 42"
        again = [
            {"role": "user", "content": "hi"},
            reasoning.model_dump(exclude_none=True),
            {"role": "assistant", "content": done.output_text},
            {"role": "user", "content": "more"},
        ]
        client.responses.create(model=MODEL, input=again, max_output_tokens=8000)
        replayed = up.fake.requests[1]["body"]["messages"][1]["content"]
        assert replayed[0] == thinking  # the block exactly, signature included


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("served", [("chat", BudgetConfig(max_calls=1))], indirect=True)
def test_budget_refusal_in_the_responses_format(served: tuple[Gateway, Upstream, openai.OpenAI, str]) -> None:
    gw, up, client, _ = served
    client.responses.create(model=MODEL, input="hi", max_output_tokens=10)
    with pytest.raises(openai.RateLimitError) as err:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=10, stream=True)
    assert err.value.response.headers["x-should-retry"] == "false"
    body = err.value.response.json()["error"]
    assert body["type"] == "insufficient_quota" and body["code"] == "insufficient_quota"
    assert "budget.max_calls" in body["message"]
    assert len(up.fake.requests) == 1 and gw.total().calls == 1 and gw.refusals == 1


@pytest.mark.parametrize(
    "extra,field",
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"background": True}, "background"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools[0].type"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"text": {"format": {"type": "json_object"}}}, "text"),
        ({"reasoning": {"effort": "turbo"}}, "reasoning.effort"),
    ],
)
def test_what_the_gateway_cannot_honour_is_a_400_naming_the_field(extra: dict[str, Any], field: str) -> None:
    with Upstream("anthropic") as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1)
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=2)
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(**{"model": MODEL, "input": "hi", "max_output_tokens": 10, **extra})
        body = err.value.response.json()["error"]
        assert body["message"].startswith(f"{field}: ") and body["param"] == field
        assert up.fake.requests == [] and gw.total().calls == 0
        assert gw.release(lease.token)[0].error is not None  # recorded in the transcript


def test_bad_token_gets_an_openai_error() -> None:
    with Upstream("anthropic") as up, Gateway(up.model, BudgetConfig()) as gw:
        client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key="ho-not-a-lease", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            client.responses.create(model=MODEL, input="hi")
        assert err.value.response.json()["error"]["code"] == "invalid_api_key"
        assert up.fake.requests == []


# --------------------------------------------------------------------------- the strict fake


def test_the_fake_refuses_what_the_real_api_refuses() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "calc", "arguments": "{}"}
    cases = [
        ({"model": MODEL, "input": "hi", "bogus": 1}, "bogus"),
        ({"model": MODEL, "input": [call]}, "No tool output found"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}, "c9"),
        ({"model": MODEL, "input": [call, {"role": "user", "content": "go on"}]}, "No tool output found"),
        (
            {
                "model": MODEL,
                "input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}],
            },
            "input[0].content[0].type",
        ),
    ]
    for body, said in cases:
        with pytest.raises(ModelError) as err:
            check_responses_request(body)
        assert said in err.value.message and err.value.status == 400


def test_messages_harness_to_a_responses_upstream() -> None:
    """The Messages API on a Responses upstream: the tool-call pairing passes the strict fake."""
    with Upstream("responses") as up, Gateway(up.model, BudgetConfig()) as gw:
        lease = gw.lease("target", 1)
        client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0)
        tools: Any = CANONICAL_1["tools"]
        first = client.messages.create(
            model=MODEL,
            max_tokens=100,
            system="Be brief.",
            tools=tools,
            messages=[{"role": "user", "content": "compute 6*7"}],
        )
        block = first.content[0]
        assert block.type == "tool_use" and first.stop_reason == "tool_use"
        turns: Any = canonical_2(block.id)["messages"]
        second = client.messages.create(model=MODEL, max_tokens=100, tools=tools, messages=turns)
        assert second.content[0].text == "The answer is 42."  # type: ignore[union-attr]
        assert up.fake.requests[0]["body"]["instructions"] == "Be brief."
        with pytest.raises(anthropic.BadRequestError) as err:
            client.messages.create(
                model=MODEL,
                max_tokens=10,
                stop_sequences=["END"],
                messages=[{"role": "user", "content": "hi"}],
            )
        assert err.value.response.json()["error"]["message"].startswith("stop_sequences: ")
        assert len(up.fake.requests) == 2
