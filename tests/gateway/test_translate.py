"""Messages API <-> Chat Completions translation, field by field, and what each side refuses."""

from __future__ import annotations

from typing import Any

import pytest

from harnessopt.gateway.chat_wire import chat_error_body, chat_sse_chunks
from harnessopt.gateway.translate import (
    BASH_SCHEMA,
    EDITOR_SCHEMA,
    RAW_ARGUMENTS,
    chat_request_to_messages,
    chat_response_to_messages,
    messages_request_to_chat,
    messages_response_to_chat,
)
from harnessopt.protocols import ModelError

PNG = "iVBORw0KGgo="


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]} | kw


def refused(fn: Any, body: dict[str, Any]) -> str:
    with pytest.raises(ModelError) as err:
        fn(body)
    assert err.value.status == 400 and err.value.error_type == "invalid_request_error"
    return err.value.message


def test_chat_request_system_images_tools_and_results() -> None:
    body = chat(
        messages=[
            {"role": "system", "content": "Rule one."},
            {"role": "developer", "content": [{"type": "text", "text": "Rule two."}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"x": 1}'}},
                    {"id": "c2", "type": "function", "function": {"name": "look", "arguments": "not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "a dog"}]},
            {"role": "user", "content": "So?"},
        ],
        max_completion_tokens=20,
        temperature=0.2,
        top_p=0.9,
        stop="STOP",
        user="u-1",
        tools=[{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}],
        tool_choice={"type": "function", "function": {"name": "look"}},
        parallel_tool_calls=False,
        stream_options={"include_usage": True},
        logprobs=False,
        seed=None,
    )
    assert chat_request_to_messages(body) == {
        "model": "m",
        "max_tokens": 20,  # max_completion_tokens wins over max_tokens
        "system": "Rule one.\n\nRule two.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "c1", "name": "look", "input": {"x": 1}},
                    {"type": "tool_use", "id": "c2", "name": "look", "input": {RAW_ARGUMENTS: "not json"}},
                ],
            },
            {
                "role": "user",
                "content": [  # tool results and the next user turn are one message
                    {"type": "tool_result", "tool_use_id": "c1", "content": "a cat"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "a dog"},
                    {"type": "text", "text": "So?"},
                ],
            },
        ],
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["STOP"],
        "tools": [{"name": "look", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "look", "disable_parallel_tool_use": True},
        "metadata": {"user_id": "u-1"},
    }


@pytest.mark.parametrize(
    "choice,parallel,expected",
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, True, None),
    ],
)
def test_chat_tool_choice(choice: Any, parallel: Any, expected: Any) -> None:
    body = chat(tool_choice=choice, parallel_tool_calls=parallel)
    assert chat_request_to_messages(body).get("tool_choice") == expected


@pytest.mark.parametrize(
    "body,field",
    [
        (chat(seed=1), "seed"),
        (chat(frequency_penalty=0.5), "frequency_penalty"),
        (chat(response_format={"type": "json_schema", "json_schema": {}}), "response_format"),
        (chat(logprobs=True), "logprobs"),
        (chat(audio={"voice": "x"}), "audio"),
        (chat(n=3), "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_completion_tokens"),
        (chat(messages=[]), "messages"),
        (chat(messages=[{"role": "user", "content": "x", "name": "bob"}]), "messages[0].name"),
        (chat(messages=[{"role": "function", "content": "x"}]), "messages[0].role"),
        (
            chat(messages=[{"role": "user", "content": [{"type": "input_audio"}]}]),
            "messages[0].content[0].type",
        ),
        (
            chat(
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "x", "detail": "low"}}],
                    }
                ]
            ),
            "messages[0].content[0].image_url.detail",
        ),
        (chat(tools=[{"type": "custom", "custom": {}}]), "tools[0].type"),
        (chat(tool_choice="sometimes"), "tool_choice"),
        (chat(web_search_options={}), "web_search_options"),
    ],
)
def test_chat_features_without_an_equivalent_are_refused_by_field(body: dict[str, Any], field: str) -> None:
    assert refused(chat_request_to_messages, body).startswith(f"{field}: ")


def test_messages_request_to_chat_with_the_optimizer_tools_and_images() -> None:
    body = {
        "model": "m",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "Sys.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Running."},
                    {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "boom"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "Next?"},
                ],
            },
        ],
        "tools": [
            {"type": "bash_20250124", "name": "bash"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            {"name": "calc", "description": "d", "input_schema": {"type": "object"}},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stop_sequences": ["X"],
        "metadata": {"user_id": "u"},
    }
    out = messages_request_to_chat(body, token_field="max_completion_tokens")
    assert out == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Sys."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            {
                "role": "assistant",
                "content": "Running.",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},  # right after the call
            {"role": "user", "content": "Next?"},
        ],
        "max_completion_tokens": 50,
        "stop": ["X"],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "description": out["tools"][0]["function"]["description"],
                    "parameters": BASH_SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "str_replace_based_edit_tool",
                    "description": out["tools"][1]["function"]["description"],
                    "parameters": EDITOR_SCHEMA,
                },
            },
            {
                "type": "function",
                "function": {"name": "calc", "description": "d", "parameters": {"type": "object"}},
            },
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "user": "u",
    }


@pytest.mark.parametrize(
    "body,field",
    [
        ({"model": "m", "max_tokens": 5, "messages": [], "top_k": 3}, "top_k"),
        ({"model": "m", "max_tokens": 5, "messages": [], "thinking": {"type": "enabled"}}, "thinking"),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}],
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ],
            },
            "messages[0].content[0].content[0].type",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [],
                "tools": [{"type": "web_search_20250305", "name": "w"}],
            },
            "tools[0].type",
        ),
    ],
)
def test_messages_features_without_an_equivalent_are_refused_by_field(
    body: dict[str, Any], field: str
) -> None:
    assert refused(messages_request_to_chat, body).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "stop,finish",
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reasons_to_chat(stop: str, finish: str) -> None:
    message = {
        "id": "msg_1",
        "model": "m",
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": stop,
        "usage": {},
    }
    assert messages_response_to_chat(message)["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize(
    "finish,stop",
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
    ],
)
def test_stop_reasons_from_chat(finish: str, stop: str) -> None:
    completion = {"id": "chatcmpl-1", "choices": [{"message": {"content": "x"}, "finish_reason": finish}]}
    assert chat_response_to_messages(completion, "m")["stop_reason"] == stop


def test_responses_both_ways_with_usage_and_tool_calls() -> None:
    message = {
        "id": "msg_abc",
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1, 2]}},
            {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {RAW_ARGUMENTS: "{broken"}},
        ],
        "stop_reason": "tool_use",
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 90,
            "cache_creation_input_tokens": 5,
            "output_tokens": 4,
        },
    }
    out = messages_response_to_chat(message, created=123)
    assert out == {
        "id": "chatcmpl-abc",
        "object": "chat.completion",
        "created": 123,
        "model": "claude-x",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Calling.",
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": [1, 2]}'},
                        },
                        {
                            "id": "toolu_2",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{broken"},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 105,
            "completion_tokens": 4,
            "total_tokens": 109,
            "prompt_tokens_details": {"cached_tokens": 90},
        },
    }
    back = chat_response_to_messages(
        {
            "id": "chatcmpl-abc",
            "model": "gpt-x",
            "choices": [
                {"message": out["choices"][0]["message"], "finish_reason": "stop"}
            ],  # a server that says stop
            "usage": {
                "prompt_tokens": 105,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 90},
            },
        },
        "asked",
    )
    assert back == {
        "id": "msg_abc",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": [1, 2]}},
            {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {RAW_ARGUMENTS: "{broken"}},
        ],
        "stop_reason": "tool_use",  # tool calls were made, whatever the finish reason said
        "stop_sequence": None,
        "usage": {"input_tokens": 15, "cache_read_input_tokens": 90, "output_tokens": 4},
    }


def test_a_completion_without_choices_is_an_upstream_error() -> None:
    with pytest.raises(ModelError) as err:
        chat_response_to_messages({"id": "x", "choices": []}, "m")
    assert err.value.status == 502


def test_chat_sse_chunks_and_error_bodies() -> None:
    message = {
        "id": "msg_1",
        "model": "m",
        "content": [
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"x": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    chunks = list(chat_sse_chunks(messages_response_to_chat(message, created=1), include_usage=True))
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {
            "tool_calls": [
                {"index": 0, "id": "t", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]},
        {},
        None,
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] == 5 and all(
        c["object"] == "chat.completion.chunk" for c in chunks
    )
    assert "usage" not in next(chat_sse_chunks(messages_response_to_chat(message), include_usage=False))

    assert chat_error_body("invalid_request_error", "tools[2].type: no") == {
        "error": {
            "message": "tools[2].type: no",
            "type": "invalid_request_error",
            "param": "tools[2].type",
            "code": None,
        }
    }
    spent = chat_error_body("rate_limit_error", "harnessopt budget spent: ...")["error"]
    assert (spent["type"], spent["code"]) == ("insufficient_quota", "insufficient_quota")
    busy = chat_error_body("rate_limit_error", "this lease already has 10 calls in flight")["error"]
    assert (busy["type"], busy["code"], busy["param"]) == ("requests", "rate_limit_exceeded", None)
