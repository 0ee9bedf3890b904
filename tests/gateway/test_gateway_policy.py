"""What a lease may ask for (issue 8, item 7) and budgets reserved at admission (issue 10, item 2)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from harnessopt.config import BudgetConfig, Config, GatewayConfig, ModelConfig, OptimizerConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Usage
from tests.support.billed_upstream import BilledUpstream, concurrent_calls

try:
    import httpx
except ImportError:  # anthropic 2.x ships its HTTP client as httpx2
    import httpx2 as httpx  # type: ignore[no-redef]

TARGET = "claude-haiku-4-5"
OPTIMIZER = "claude-opus-4-1"
SCRIPT = {"rules": [{"last_user": "capital", "reply": "Paris"}], "default": "ok"}


def run_config(**model: Any) -> Config:
    return Config(
        model=ModelConfig(provider="scripted", target=TARGET, **model),
        optimizer=OptimizerConfig(model=OPTIMIZER),
    )


def post(gw: Gateway, token: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=gw.base_url) as http:
        return http.post("/v1/messages", json=body, headers={"x-api-key": token})


def body(model: str = TARGET, max_tokens: int = 16, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "capital?"}],
        **extra,
    }


def refusal(r: httpx.Response) -> str:
    assert r.status_code == 400 and r.headers["x-should-retry"] == "false", r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    return str(r.json()["error"]["message"])


def test_each_role_may_call_its_own_model_only():
    with Gateway.from_config(ScriptedModel.from_dict(SCRIPT), run_config()) as gw:
        target = gw.lease("target", 1, "t1").token
        optimizer = gw.lease("optimizer", 1).token
        assert post(gw, target, body(TARGET)).status_code == 200
        assert post(gw, target, body(TARGET + "-20251001")).status_code == 200  # a dated snapshot
        message = refusal(post(gw, target, body(OPTIMIZER)))
        assert message.startswith("model:") and repr(TARGET) in message and "model.target" in message
        assert "optimizer.model" in refusal(post(gw, optimizer, body(TARGET)))
        assert post(gw, optimizer, body(OPTIMIZER)).status_code == 200
        assert refusal(post(gw, target, body(TARGET + "-evil"))).startswith("model:")
        # The SDK sees a final 400 and does not retry it.
        client = anthropic.Anthropic(base_url=gw.base_url, api_key=target, max_retries=2)
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(
                model=OPTIMIZER, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        exchanges = gw.release(target)
        assert (
            len(exchanges) == 5 and exchanges[-1].response is None and "model:" in (exchanges[-1].error or "")
        )
        assert gw.usage()[("target", 1)].calls == 2  # refused calls reached no model


def test_max_tokens_is_capped_per_role():
    cfg = run_config()
    cfg.budget = BudgetConfig(target_max_output_tokens=8192, optimizer_max_output_tokens=32000)
    with Gateway.from_config(ScriptedModel.from_dict(SCRIPT), cfg) as gw:
        target = gw.lease("target", 1, "t1").token
        optimizer = gw.lease("optimizer", 1).token
        assert post(gw, target, body(max_tokens=8192)).status_code == 200
        message = refusal(post(gw, target, body(max_tokens=8193)))
        assert message.startswith("max_tokens:") and "budget.target_max_output_tokens" in message
        assert post(gw, optimizer, body(OPTIMIZER, 32000)).status_code == 200
        assert "budget.optimizer_max_output_tokens" in refusal(post(gw, optimizer, body(OPTIMIZER, 64000)))
        assert refusal(post(gw, target, {"model": TARGET, "messages": []})).startswith("max_tokens:")


SERVER_TOOLS = [
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    (
        {"tools": [{"name": "calc", "input_schema": {}}, {"type": "web_fetch_20250910", "name": "f"}]},
        "tools[1].type",
    ),
    ({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}, "tools[0].type"),
    ({"mcp_servers": [{"type": "url", "url": "https://example.invalid/mcp", "name": "x"}]}, "mcp_servers"),
]
URL_IMAGE = {"type": "image", "source": {"type": "url", "url": "https://example.invalid/?leak=answer"}}


@pytest.mark.parametrize(("extra", "field"), SERVER_TOOLS)
def test_server_tools_are_refused_naming_the_field(extra: dict[str, Any], field: str):
    with Gateway.from_config(ScriptedModel.from_dict(SCRIPT), run_config()) as gw:
        token = gw.lease("target", 1, "t1").token
        message = refusal(post(gw, token, body(**extra)))
        assert message.startswith(field + ":") and "model.allow_server_tools" in message
        assert gw.total().calls == 0


def test_client_tools_pass_and_url_sources_are_refused():
    tools = [
        {"name": "calc", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "c2", "input_schema": {"type": "object"}},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    with Gateway.from_config(ScriptedModel.from_dict(SCRIPT), run_config()) as gw:
        token = gw.lease("target", 1, "t1").token
        assert post(gw, token, body(tools=tools)).status_code == 200
        image = {"role": "user", "content": [{"type": "text", "text": "see"}, URL_IMAGE]}
        message = refusal(post(gw, token, {**body(), "messages": [image]}))
        assert message.startswith("messages[0].content[1].source.type:")
        nested = {"type": "tool_result", "tool_use_id": "t", "content": [URL_IMAGE]}
        message = refusal(post(gw, token, {**body(), "messages": [{"role": "user", "content": [nested]}]}))
        assert message.startswith("messages[0].content[0].content[0].source.type:")


def test_server_tools_pass_when_the_config_allows_them():
    with Gateway.from_config(ScriptedModel.from_dict(SCRIPT), run_config(allow_server_tools=True)) as gw:
        token = gw.lease("target", 1, "t1").token
        for extra, _field in SERVER_TOOLS:
            assert post(gw, token, body(**extra)).status_code == 200


@pytest.mark.parametrize(
    "budget", [BudgetConfig(max_cost=1.0), BudgetConfig(max_tokens=100_000)], ids=["cost", "tokens"]
)
def test_forty_concurrent_calls_never_exceed_the_budget(budget: BudgetConfig):
    # Billed its estimated input (chars / 4) and its full max_tokens.
    upstream = BilledUpstream(lambda r: math.ceil(sum(len(m["content"]) for m in r["messages"]) / 4))
    with Gateway(upstream, budget) as gw:
        outcomes = concurrent_calls(
            gw,
            40,
            model="claude-sonnet-4-6",
            max_tokens=4000,
            messages=[{"role": "user", "content": "x" * 8000}],
        )
        total, held = gw.total(), gw.held()
    assert len(outcomes) == 40 and outcomes.count("ok") == upstream.calls == total.calls
    assert total.calls >= 5  # the reservation is a bound, not a wall
    if budget.max_cost is not None:
        assert total.cost_usd <= budget.max_cost
    if budget.max_tokens is not None:
        assert total.input_tokens + total.output_tokens <= budget.max_tokens
    assert held == Usage()  # every reservation was settled
    assert gw.refusals == outcomes.count("refused") > 0 and "budget" in (gw.exhausted() or "")


def test_optimizer_leases_are_released_with_their_round():
    with Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig()) as gw:
        a, b = gw.lease("optimizer", 3).token, gw.lease("optimizer", 3).token
        later, task = gw.lease("optimizer", 4).token, gw.lease("target", 3, "t1").token
        assert post(gw, a, body()).status_code == 200
        assert gw.release_round("optimizer", 3) == 2
        assert post(gw, a, body()).status_code == 401 and post(gw, b, body()).status_code == 401
        assert post(gw, later, body()).status_code == 200 and post(gw, task, body()).status_code == 200
        assert gw.usage()[("optimizer", 3)].calls == 1  # what was spent stays counted
        assert gw.release_round("optimizer", 3) == 0


def test_gateway_settings_come_from_the_config():
    cfg = run_config()
    cfg.gateway = GatewayConfig(target_body_mb=1, max_calls_per_lease=3)
    gw = Gateway.from_config(ScriptedModel.from_dict(SCRIPT), cfg)
    assert gw.policy.of("target").max_body == 1024 * 1024 and gw.policy.max_calls_per_lease == 3
    assert gw.policy.of("optimizer").model == OPTIMIZER and gw.policy.of("target").model == TARGET


@pytest.mark.parametrize("limit", ["max_cost", "max_tokens"])
def test_the_budget_left_is_checked_against_the_largest_call_each_role_made(limit: str) -> None:
    """The loop starts no round whose first large call the gateway would refuse: ``cannot_hold``
    says when what is left would not hold one call as large as the largest of a role (its
    ``max_tokens`` plus its input bound, what the gateway reserves), by each limit; calls of other
    roles or smaller ones do not count."""
    upstream = BilledUpstream(lambda r: 10, delay_s=0)  # billed 10 input tokens and all its max_tokens
    request = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 4000,
        "messages": [{"role": "user", "content": "hi"}],
    }
    one = Gateway(upstream, BudgetConfig()).reservation("optimizer", request, b"x" * 200)
    room = {"max_cost": 1.5 * one.cost_usd, "max_tokens": int(1.5 * (one.input_tokens + one.output_tokens))}
    with Gateway(upstream, BudgetConfig(**{limit: room[limit]})) as gw:
        assert gw.cannot_hold() is None  # no call yet: nothing to go by
        small = gw.lease("target", 1, "t1")
        sdk = anthropic.Anthropic(base_url=small.base_url, api_key=small.token, max_retries=0)
        sdk.messages.create(**{**request, "max_tokens": 100})
        assert gw.cannot_hold() is None  # a small target call: the budget left holds another
        big = gw.lease("optimizer", 1)
        sdk = anthropic.Anthropic(base_url=big.base_url, api_key=big.token, max_retries=0)
        sdk.messages.create(**request)  # it fit: it was the first large one
        said = gw.cannot_hold()
        assert said is not None and said.startswith("one optimizer call as large as this run's largest")
        assert f"budget.{limit}" in said
        with pytest.raises(anthropic.RateLimitError):  # what the gateway would do to the next one
            sdk.messages.create(**request)


class _Terse(BilledUpstream):
    """Bills 10 input and 10 output tokens whatever it reserved: a call uses far less than its
    ``max_tokens``, as an optimizer's usually does."""

    def create(self, request: dict[str, Any], role: str, *, forward: Any = None) -> dict[str, Any]:
        out = super().create(request, role, forward=forward)
        out["usage"] = {"input_tokens": 10, "output_tokens": 10}
        return out


def _in_flight(gw: Gateway, role: str, request: dict[str, Any]) -> tuple[Any, list[str]]:
    """One call of ``role`` started in a thread and admitted (its reservation held); its outcome."""
    import threading
    import time

    said: list[str] = []
    lease = gw.lease(role, 1)
    sdk = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0)
    thread = threading.Thread(target=lambda: said.append(sdk.messages.create(**request).stop_reason or ""))
    thread.start()
    deadline = time.monotonic() + 10
    while gw.held().calls == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return thread, said


BIG = {"model": "claude-sonnet-4-6", "max_tokens": 8000, "messages": [{"role": "user", "content": "hi"}]}
SMALL = {**BIG, "max_tokens": 100}


@contextlib.contextmanager
def _big_call_in_flight() -> Iterator[tuple[Gateway, Any, list[str], anthropic.Anthropic]]:
    """A gateway whose budget holds one optimizer call of ``BIG`` and a little more, that call in
    flight (a second), and an SDK client of a target lease: (gateway, the call's thread, its
    outcome, the client)."""
    upstream = _Terse(lambda r: 10, delay_s=1.0)
    one = Gateway(upstream, BudgetConfig()).reservation("optimizer", BIG, b"x" * 200)
    with Gateway(upstream, BudgetConfig(max_tokens=one.input_tokens + one.output_tokens + 500)) as gw:
        thread, said = _in_flight(gw, "optimizer", BIG)
        small = gw.lease("target", 1, "t1")
        yield (
            gw,
            thread,
            said,
            anthropic.Anthropic(base_url=small.base_url, api_key=small.token, max_retries=0),
        )


def test_a_call_that_fits_but_for_one_in_flight_waits_for_its_room() -> None:
    """A target run's call was refused while the optimizer's call held most of the budget, though
    the optimizer's call used little of what it held: the run scored a crash, and the run ended
    as if the budget were spent with 91% of it left (QA). It waits for the room now."""
    with _big_call_in_flight() as (gw, thread, said, sdk):
        assert sdk.messages.create(**SMALL).stop_reason  # admitted once the big call gave its room back
        thread.join()
        assert said and gw.refusals == 0 and gw.exhausted() is None


def test_a_refusal_only_the_calls_in_flight_caused_does_not_spend_the_budget(monkeypatch: Any) -> None:
    """Refused after the wait: once the calls in flight end, ``exhausted`` asks again whether that
    call fits, and says what is left then (it said less remained than did: QA)."""
    import harnessopt.gateway.server as server

    monkeypatch.setattr(server, "ADMIT_WAIT_S", 0.0)
    with _big_call_in_flight() as (gw, thread, _said, sdk):
        with pytest.raises(anthropic.RateLimitError):
            sdk.messages.create(**SMALL)
        assert "budget" in (gw.exhausted() or "")  # while the big call holds its room
        thread.join()
        assert gw.refusals == 1 and gw.exhausted() is None  # it fits now: the budget is not spent


def test_cannot_hold_counts_the_rollout_before_the_call_and_its_growth() -> None:
    """Room for the largest call at round start alone let the round's rollout spend it, and the
    optimizer's first call was refused: the round failed and the run exited 3 (QA)."""
    upstream = BilledUpstream(lambda r: 10, delay_s=0)
    with Gateway(upstream, BudgetConfig()) as gw:
        lease = gw.lease("optimizer", 1)
        anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0).messages.create(
            **BIG
        )
        spent, largest = gw.total(), gw._largest["optimizer"]
        room = spent.input_tokens + spent.output_tokens + largest.input_tokens + largest.output_tokens
        gw.budget = BudgetConfig(max_tokens=room + 100)  # the next call as large fits, 100 to spare
        assert gw.cannot_hold() is None
        assert "budget.max_tokens" in (
            gw.cannot_hold(ahead=Usage(4, 400, 0, 0.0)) or ""
        )  # not after a rollout
        assert gw.cannot_hold(ahead=Usage(4, 50, 0, 0.0)) is None
        assert largest.input_tokens > 1000  # a quarter more input is more than the 100 spare
        assert gw.cannot_hold(growth=1.25) is not None  # nor a call whose input is a quarter larger
        assert gw.cannot_hold(growth=1.05) is None
