"""The tool-agent template as harnessopt runs it: a sandbox, the gateway, the scorer, and the
trajectory file that records every tool call (the template's own tool tests: test_templates.py)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from harnessopt.config import BudgetConfig, Config, RolloutConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Task
from harnessopt.rollout.runner import Candidate, Runner
from harnessopt.rollout.trajectory import render
from harnessopt.sandbox import make_sandbox
from harnessopt.workspace import flags
from tests.support.templates import TEMPLATES, make_skill

SCRIPT = {
    "rules": [
        {
            "turn": 1,
            "tool_use": [{"name": "bash", "input": {"command": "python3 skill/scripts/lookup.py France"}}],
        },
        {
            "turn": 2,
            "last_user": "^(?P<city>\\w+)\\n\\[exit code 0\\]",
            "tool_use": [{"name": "write_file", "input": {"path": "answer-draft.txt", "content": "{city}"}}],
        },
        {"turn": 3, "tool_use": [{"name": "read_file", "input": {"path": "answer-draft.txt"}}]},
        {
            "turn": 4,
            "last_user": "^(?P<city>\\w+)$",
            "tool_use": [{"name": "finish", "input": {"answer": "{city}"}}],
        },
    ]
}


@pytest.mark.parametrize(
    "sandbox",
    [
        "local",
        pytest.param(
            "docker", marks=[pytest.mark.docker, pytest.mark.skipif(os.geteuid() != 0, reason="root")]
        ),
    ],
)
def test_tool_agent_runs_its_tools_and_the_trajectory_records_every_call(
    tmp_path: Path, sandbox: str, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "scratch" / "round-1" / "incumbent"
    skill = make_skill(tmp_path)
    (skill / "scripts").mkdir()
    (skill / "scripts" / "lookup.py").write_text(
        "import sys\nprint({'France': 'Paris'}[sys.argv[1]])\n"  # the skill's script, run by bash
    )
    shutil.copytree(skill, root / "skill")
    shutil.copytree(
        TEMPLATES / "tool-agent", root / "harness", ignore=shutil.ignore_patterns("template.yaml")
    )
    assert [f.name for f in flags.registered(root / "harness")] == [
        "api",
        "max_turns",
        "skill_loading",
        "trigger_turns",
    ]
    cfg = Config(rollout=RolloutConfig(sandbox=sandbox, timeout_s=60, concurrency=1))
    socket_dir = None
    if sandbox == "docker":  # the image is there (or the test skips); containers reach the gateway by socket
        request.getfixturevalue("docker_client")
        socket_dir = Path(tempfile.mkdtemp(prefix="ho-gwt-"))
    box = make_sandbox(cfg.rollout, announce=lambda _m: None)
    try:
        gateway = Gateway(ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=socket_dir)
        with gateway as gw:
            runner = Runner(
                cfg, box, gw, lambda task, answer, out: float(answer == task["answer"]), tmp_path / "scratch"
            )
            [result] = runner.run(
                Candidate(root, "incumbent", "c0"),
                [Task("t1", "Capital of France?", "Paris", "train")],
                1,
                phase="rollout",
            )
    finally:
        box.close()
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)
    assert result.passed and result.answer == "Paris", (result.stderr_tail, result.notes)
    assert result.steps == 4  # four model calls through the gateway
    tools = [e for e in result.harness_events if e["event"] == "tool"]
    assert [(e["name"], e["is_error"]) for e in tools] == [
        ("bash", False),
        ("write_file", False),
        ("read_file", False),
    ]
    assert tools[0]["result"] == "Paris\n[exit code 0]"
    start = result.harness_events[0]
    assert start["event"] == "start" and start["flags_read"] == {
        "api": "messages",
        "max_turns": "12",
        "skill_loading": "system",
    }  # flags.yaml
    assert not any("skipped" in n for n in result.notes)  # no link left in the task's output
    text = render(result, harness_commit="c0", target_model="claude-haiku-4-5")
    events = [
        json.loads(line[2:])
        for line in text.split("# Harness events", 1)[1].splitlines()
        if line.startswith("- {")
    ]
    assert [e.get("name") for e in events if e["event"] == "tool"] == ["bash", "write_file", "read_file"]
    assert "python3 skill/scripts/lookup.py France" in text and "answer-draft.txt" in text


SDK_VARIANT = Path(__file__).resolve().parent / "support" / "tool_agent_sdk.py"
MULTI_TURN = {
    "rules": [
        {"turn": 1, "tool_use": [{"name": "read_file", "input": {"path": "skill/references/capitals.md"}}]},
        {
            "turn": 2,
            "reply": "Checking.",
            "tool_use": [
                {"name": "bash", "input": {"command": "echo $((6*7)); exit 4"}},
                {"name": "write_file", "input": {"path": "a/b.txt", "content": "Paris"}},
            ],
        },
        {
            "turn": 3,
            "last_user": "exit code 4",
            "tool_use": [{"name": "read_file", "input": {"path": "a/b.txt"}}],
        },
        {"turn": 4, "reply": "Done.", "tool_use": [{"name": "finish", "input": {"answer": " Paris "}}]},
    ]
}


def _run_both(tmp_path: Path, env: dict[str, str], requests: list[dict]) -> dict[str, tuple]:
    """The template and its SDK variant on one task; per variant: exit code, answer, the requests
    that reached the endpoint (path, body, the headers that matter), events without times."""
    import subprocess
    import sys

    from tests.support.templates import TEMPLATES

    seen = {}
    for name, script in (("stdlib", TEMPLATES / "tool-agent" / "run.py"), ("sdk", SDK_VARIANT)):
        tmp = tmp_path / name
        skill = make_skill(tmp)
        (tmp / "task.json").write_text(json.dumps({"id": "t1", "input": {"country": "France"}}))
        argv = [sys.executable, str(script), "--task", str(tmp / "task.json"), "--skill", str(skill)]
        clean = {
            k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HO_FLAG_"))
        }
        before = len(requests)
        proc = subprocess.run(
            [*argv, "--out", str(tmp / "out")], env=clean | env, capture_output=True, text=True, timeout=120
        )
        keep = ("authorization", "x-api-key", "anthropic-version", "content-type")
        sent = [
            (r["path"], r["body"], r["stream"], {k: v for k, v in r["headers"].items() if k.lower() in keep})
            for r in requests[before:]
        ]
        answer = tmp / "out" / "answer.txt"
        events = [json.loads(x) for x in (tmp / "out" / "trajectory.jsonl").read_text().splitlines()]
        seen[name] = (
            proc.returncode,
            answer.read_text() if answer.exists() else None,
            sent,
            [{k: v for k, v in e.items() if k not in ("t", "wall_s")} for e in events],
            (tmp / "out" / "work" / "skill").exists(),
        )
        assert proc.returncode == 0 or "Traceback" in proc.stderr or "harness:" in proc.stderr
    return seen


def test_tool_agent_on_the_standard_library_matches_the_sdk_variant_on_the_messages_api(tmp_path: Path):
    """Four turns of tool_use / tool_result (two calls in one turn, a failing command) on a local
    Messages endpoint: the same requests (body and key, version headers), answer and events."""
    from tests.support.fake_anthropic import FakeAnthropicServer

    with FakeAnthropicServer(ScriptedModel.from_dict(MULTI_TURN)) as fake:
        env = {
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": "tok-1",
            "HARNESSOPT_TARGET_MODEL": "m",
        }
        seen = _run_both(tmp_path, env, fake.requests)
    assert seen["stdlib"] == seen["sdk"]
    code, answer, sent, events, link_left = seen["stdlib"]
    assert code == 0 and answer == "Paris" and len(sent) == 4 and not link_left
    headers = {k.lower(): v for k, v in sent[0][3].items()}
    assert headers["authorization"] == "Bearer tok-1" and headers["anthropic-version"]
    last = sent[3][1]["messages"]
    assert [m["role"] for m in last] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [b["type"] for b in last[3]["content"]] == ["text", "tool_use", "tool_use"]
    results = last[4]["content"]
    assert results[0]["content"] == "42\n[exit code 4]" and results[0]["is_error"] is True
    assert results[1] == {**results[1], "content": "wrote 5 bytes to a/b.txt", "is_error": False}
    assert [e["event"] for e in events].count("tool") == 4 and events[-1]["event"] == "finish"


def test_tool_agent_on_the_standard_library_matches_the_sdk_variant_on_the_chat_api(tmp_path: Path):
    """Three turns on a local Chat Completions endpoint, one call with arguments that are not
    JSON: the same requests (body, Bearer key), answer and events."""
    from tests.support.fake_openai import FakeOpenAIServer, completion, function_call

    def reply(request: dict) -> dict:
        turn = sum(m["role"] == "assistant" for m in request["body"]["messages"]) + 1
        if turn == 1:
            calls = [function_call("c1", "read_file", '{"path": "skill/references/capitals.md"}')]
            return completion(None, calls, finish="tool_calls")
        if turn == 2:
            calls = [
                function_call("c2", "bash", '{"command": "echo no; exit 7"}'),
                function_call("c3", "bash", "{oops"),
            ]
            return completion("Trying.", calls, finish="tool_calls")
        return completion(None, [function_call("c4", "finish", '{"answer": "Paris"}')], finish="tool_calls")

    with FakeOpenAIServer(reply) as fake:
        env = {
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "tok-2",
            "HARNESSOPT_TARGET_MODEL": "m",
            "HO_FLAG_API": "chat",
        }
        seen = _run_both(tmp_path, env, fake.requests)
    assert seen["stdlib"] == seen["sdk"]
    code, answer, sent, events, _ = seen["stdlib"]
    assert code == 0 and answer == "Paris" and len(sent) == 3
    assert (
        sent[0][0] == "/v1/chat/completions"
        and {k.lower(): v for k, v in sent[0][3].items()}["authorization"] == "Bearer tok-2"
    )
    tool_messages = [m for m in sent[2][1]["messages"] if m["role"] == "tool"]
    assert tool_messages[1]["content"] == "Error: no\n[exit code 7]"
    assert tool_messages[2]["content"].startswith("Error: arguments are not a JSON object")
    assert events[0]["api"] == "chat" and events[-1]["event"] == "finish"


def test_tool_agent_retries_and_fails_like_the_sdk_variant(tmp_path: Path):
    """A 529 then an answer: one retry; a 401 ends the run (exit 1) after one request, the skill
    link removed, on both variants."""
    from tests.support.templates import StatusServer

    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    done = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "tool_use", "id": "tu_1", "name": "finish", "input": {"answer": "Oslo"}}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    for replies, code in (
        ([(529, {"retry-after": "0.01"}, error), (200, {}, done)], 0),
        ([(401, {}, error)], 1),
    ):
        outcome = {}
        for name in ("stdlib", "sdk"):
            server = StatusServer(replies)
            try:
                env = {
                    "ANTHROPIC_BASE_URL": server.url,
                    "ANTHROPIC_API_KEY": "k",
                    "HARNESSOPT_TARGET_MODEL": "m",
                }
                tmp = tmp_path / f"{name}-{code}"
                seen = _run_both_one(tmp, name, env)
            finally:
                server.close()
            outcome[name] = (*seen, server.hits)
        assert outcome["stdlib"][:3] == outcome["sdk"][:3] and outcome["stdlib"][0] == code, outcome
        assert len(outcome["stdlib"][3]) == len(replies) == len(outcome["sdk"][3])


def _run_both_one(tmp: Path, name: str, env: dict[str, str]) -> tuple:
    """One variant on one task: (exit code, answer, skill link left)."""
    import subprocess
    import sys

    from tests.support.templates import TEMPLATES

    script = TEMPLATES / "tool-agent" / "run.py" if name == "stdlib" else SDK_VARIANT
    skill = make_skill(tmp)
    (tmp / "task.json").write_text(json.dumps({"id": "t1", "input": "q"}))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HO_FLAG_"))}
    argv = [sys.executable, str(script), "--task", str(tmp / "task.json"), "--skill", str(skill)]
    proc = subprocess.run(
        [*argv, "--out", str(tmp / "out")], env=clean | env, capture_output=True, text=True, timeout=120
    )
    answer = tmp / "out" / "answer.txt"
    if proc.returncode:
        assert "AuthenticationError" in proc.stderr, proc.stderr
    return (
        proc.returncode,
        answer.read_text() if answer.exists() else None,
        (tmp / "out" / "work" / "skill").exists(),
    )
