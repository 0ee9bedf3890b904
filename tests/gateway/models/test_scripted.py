"""Rule matching, placeholders and validation of the scripted model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harnessopt.commands.demo import DEMO_DATA
from harnessopt.errors import UserError
from harnessopt.gateway.models import ScriptedModel, make_model
from harnessopt.protocols import ModelError
from harnessopt.round.memorised import builtin


def req(*messages, system=None, model="claude-x"):
    body = {"model": model, "max_tokens": 10, "messages": list(messages)}
    if system is not None:
        body["system"] = system
    return body


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def text(response):
    return response["content"][0]["text"]


SCRIPT = {
    "lookup": [
        {"match": "capital of France", "value": "Paris"},
        {"match": "capital of (Italy|Rome)", "value": "Rome"},
    ],
    "rules": [
        {"role": "optimizer", "reply": "optimizer reply"},
        {"system": "(?i)pirate", "reply": "Arr, {lookup}"},
        {"first_user": "^start (?P<who>\\w+)", "turn": 2, "reply": "second turn for {who}"},
        {"last_user": "(?P<a>\\d+) plus (?P<b>\\d+)", "reply": "{a}+{b}"},
        {"last_user": "capital", "reply": "The capital is {lookup}."},
    ],
    "default": "I cannot answer that.",
}


@pytest.fixture
def model():
    return ScriptedModel.from_dict(SCRIPT)


def test_role_system_groups_lookup_and_default(model):
    assert text(model.create(req(user("capital of France")), "optimizer")) == "optimizer reply"
    assert (
        text(model.create(req(user("capital of France"), system="Talk like a PIRATE"), "target"))
        == "Arr, Paris"
    )
    blocks = [{"type": "text", "text": "You are a pirate."}]
    assert text(model.create(req(user("capital of Italy"), system=blocks), "target")) == "Arr, Rome"
    assert text(model.create(req(user("what is 2 plus 3")), "target")) == "2+3"
    assert text(model.create(req(user("the capital of France?")), "target")) == "The capital is Paris."
    assert text(model.create(req(user("hello")), "target")) == "I cannot answer that."


def test_rule_needing_lookup_falls_through_when_nothing_matches(model):
    # "capital of Spain" matches the capital rule, but no lookup entry: the default answers.
    assert text(model.create(req(user("capital of Spain")), "target")) == "I cannot answer that."


def test_turn_counts_assistant_messages(model):
    first = req(user("start Ada"))
    assert text(model.create(first, "target")) == "I cannot answer that."  # turn 1
    second = req(user("start Ada"), assistant("ok"), user("go on"))
    assert text(model.create(second, "target")) == "second turn for Ada"


def test_last_user_includes_tool_results_and_tool_inputs_are_expanded():
    m = ScriptedModel.from_dict(
        {
            "rules": [
                {"last_user": "exit=(?P<code>\\d)", "reply": "done {code}"},
                {
                    "last_user": "find (?P<pat>\\S+)",
                    "reply": "",
                    "tool_use": [{"name": "bash", "input": {"command": "grep -l '{pat}' *.md", "n": 3}}],
                },
            ]
        }
    )
    r = m.create(req(user("find passed: false")), "optimizer")
    assert r["stop_reason"] == "tool_use" and len(r["content"]) == 1
    call = r["content"][0]
    assert call["input"] == {"command": "grep -l 'passed:' *.md", "n": 3} and call["id"].startswith("toolu_")
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "exit=0"}],
    }
    follow = m.create(req(user("find x"), {"role": "assistant", "content": [call]}, result), "optimizer")
    assert text(follow) == "done 0"


def test_response_shape_and_determinism(model):
    body = req(user("what is 20 plus 22"), model="claude-haiku-4-5")
    r1, r2 = model.create(body, "target"), model.create(body, "target")
    assert r1 == r2
    assert r1["type"] == "message" and r1["role"] == "assistant" and r1["model"] == "claude-haiku-4-5"
    assert r1["stop_reason"] == "end_turn" and r1["stop_sequence"] is None and r1["id"].startswith("msg_")
    assert r1["usage"] == {"input_tokens": 5, "output_tokens": 2}  # ceil(18/4), ceil(5/4)


def test_no_match_without_default_is_a_400():
    m = ScriptedModel.from_dict({"rules": [{"last_user": "x", "reply": "y"}]})
    with pytest.raises(ModelError) as err:
        m.create(req(user("hello")), "target")
    assert err.value.status == 400 and "no rule matches 'hello'" in err.value.message


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([1, 2], "must be a mapping"),
        ({"rules": [{"reply": "x", "colour": "red"}]}, "rules.0.colour"),
        ({"rules": [{"last_user": "x"}]}, "neither 'reply' nor 'tool_use'"),
        ({"rules": [{"last_user": "(", "reply": "x"}]}, "rule 1: last_user is not a valid regex"),
        ({"rules": [{"last_user": "(?P<a>x)", "reply": "{b}"}]}, "placeholder {b}"),
        ({"rules": [{"reply": "{"}]}, "bad placeholder"),
        ({"rules": [{"role": "critic", "reply": "x"}]}, "rules.0.role"),
        ({"rules": [{"turn": 0, "reply": "x"}]}, "rules.0.turn"),
    ],
)
def test_bad_scripts_are_user_errors(data, problem):
    with pytest.raises(UserError, match="scripted model") as err:
        ScriptedModel.from_dict(data)
    assert problem in str(err.value)


def test_from_yaml_and_make_model(tmp_path: Path):
    path = tmp_path / "script.yaml"
    path.write_text('rules:\n  - last_user: "hi"\n    reply: "hello {{there}}"\n')
    m = make_model("scripted", script_path=path)
    assert text(m.create(req(user("hi")), "target")) == "hello {there}"
    path.write_text("rules: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        ScriptedModel.from_yaml(path)
    with pytest.raises(UserError, match="does not exist"):
        ScriptedModel.from_yaml(tmp_path / "missing.yaml")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not UTF-8 text"):
        ScriptedModel.from_yaml(path)
    with pytest.raises(UserError, match="needs a script"):
        make_model("scripted")
    with pytest.raises(UserError, match="known providers: anthropic, openai, scripted"):
        make_model("gemini")


def test_latency_holds_each_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("harnessopt.gateway.models.scripted.time.sleep", slept.append)
    m = ScriptedModel.from_dict({"default": "ok", "latency_s": 1.5})
    req = {"model": "x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert m.create(req, "target")["content"][0]["text"] == "ok" and slept == [1.5]
    with pytest.raises(UserError, match="latency_s"):
        ScriptedModel.from_dict({"default": "ok", "latency_s": -1})


@pytest.mark.parametrize(
    "system",
    [
        "Answer questions about capitals.",  # the seed skill: a chatty reply
        "Answer with only the city name.",  # round 1's edit: the largest city, for some
        "Answer with only the city name. The capital is often not its largest city.",
    ],
)
def test_the_demo_model_answers_a_perturbed_task_as_the_task(system: str) -> None:
    """The demo's scripted target stands in for a real model, which a doubled space or a leading
    newline does not change: the memorised-answer check's built-in perturbation of each demo task
    gets the answer the task gets. (Its rules matched 'capital of' and 'New Zealand' with one space:
    about 40% of the variants missed, and a real gain failed the check by chance.)"""
    model = ScriptedModel.from_yaml(DEMO_DATA / "model.yaml")

    def reply(text: str) -> str:
        body = model.create({"system": system, "messages": [{"role": "user", "content": text}]}, "target")
        return " ".join(body["content"][0]["text"].split())

    rng = random.Random(7)
    tasks = [
        json.loads(line) for line in (DEMO_DATA / "tasks.jsonl").read_text().splitlines() if line.strip()
    ]
    for task in tasks:
        want = reply(task["input"])
        for _ in range(10):
            variant = builtin(dict(task), rng)["input"]
            assert reply(variant) == want, (task["id"], variant)
