"""The gateway through the real anthropic SDK and raw HTTP: JSON, SSE, tools, auth, budget."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import anthropic
import pytest

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import AnthropicModel, ScriptedModel
from harnessopt.gateway.server import Gateway, price_of
from tests.support.fake_anthropic import FakeAnthropicServer

try:
    import httpx
except ImportError:  # anthropic 2.x ships its HTTP client as httpx2
    import httpx2 as httpx  # type: ignore[no-redef]

MODEL = "claude-haiku-4-5"
SCRIPT = {
    "lookup": [{"match": "capital of France", "value": "Paris"}],
    "rules": [
        {"last_user": "^RESULT (?P<n>\\d+)", "reply": "The answer is {n}."},
        {"last_user": "compute (?P<expr>.+)", "tool_use": [{"name": "calc", "input": {"e": "{expr}"}}]},
        {"last_user": "capital", "reply": "{lookup}"},
    ],
    "default": "I cannot answer that.",
}


@pytest.fixture
def gateway():
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig()) as gw:
        yield gw


def client_for(gw: Gateway, role: str = "target", round_no: int = 1) -> tuple[anthropic.Anthropic, str]:
    lease = gw.lease(role, round_no, "t1")
    return anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=2), lease.token


def ask(client: anthropic.Anthropic, text: str, **kw):
    return client.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": text}], **kw
    )


def test_json_reply_and_tool_use_round_trip(gateway):
    client, token = client_for(gateway)
    first = ask(client, "compute 6*7", tools=[{"name": "calc", "input_schema": {"type": "object"}}])
    assert first.stop_reason == "tool_use"
    call = first.content[0]
    assert call.type == "tool_use" and call.name == "calc" and call.input == {"e": "6*7"}
    assert call.id.startswith("toolu_")
    messages = [
        {"role": "user", "content": "compute 6*7"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "RESULT 42"}],
        },
    ]
    second = client.messages.create(model=MODEL, max_tokens=64, messages=messages)
    assert second.content[0].text == "The answer is 42." and second.stop_reason == "end_turn"
    exchanges = gateway.release(token)
    assert [e.response["content"][0]["type"] for e in exchanges] == ["tool_use", "text"]
    assert exchanges[1].request["messages"][2]["content"][0]["tool_use_id"] == call.id
    assert all(not e.streamed and e.error is None and e.wall_s >= 0 for e in exchanges)


def test_streaming_with_sdk_helpers(gateway):
    client, token = client_for(gateway)
    with client.messages.stream(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "capital of France?"}]
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Paris" and final.content[0].text == "Paris" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 2
    events = list(
        ask(client, "compute 1+1", stream=True, tools=[{"name": "calc", "input_schema": {"type": "object"}}])
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert deltas[0].type == "input_json_delta" and deltas[0].partial_json == '{"e": "1+1"}'
    exchanges = gateway.release(token)
    assert [e.streamed for e in exchanges] == [True, True]


def test_usage_per_role_and_round(gateway):
    target, _ = client_for(gateway, "target", 1)
    optimizer, _ = client_for(gateway, "optimizer", 1)
    later, _ = client_for(gateway, "target", 2)
    r1 = ask(target, "capital of France?")
    ask(target, "hello")
    ask(optimizer, "hello")
    ask(later, "hello")
    usage = gateway.usage()
    assert usage[("target", 1)].calls == 2 and usage[("optimizer", 1)].calls == 1
    assert usage[("target", 2)].calls == 1
    assert usage[("target", 1)].input_tokens >= r1.usage.input_tokens
    total = gateway.total()
    assert total.calls == 4
    assert total.output_tokens == sum(u.output_tokens for u in usage.values())
    assert total.cost_usd > 0  # haiku list price applied to the echoed model name


def test_budget_refusal_is_final_and_says_what_to_raise():
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(max_calls=2)) as gw:
        client, token = client_for(gw)
        ask(client, "hello")
        ask(client, "hello")
        with pytest.raises(anthropic.RateLimitError) as err:
            ask(client, "hello")
        assert "budget.max_calls" in str(err.value) and "2 of 2 model calls" in str(err.value)
        assert err.value.response.headers["x-should-retry"] == "false"
        exchanges = gw.release(token)
        assert len(exchanges) == 3 and exchanges[2].response is None  # the SDK did not retry
        assert gw.total().calls == 2 and "max_calls" in (gw.exhausted() or "")


def test_token_budget():
    body = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "capital of France? " * 4}],
    }
    raw = json.dumps(body).encode()
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(max_tokens=10**9)) as gw:
        need = gw.reservation("target", body, raw)
        # Room for one call's reservation: the second, the same, does not fit after the first's usage.
        gw.budget = BudgetConfig(max_tokens=need.input_tokens + need.output_tokens + 10)
        lease = gw.lease("target", 1, "t1")
        with httpx.Client(base_url=lease.base_url, headers={"x-api-key": lease.token}) as http:
            first = http.post("/v1/messages", content=raw)
            assert first.status_code == 200
            second = http.post("/v1/messages", content=raw)
        assert second.status_code == 429 and second.headers["x-should-retry"] == "false"
        assert "budget.max_tokens" in second.json()["error"]["message"]
        assert gw.total().calls == 1 and "budget.max_tokens" in (gw.exhausted() or "")


def test_concurrent_calls_never_exceed_max_calls():
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(max_calls=5)) as gw:
        outcomes: list[str] = []

        def worker() -> None:
            client, _ = client_for(gw)
            try:
                ask(client, "hello")
                outcomes.append("ok")
            except anthropic.RateLimitError:
                outcomes.append("refused")

        threads = [threading.Thread(target=worker) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("ok") == 5 and outcomes.count("refused") == 7
        assert gw.total().calls == 5


def test_unknown_and_released_tokens_get_401(gateway):
    bad = anthropic.Anthropic(base_url=gateway.base_url, api_key="not-a-lease", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        ask(bad, "hello")
    client, token = client_for(gateway)
    ask(client, "hello")
    assert len(gateway.release(token)) == 1
    with pytest.raises(anthropic.AuthenticationError):
        ask(client, "hello")
    assert gateway.release(token) == []


def test_bearer_token_and_count_tokens(gateway):
    lease = gateway.lease("target", 0, None)
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "x" * 40}]}
    with httpx.Client(base_url=lease.base_url) as http:
        r = http.post("/v1/messages", json=body, headers={"authorization": f"Bearer {lease.token}"})
        assert r.status_code == 200 and r.json()["content"][0]["text"] == "I cannot answer that."
        r = http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": lease.token})
        assert r.json() == {"input_tokens": 10}
        r = http.post("/v1/nope", json=body, headers={"x-api-key": lease.token})
        assert r.status_code == 404 and r.json()["type"] == "error"
        r = http.post("/v1/messages", content=b"{not json", headers={"x-api-key": lease.token})
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_unix_socket_access(tmp_path: Path):
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=tmp_path) as gw:
        lease = gw.lease("target", 1, "t1")
        assert lease.socket_path is not None and lease.socket_path.parent == tmp_path  # its own socket
        # Only the run's group may pass the dir and connect (task containers get that group), to
        # a socket whose name it was told: the dir cannot be listed.
        assert stat.S_IMODE(os.stat(lease.socket_path).st_mode) == 0o660
        assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o710
        assert os.stat(lease.socket_path).st_gid == os.stat(tmp_path).st_gid == gw.socket_gid
        transport = httpx.HTTPTransport(uds=str(lease.socket_path))
        with httpx.Client(transport=transport, base_url="http://gateway") as http:
            body = {
                "model": MODEL,
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "capital of France"}],
            }
            r = http.post("/v1/messages", json=body, headers={"x-api-key": lease.token})
        assert r.status_code == 200 and r.json()["content"][0]["text"] == "Paris"
        assert len(gw.release(lease.token)) == 1
    assert not (tmp_path / "gateway.sock").exists()


def test_forwarding_to_upstream_keeps_the_real_key_on_the_host():
    upstream_reply = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "from upstream"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 1000},
    }
    with FakeAnthropicServer(lambda req: upstream_reply) as fake:
        model = AnthropicModel("sk-real-secret", fake.base_url)
        with Gateway(model, BudgetConfig()) as gw:
            client, token = client_for(gw)
            with client.messages.stream(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                assert s.get_final_message().content[0].text == "from upstream"
            exchanges = gw.release(token)
    sent = fake.requests[0]["headers"]  # the SDK sends the key as x-api-key or Authorization: Bearer
    assert "sk-real-secret" in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert "stream" not in fake.requests[0]["body"]  # upstream is always called non-streaming
    assert exchanges[0].input_tokens == 2000 and exchanges[0].output_tokens == 100
    # sonnet: $3/Mtok in, $15/Mtok out, cache reads at 0.1x input
    assert gw.total().cost_usd == pytest.approx((1000 * 3 + 1000 * 0.3 + 100 * 15) / 1e6)
    assert "sk-real-secret" not in repr(model) and "sk-real-secret" not in str(exchanges[0])


def test_price_table():
    assert price_of("claude-opus-4-1-20250805") == (15.0, 75.0)
    assert price_of("claude-opus-4-5") == (5.0, 25.0)
    assert price_of("claude-3-5-haiku-latest") == (0.8, 4.0)
    assert price_of("claude-haiku-4-5") == (1.0, 5.0)
    assert price_of("scripted") is None


def test_unknown_model_costs_zero_with_a_note(gateway):
    client, _ = client_for(gateway)
    client.messages.create(model="my-local-model", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert gateway.total().cost_usd == 0.0
    assert any("my-local-model" in n for n in gateway.notes)


def test_a_refused_call_at_the_per_call_cap_names_the_cap_to_lower():
    """Codex names no max_output_tokens, so its calls reserve the optimizer's per-call cap: the
    refusal said "ask for a smaller max_tokens", which it cannot (QA). A call at the cap is told
    which setting sets it; one below the cap is not."""
    cap = BudgetConfig().target_max_output_tokens
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(max_tokens=cap // 2)) as gw:
        lease = gw.lease("target", 1, "t1")
        with httpx.Client(base_url=lease.base_url, headers={"x-api-key": lease.token}) as http:
            said = []
            for max_tokens in (cap, cap // 2):
                body = {
                    "model": MODEL,
                    "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                r = http.post("/v1/messages", json=body)
                assert r.status_code == 429
                said.append(r.json()["error"]["message"])
    assert f"its max_tokens is budget.target_max_output_tokens ({cap})" in said[0]
    assert "lower that setting" in said[0] and "target_max_output_tokens" not in said[1]
