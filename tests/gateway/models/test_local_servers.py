"""Local OpenAI-compatible servers as they really behave (issue 23.5), with fakes of llama.cpp, vLLM, Ollama.

A server that sends no usage is counted by the chars/4 estimate and every place that shows the
counts says so (gateway notes, the manifest's role usage, the log, the trajectory); an answer cut
at max_tokens (``finish_reason: "length"``) is recorded and surfaced; a model the server does not
list fails the pre-run check; a server that ignores ``tools`` fails it for the tool-agent
template with what to configure.
"""

from __future__ import annotations

import http.server
import socketserver
import threading
from typing import Any

import openai
import pytest

from harnessopt.config import BudgetConfig, ModelConfig
from harnessopt.errors import UserError
from harnessopt.gateway.models import OpenAIModel, model_for
from harnessopt.gateway.server import Gateway
from harnessopt.ledger.store import RoleUsage, RoundManifest
from harnessopt.reporting.progress import round_lines
from harnessopt.rollout.trajectory import render
from harnessopt.util.text import parse_front_matter
from tests.support.local_servers import MODELS, LocalServer
from tests.support.results import make_result


def _one_call(kind: str, max_tokens: int = 50) -> tuple[Any, Gateway, LocalServer]:
    with LocalServer(kind) as server, Gateway(OpenAIModel("none", server.base_url), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
        model = MODELS[kind][0] if MODELS[kind] else "any"
        done = client.chat.completions.create(
            model=model, max_tokens=max_tokens, messages=[{"role": "user", "content": "Capital of France?"}]
        )
        (exchange,) = gw.release(lease.token)
    return done, gw, exchange


def test_a_server_without_usage_is_estimated_and_says_so_everywhere() -> None:
    done, gw, exchange = _one_call("ollama")
    assert done.choices[0].message.content == "Paris"
    assert exchange.estimated and exchange.input_tokens > 0
    usage = gw.usage()[("target", 1)]
    assert usage.estimated_calls == 1 and usage.calls == 1
    assert any("reported no token usage" in n and "estimates" in n for n in gw.notes)
    text = render(make_result(exchanges=[exchange]), harness_commit="abc1234", target_model="qwen2.5:0.5b")
    assert parse_front_matter(text)["tokens_estimated"] is True
    assert f"- input_tokens: {exchange.input_tokens} (estimated)" in text
    manifest = RoundManifest(
        round=1,
        status="rejected",
        tokens={"target": RoleUsage(calls=1, input=9, output=1, estimated_calls=1)},
    )
    assert "(~ estimated for 1 calls)" in round_lines(manifest)[0]


def test_a_server_with_usage_is_not_labelled() -> None:
    _, gw, exchange = _one_call("vllm")
    assert not exchange.estimated and (exchange.input_tokens, exchange.output_tokens) == (40, 3)
    assert gw.usage()[("target", 1)].estimated_calls == 0
    assert not any("estimate" in n for n in gw.notes)
    text = render(make_result(exchanges=[exchange]), harness_commit="abc1234", target_model="qwen2.5-7b")
    assert parse_front_matter(text)["tokens_estimated"] is False and "(estimated)" not in text


def test_finish_reason_length_is_recorded_as_truncation() -> None:
    done, gw, exchange = _one_call("vllm", max_tokens=3)
    assert done.choices[0].finish_reason == "length"
    assert exchange.response is not None and exchange.response["stop_reason"] == "max_tokens"
    assert any("cut off at its max_tokens (truncated" in n for n in gw.notes)
    text = render(make_result(exchanges=[exchange]), harness_commit="abc1234", target_model="qwen2.5-7b")
    assert parse_front_matter(text)["truncated"] == 1


@pytest.mark.parametrize("kind", ["llama.cpp", "vllm", "ollama"])
def test_an_unknown_model_fails_the_pre_run_check(kind: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    with LocalServer(kind) as server:
        served = ModelConfig(provider="openai", target=MODELS[kind][0], base_url=server.base_url)
        assert isinstance(model_for(served, tmp_path), OpenAIModel)
        with pytest.raises(UserError) as err:
            model_for(served.model_copy(update={"target": "gpt-4o"}), tmp_path)
        said = str(err.value)
        assert said.startswith("model.target 'gpt-4o' is not a model the server") and MODELS[kind][0] in said
        assert [r["body"] for r in server.requests if r["path"] != "/v1/models"] == []  # no model call


def test_a_server_without_a_model_list_is_not_judged(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    with LocalServer("bare") as server:
        model_for(ModelConfig(provider="openai", target="whatever", base_url=server.base_url), tmp_path)
        # its chat path was asked with an empty body, which a real endpoint refuses unrun
        assert [r["body"] for r in server.requests if r["path"] == "/v1/chat/completions"] == [{}]


@pytest.mark.parametrize("setting", ["model", "optimizer"])
def test_a_base_url_whose_chat_path_is_missing_is_refused_before_the_run(
    monkeypatch, tmp_path, setting
) -> None:
    """model.base_url without its /v1 (or another service on the port): every task of round 1
    failed on "HTTP 404", a round burnt and exit 3 (QA). Now one line before anything runs."""
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    with LocalServer("llama.cpp") as server:
        root = server.base_url.removesuffix("/v1")
        with pytest.raises(UserError) as err:
            model_for(
                ModelConfig(provider="openai", target="smollm2-135m", base_url=root),
                tmp_path,
                setting=setting,
            )
        assert str(err.value) == (
            f"the server at {root} has no /chat/completions (POST {root}/chat/completions answered HTTP 404); "
            f"{setting}.base_url should be the API's root, which often ends in /v1"
        )
    with socketserver.TCPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler) as web:
        threading.Thread(target=web.serve_forever, args=(0.05,), daemon=True).start()
        try:  # a web server on the port: GET /v1/models 404, POST 501
            url = f"http://127.0.0.1:{web.server_address[1]}/v1"
            with pytest.raises(UserError, match="answered HTTP 501"):
                model_for(ModelConfig(provider="openai", target="x", base_url=url), tmp_path)
        finally:
            web.shutdown()


def test_a_server_that_ignores_tools_is_warned_about_for_tool_users(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    warned: list[str] = []
    with LocalServer("llama.cpp") as server:
        cfg = ModelConfig(provider="openai", target="smollm2-135m", base_url=server.base_url)
        model_for(cfg, tmp_path, warn=warned.append)  # a template without tools: no probe
        assert not any(r["path"].endswith("/chat/completions") for r in server.requests) and warned == []
        model_for(cfg, tmp_path, needs_tools=True, warn=warned.append)
        (said,) = warned
        assert "seems to ignore `tools`" in said and "--jinja" in said and said.startswith("warning: ")
        probes = [r["body"] for r in server.requests if r["path"].endswith("/chat/completions")]
        assert ["tools" in b for b in probes] == [False, True]
    for kind, name in (("vllm", "qwen2.5-7b"), ("ollama", "qwen2.5:0.5b")):  # honour tools (ollama: no usage)
        with LocalServer(kind) as server:
            cfg = ModelConfig(provider="openai", target=name, base_url=server.base_url)
            model_for(cfg, tmp_path, needs_tools=True, warn=warned.append)
    assert len(warned) == 1
