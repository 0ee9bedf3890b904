"""The ``openai`` upstream: the official SDK against local fakes; keys, endpoints, retries, usage."""

from __future__ import annotations

import os
from pathlib import Path

import anthropic
import openai
import pytest
import yaml

from harnessopt.config import Config, ModelConfig, OptimizerConfig, parse_config
from harnessopt.errors import UserError
from harnessopt.gateway.models import (
    OpenAIModel,
    make_model,
    model_for,
    optimizer_model_config,
    optimizer_model_for,
)
from harnessopt.gateway.policy import price_of
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import ModelError
from harnessopt.round.services import open_services
from harnessopt.workspace.core import Workspace, init_workspace
from tests.support.cli import cli, git, write_example
from tests.support.counting_upstream import CountingUpstream, api_error, ok, rate_limited
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_openai import FakeOpenAIServer, completion

KEY = "sk-openai-REAL-key-1234567890"
REQUEST = {"model": "gpt-test", "max_tokens": 20, "messages": [{"role": "user", "content": "hello there"}]}


def test_a_call_is_translated_and_its_answer_made_canonical() -> None:
    with FakeOpenAIServer(lambda r: completion("Hi!", usage=(5, 2))) as fake:
        model = OpenAIModel(KEY, fake.base_url)
        reply = model.create(REQUEST, "target")
        sent = fake.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["headers"]["authorization"] == f"Bearer {KEY}"
    assert sent["body"] == {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 20,
    }
    assert reply["content"] == [{"type": "text", "text": "Hi!"}] and reply["stop_reason"] == "end_turn"
    assert reply["usage"] == {"input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 2}
    assert model.token_field == "max_tokens"  # what compatible servers read
    assert "REAL" not in repr(model)


def test_the_official_endpoint_gets_max_completion_tokens() -> None:
    model = OpenAIModel(KEY)
    assert model.base_url == "https://api.openai.com/v1" and model.token_field == "max_completion_tokens"


def test_a_server_without_usage_is_counted_with_the_estimate() -> None:
    with FakeOpenAIServer(lambda r: completion("four", usage=None)) as fake:
        reply = OpenAIModel(KEY, fake.base_url).create(REQUEST, "target")
    # ceil(11 / 4), ceil(4 / 4), and marked as an estimate for the gateway to label
    assert reply["usage"] == {"input_tokens": 3, "output_tokens": 1, "estimated": True}


def test_retries_happen_in_the_sdk_and_errors_keep_their_status() -> None:
    with CountingUpstream([rate_limited(), ok(completion("ok"))]) as up:
        reply = OpenAIModel(KEY, up.base_url + "/v1", max_retries=2).create(REQUEST, "target")
        assert reply["content"][0]["text"] == "ok" and len(up.attempts) == 2
    with CountingUpstream(
        [api_error(401, "invalid_request_error", f"Incorrect API key provided: {KEY}")]
    ) as up:
        model = OpenAIModel(KEY, up.base_url + "/v1", key_name="LOCAL_LLM_KEY", max_retries=2)
        with pytest.raises(ModelError) as err:
            model.create(REQUEST, "target")
    assert err.value.status == 401 and err.value.error_type == "authentication_error"
    assert "check LOCAL_LLM_KEY" in err.value.message and KEY not in err.value.message
    assert "[redacted]" in err.value.message and len(up.attempts) == 1 and not err.value.retryable


def test_a_refused_connection_is_a_502_after_the_retries() -> None:
    model = OpenAIModel(KEY, "http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ModelError) as err:
        model.create(REQUEST, "target")
    assert err.value.status == 502 and "connection to http://127.0.0.1:9/v1 failed" in err.value.message


def test_no_key_is_a_user_error_naming_the_variable() -> None:
    with pytest.raises(UserError, match="set OPENAI_API_KEY in the environment"):
        make_model("openai", env={})
    with pytest.raises(UserError, match="set MY_LLM_KEY .*http://h:1/v1"):
        make_model(
            "openai", env={"OPENAI_API_KEY": "other"}, base_url="http://h:1/v1", api_key_env="MY_LLM_KEY"
        )
    with pytest.raises(UserError, match="set CLAUDE_KEY"):
        make_model("anthropic", env={"ANTHROPIC_API_KEY": "k"}, api_key_env="CLAUDE_KEY")
    model = make_model(
        "openai", env={"MY_LLM_KEY": "x", "OPENAI_BASE_URL": "http://h:2/v1"}, api_key_env="MY_LLM_KEY"
    )
    assert isinstance(model, OpenAIModel) and model.base_url == "http://h:2/v1"


def test_an_unreachable_base_url_is_a_user_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(UserError, match=r"http://127.0.0.1:9/v1 \(model.base_url\) is unreachable"):
        model_for(ModelConfig(provider="openai", base_url="http://127.0.0.1:9/v1"), tmp_path)
    with FakeOpenAIServer(lambda r: completion("x")) as fake:
        assert isinstance(
            model_for(ModelConfig(provider="openai", base_url=fake.base_url), tmp_path), OpenAIModel
        )


def test_the_optimizer_defaults_to_the_target_upstream(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = ModelConfig(provider="openai", base_url="http://127.0.0.1:1/v1", api_key_env="LOCAL_KEY")
    inherited = optimizer_model_config(Config(model=target, optimizer=OptimizerConfig(model="opt-m")))
    assert (inherited.provider, inherited.target, inherited.base_url, inherited.api_key_env) == (
        "openai",
        "opt-m",
        "http://127.0.0.1:1/v1",
        "LOCAL_KEY",
    )
    other = optimizer_model_config(Config(model=target, optimizer=OptimizerConfig(provider="anthropic")))
    assert (other.provider, other.base_url, other.api_key_env) == ("anthropic", None, None)
    scripted = Config(model=ModelConfig(provider="scripted", script="s.yaml"))
    (tmp_path / "s.yaml").write_text("default: hi\n")
    model = model_for(scripted.model, tmp_path)
    assert optimizer_model_for(scripted, tmp_path, model) is model  # one upstream for both roles
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with FakeOpenAIServer(lambda r: completion("x")) as fake:
        split = Config(
            model=scripted.model,
            optimizer=OptimizerConfig(model="gpt-o", provider="openai", base_url=fake.base_url),
        )
        opt = optimizer_model_for(split, tmp_path, model)
        assert isinstance(opt, OpenAIModel) and opt.base_url == fake.base_url
    split = Config(
        model=scripted.model, optimizer=OptimizerConfig(provider="openai", base_url="http://127.0.0.1:9/v1")
    )
    with pytest.raises(UserError, match=r"\(optimizer.base_url\) is unreachable"):
        optimizer_model_for(split, tmp_path, model)


def test_user_prices_and_the_note_for_an_unpriced_model() -> None:
    cfg = Config.model_validate({"model": {"target": "gpt-test"}, "prices": {"gpt-test*": [2.0, 8.0]}})
    assert price_of("claude-sonnet-4-5", {"*sonnet*": (1.0, 1.0)}) == (1.0, 1.0)  # before the built-in table
    assert price_of("claude-sonnet-4-5", {"gpt*": (1.0, 1.0)}) == (3.0, 15.0)
    big = completion("a", model="gpt-test-2025", usage=(1_000_000, 500_000))
    replies = iter([big, completion("b", model="smol"), completion("c", model="smol")])
    with FakeOpenAIServer(lambda r: next(replies)) as fake:
        model = OpenAIModel(KEY, fake.base_url)
        with Gateway.from_config(model, cfg) as gw:
            lease = gw.lease("target", 1, "t")
            need = gw.reservation("target", {**REQUEST, "model": "gpt-test"}, b"x" * 100)
            assert need.cost_usd == pytest.approx((1124 * 2 + 20 * 8) / 1e6)
            client = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
            for _ in range(3):
                client.chat.completions.create(
                    model="gpt-test", max_tokens=5, messages=[{"role": "user", "content": "q"}]
                )
            assert gw.total().cost_usd == pytest.approx(2.0 + 4.0)  # 1M in at $2, 0.5M out at $8; smol: $0
            unpriced = [n for n in gw.notes if "no list price" in n]
            assert unpriced == ["no list price for model 'smol': its cost is counted as $0"]  # said once
    with pytest.raises(UserError, match="prices.gpt"):
        parse_config({"prices": {"gpt": [1.0]}}, "harnessopt.yaml")


def _openai_workspace(tmp_path: Path, base_url: str | None) -> Path:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    assert cli("init", ws, "--skill", skill, "--tasks", tasks).returncode == 0
    cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
    cfg["model"] |= {"provider": "openai", "target": "smol", "base_url": base_url}
    (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
    git(ws, "commit", "-qam", "openai upstream")
    return ws


@pytest.mark.parametrize("case", ["no key", "unreachable"])
def test_run_stops_before_any_rollout_with_one_line(tmp_path: Path, case: str) -> None:
    ws = _openai_workspace(tmp_path, "http://127.0.0.1:9/v1")
    env = {"OPENAI_API_KEY": "" if case == "no key" else "k"}
    r = cli("run", ws, "--sandbox", "local", "--rounds", "1", env=env)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert ("OPENAI_API_KEY" if case == "no key" else "unreachable") in lines[0]
    scratch = ws / ".harnessopt" / "scratch"
    assert not scratch.exists() or not any(scratch.rglob("answer.txt"))  # nothing was rolled out


def test_services_give_each_role_its_upstream_and_drop_the_named_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """open_services: target on an openai upstream keyed by api_key_env, optimizer on anthropic."""
    skill, tasks = write_example(tmp_path)
    ws_path = init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _: None)
    anthropic_reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-opus-4-1",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    with (
        FakeOpenAIServer(lambda r: completion("apple")) as target,
        FakeAnthropicServer(lambda r: anthropic_reply) as optimizer,
    ):
        overrides = {
            "rollout.sandbox": "local",
            "model.provider": "openai",
            "model.target": "local-model",
            "model.base_url": target.base_url,
            "model.api_key_env": "LOCAL_LLM_TOKEN",
            "optimizer.provider": "anthropic",
            "optimizer.unsafe_host": True,
        }
        ws = Workspace.open(ws_path, overrides)
        monkeypatch.setenv("LOCAL_LLM_TOKEN", "tok-local-1234567890")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-9876543210")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", optimizer.base_url)
        with open_services(ws.root, ws.cfg, lambda _: None) as svc:
            assert "LOCAL_LLM_TOKEN" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ
            t = svc.gateway.lease("target", 1)
            chat = openai.OpenAI(base_url=t.base_url + "/v1", api_key=t.token, max_retries=0)
            said = chat.chat.completions.create(
                model="local-model",
                max_tokens=8,
                messages=[{"role": "user", "content": "Say the word: apple"}],
            )
            o = svc.gateway.lease("optimizer", 1)
            client = anthropic.Anthropic(base_url=o.base_url, api_key=o.token, max_retries=0)
            client.messages.create(
                model="claude-opus-4-1", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
    assert said.choices[0].message.content == "apple"
    assert target.requests[-1]["headers"]["authorization"] == "Bearer tok-local-1234567890"
    # the pre-run check's empty POST (no /models here), then the one call
    assert [r["body"] for r in target.requests][:1] == [{}] and len(target.requests) == 2
    assert len(optimizer.requests) == 1
    headers = optimizer.requests[0]["headers"]
    assert "sk-ant-9876543210" in {
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    }
