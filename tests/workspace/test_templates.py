"""The harness templates run as real subprocesses against the gateway with a scripted model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from tests.support.templates import TEMPLATES, StatusServer, make_skill


def run_template(
    name: str, tmp: Path, task: dict, env: dict[str, str], skill: Path | None = None
) -> subprocess.CompletedProcess[str]:
    task_file, out = tmp / "task.json", tmp / "out"
    task_file.write_text(json.dumps(task))
    argv = [sys.executable, str(TEMPLATES / name / "run.py"), "--task", str(task_file)]
    argv += ["--skill", str(skill or make_skill(tmp)), "--out", str(out)]
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HARNESSOPT_"))
    }
    return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True, timeout=120)


def gateway_env(gw: Gateway, token: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": gw.base_url,
        "ANTHROPIC_API_KEY": token,
        "OPENAI_BASE_URL": gw.base_url + "/v1",  # as the sandboxes set them
        "OPENAI_API_KEY": token,
        "HARNESSOPT_TARGET_MODEL": "claude-haiku-4-5",
    }


def test_every_template_has_a_description_and_entry_point():
    names = sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir())
    assert names == [
        "chat",
        "chat-sdk",
        "claude-code",
        "codex",
        "command",
        "openai-chat",
        "openai-chat-sdk",
        "tool-agent",
    ]
    for name in names:
        meta = yaml.safe_load((TEMPLATES / name / "template.yaml").read_text())
        assert isinstance(meta["description"], str) and "\n" not in meta["description"].strip()
        compile((TEMPLATES / name / "run.py").read_text(), f"{name}/run.py", "exec")


def test_chat_template(tmp_path: Path):
    script = {
        "rules": [
            {
                "system": "^# Geography\\nAnswer with the city name only\\.$",
                "last_user": "France",
                "reply": "  Paris \n",
            },
            {"last_user": '"country": "Italy"', "reply": "Rome"},
        ]
    }
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        proc = run_template(
            "chat", tmp_path, {"id": "t1", "input": "Capital of France?"}, gateway_env(gw, lease.token)
        )
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
        exchanges = gw.release(lease.token)
        assert len(exchanges) == 1 and exchanges[0].request["model"] == "claude-haiku-4-5"
        events = [json.loads(x) for x in (tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()]
        assert [e["event"] for e in events] == ["request", "response"]

        lease = gw.lease("target", 1, "t2")
        task = {"id": "t2", "input": {"country": "Italy"}}
        proc = run_template("chat", tmp_path, task, gateway_env(gw, lease.token))
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "out" / "answer.txt").read_text() == "Rome"


def test_chat_template_fails_loudly_on_api_error(tmp_path: Path):
    with Gateway(ScriptedModel.from_dict({"rules": [{"reply": "x"}]}), BudgetConfig()) as gw:
        proc = run_template("chat", tmp_path, {"id": "t", "input": "q"}, gateway_env(gw, "wrong-token"))
    assert proc.returncode != 0 and "AuthenticationError" in proc.stderr
    assert not (tmp_path / "out" / "answer.txt").exists()


def _tool_events(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "trajectory.jsonl").read_text().splitlines()]


def test_tool_agent_template(tmp_path: Path):
    """bash in the sandbox, file read/write, the skill's files under skill/, every call recorded."""
    script = {
        "rules": [
            {
                "turn": 1,
                "tool_use": [{"name": "read_file", "input": {"path": "skill/references/capitals.md"}}],
            },
            {
                "turn": 2,
                "last_user": "France: Paris",
                "tool_use": [
                    {
                        "name": "bash",
                        "input": {"command": "echo $((6*7)) key=${{ANTHROPIC_API_KEY:-none}}; ls skill"},
                    }
                ],
            },
            {
                "turn": 3,
                "last_user": "42 key=none",
                "tool_use": [{"name": "write_file", "input": {"path": "notes/a.txt", "content": "Paris?"}}],
            },
            {
                "turn": 4,
                "last_user": "wrote 6 bytes",
                "tool_use": [{"name": "bash", "input": {"command": "cat notes/a.txt; exit 3"}}],
            },
            {
                "turn": 5,
                "last_user": "exit code 3",
                "tool_use": [
                    {"name": "write_file", "input": {"path": "../escape.txt", "content": "x"}},
                    {"name": "write_file", "input": {"path": "skill/SKILL.md", "content": "x"}},
                ],
            },
            {
                "turn": 6,
                "reply": "Done.",
                "tool_use": [{"name": "finish", "input": {"answer": " Paris "}}],
            },
        ]
    }
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        proc = run_template(
            "tool-agent", tmp_path, {"id": "t1", "input": "Capital of France?"}, gateway_env(gw, lease.token)
        )
        exchanges = gw.release(lease.token)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
    assert len(exchanges) == 6
    system = exchanges[0].request["system"]
    assert (
        system.startswith("# Geography\nAnswer with the city name only.")
        and "skill/references/capitals.md" in system
    )
    results = [b for e in exchanges[1:] for b in e.request["messages"][-1]["content"]]
    assert results[0]["content"].startswith("France: Paris") and not results[0]["is_error"]
    assert (
        results[1]["content"].startswith("42 key=none\nSKILL.md\nreferences") and not results[1]["is_error"]
    )
    assert results[2]["content"] == "wrote 6 bytes to notes/a.txt"
    assert results[3]["content"] == "Paris?\n[exit code 3]" and results[3]["is_error"]
    assert results[4]["is_error"] and "outside the working directory" in results[4]["content"]
    assert results[5]["is_error"] and "read-only" in results[5]["content"]
    assert (tmp_path / "out" / "work" / "notes" / "a.txt").read_text() == "Paris?"
    assert not (tmp_path / "out" / "escape.txt").exists()
    events = _tool_events(tmp_path / "out")
    tools = [(e["name"], e["is_error"]) for e in events if e["event"] == "tool"]
    assert tools == [
        ("read_file", False),
        ("bash", False),
        ("write_file", False),
        ("bash", True),
        ("write_file", True),
        ("write_file", True),
    ]
    assert all("input" in e and "result" in e and "wall_s" in e for e in events if e["event"] == "tool")
    assert (
        events[0]["flags_read"] == {"api": None, "max_turns": None, "skill_loading": None}
        and events[0]["max_turns"] == 12
    )
    assert [e["event"] for e in events].count("step") == 6 and events[-1]["event"] == "finish"


def test_tool_agent_stops_at_its_turn_limit(tmp_path: Path):
    script = {
        "rules": [{"reply": "still thinking", "tool_use": [{"name": "bash", "input": {"command": "true"}}]}]
    }
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        env = gateway_env(gw, lease.token) | {"HO_FLAG_MAX_TURNS": "3"}
        proc = run_template("tool-agent", tmp_path, {"id": "t1", "input": "q"}, env)
        exchanges = gw.release(lease.token)
    assert proc.returncode == 0, proc.stderr
    assert len(exchanges) == 3 and (tmp_path / "out" / "answer.txt").read_text() == "still thinking"
    events = _tool_events(tmp_path / "out")
    assert events[0]["flags_read"]["max_turns"] == "3" and events[-1] == {
        **events[-1],
        "event": "max_turns",
        "turns": 3,
    }


@pytest.mark.parametrize("stream", ["0", "1"])
def test_openai_chat_template(tmp_path: Path, stream: str):
    script = {"rules": [{"system": "^# Geography", "last_user": "France", "reply": " Paris \n"}]}
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        env = gateway_env(gw, lease.token) | {"HO_FLAG_STREAM": stream}
        proc = run_template("openai-chat", tmp_path, {"id": "t1", "input": "Capital of France?"}, env)
        exchanges = gw.release(lease.token)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
    # The gateway recorded the canonical Messages body: the system message became `system`.
    assert len(exchanges) == 1 and exchanges[0].streamed == (stream == "1")
    assert exchanges[0].request["system"].startswith("# Geography")
    assert exchanges[0].request["messages"] == [{"role": "user", "content": "Capital of France?"}]
    events = [json.loads(x) for x in (tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["request", "response"] and events[1]["stop_reason"] == "stop"


def test_tool_agent_template_on_the_chat_api(tmp_path: Path):
    script = {
        "rules": [
            {
                "turn": 1,
                "tool_use": [{"name": "read_file", "input": {"path": "skill/references/capitals.md"}}],
            },
            {
                "turn": 2,
                "last_user": "France: Paris",
                "tool_use": [{"name": "bash", "input": {"command": "echo no; exit 7"}}],
            },
            {
                "turn": 3,
                "last_user": "^Error: no\n\\[exit code 7\\]",
                "tool_use": [{"name": "finish", "input": {"answer": "Paris"}}],
            },
        ]
    }
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        env = gateway_env(gw, lease.token) | {"HO_FLAG_API": "chat"}
        proc = run_template("tool-agent", tmp_path, {"id": "t1", "input": "Capital of France?"}, env)
        exchanges = gw.release(lease.token)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
    assert len(exchanges) == 3
    assert [t["name"] for t in exchanges[0].request["tools"]] == ["bash", "read_file", "write_file", "finish"]
    second = exchanges[1].request["messages"]
    assert second[1]["content"][0]["type"] == "tool_use" and second[2]["content"][0]["type"] == "tool_result"
    events = _tool_events(tmp_path / "out")
    assert events[0] == {**events[0], "event": "start", "api": "chat"}
    assert [e["event"] for e in events].count("step") == 3 and events[-1]["event"] == "finish"


def test_claude_code_template_without_cli(tmp_path: Path):
    env = {"PATH": str(tmp_path / "empty-bin")}
    proc = run_template("claude-code", tmp_path, {"id": "t", "input": "q"}, env)
    assert proc.returncode == 3 and "'claude' CLI is not on PATH" in proc.stderr


def test_codex_template_without_cli(tmp_path: Path):
    env = {"PATH": str(tmp_path / "empty-bin")}
    proc = run_template("codex", tmp_path, {"id": "t", "input": "q"}, env)
    assert proc.returncode == 3 and "'codex' CLI is not on PATH" in proc.stderr


def _with_stand_in_claude(tmp_path: Path, task_input: str, program: str) -> subprocess.CompletedProcess:
    """The claude-code template run on one task with ``program`` (Python) as its 'claude' CLI."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "claude"
    fake.write_text(f"#!{sys.executable}\n{program}")
    fake.chmod(0o755)
    task = {"id": "t", "input": task_input}
    return run_template("claude-code", tmp_path, task, {"PATH": f"{bin_dir}:/usr/bin:/bin"})


def test_claude_code_template_with_a_stand_in_cli(tmp_path: Path):
    # A stand-in 'claude' that checks the skill was installed where Claude Code looks for it,
    # reads the prompt on stdin and speaks stream-json (the real CLI: tests/test_claude_code.py).
    proc = _with_stand_in_claude(
        tmp_path,
        "Capital?",
        "import json, pathlib, sys\n"
        "skill = pathlib.Path('.claude/skills/geo-facts/SKILL.md')\n"
        "prompt = sys.stdin.read()\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'skills': ['geo-facts']}))\n"
        "print(json.dumps({'type': 'result', 'is_error': False, 'result': ' Paris (' + prompt + ') '"
        " if skill.is_file() else 'no skill'}))\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris (Capital?)"
    events = [json.loads(x) for x in (tmp_path / "out" / "trajectory.jsonl").read_text().splitlines()]
    check = next(e for e in events if e["event"] == "skill_check")
    assert check["listed"] is True and check["loaded"] is False  # listed, never invoked: said so
    assert any(e["event"] == "skill_not_loaded" and "never called" in e["why"] for e in events)


def test_claude_code_template_says_the_clis_api_error_and_caps_its_output(tmp_path: Path):
    """The CLI ends an API error (the gateway's 400: max_tokens 64,000 over the 32,000 cap, as
    claude-opus-4-8 asks) with an error result and exit 1: the harness said only "claude exited
    with 1", the cause was in the trajectory alone. It says the error now, and tells the CLI the
    cap (CLAUDE_CODE_MAX_OUTPUT_TOKENS), so that such a call is not made (QA)."""
    proc = _with_stand_in_claude(
        tmp_path,
        "q",
        "import json, os, sys\nsys.stdin.read()\n"
        "cap = os.environ.get('CLAUDE_CODE_MAX_OUTPUT_TOKENS')\n"
        "print(json.dumps({'type': 'result', 'is_error': True, 'result': f'API Error: 400 max_tokens: "
        "64000 is over the 32000 (told {cap})'}))\nsys.exit(1)\n",
    )
    assert proc.returncode == 1
    assert (
        "claude reported an error: API Error: 400 max_tokens: 64000 is over the 32000 (told 32000)"
        in proc.stderr
    )


@pytest.mark.parametrize("writes_file", [True, False])
def test_command_template(tmp_path: Path, writes_file: bool):
    skill = make_skill(tmp_path)
    (skill / "scripts").mkdir()
    body = "open(sys.argv[2], 'w').write(answer)" if writes_file else "print(answer)"
    (skill / "scripts" / "answer.py").write_text(
        "import json, sys\nanswer = json.load(open(sys.argv[1]))['input'].upper()\n" + body + "\n"
    )
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "run.py").write_text((TEMPLATES / "command" / "run.py").read_text())
    argv = ["python3", "{skill}/scripts/answer.py", "{task}"] + (["{out}/answer.txt"] if writes_file else [])
    (harness / "command.yaml").write_text("argv:\n" + "".join(f'  - "{a}"\n' for a in argv))
    task_file, out = tmp_path / "task.json", tmp_path / "out"
    task_file.write_text(json.dumps({"id": "t", "input": "paris"}))
    argv = [
        sys.executable,
        str(harness / "run.py"),
        "--task",
        str(task_file),
        "--skill",
        str(skill),
        "--out",
        str(out),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (out / "answer.txt").read_text().strip() == "PARIS"


def test_command_template_passes_on_exit_code(tmp_path: Path):
    (tmp_path / "skill").mkdir()
    proc = run_template("command", tmp_path, {"id": "t", "input": "q"}, {})
    assert proc.returncode == 2 and "answer.py" in proc.stderr  # python3 cannot open the missing script


def load_scorer():
    namespace: dict = {}
    exec(compile((TEMPLATES / "scorer.py").read_text(), "scorer.py", "exec"), namespace)
    return namespace["score"]


def test_default_scorer(tmp_path: Path):
    score = load_scorer()
    ok = score({"answer": "New  York"}, "  new york\n", tmp_path)
    assert ok == {"score": 1.0, "feedback": "correct: 'new york'", "soft": 1.0}
    bad = score({"answer": "Paris"}, "Lyon", tmp_path)
    assert (
        bad["score"] == 0.0 and "expected 'paris', got 'lyon'" in bad["feedback"] and 0 <= bad["soft"] < 0.5
    )
    near = score({"answer": "Paris"}, "Pariss", tmp_path)
    assert near["soft"] > 0.9
    assert "empty answer" in score({"answer": "x"}, "", tmp_path)["feedback"]
    assert score({"answer": 42}, "42", tmp_path)["score"] == 1.0
    long = score({"answer": "a" * 1000}, "b", tmp_path)
    assert len(long["feedback"]) < 500 and "[...]" in long["feedback"]


@pytest.mark.parametrize("stream", ["0", "1"])
def test_chat_template_on_the_standard_library_matches_the_sdk_variant(tmp_path: Path, stream: str):
    """`chat` (http.client) and `chat-sdk` (the anthropic SDK): the same request reaches the
    gateway, the same answer and trajectory events come out, streamed or not."""
    script = {"rules": [{"last_user": "France", "reply": "  Paris \n"}]}
    seen = {}
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        for name in ("chat", "chat-sdk"):
            lease = gw.lease("target", 1, name)
            env = gateway_env(gw, lease.token) | {"HO_FLAG_STREAM": stream}
            tmp = tmp_path / name
            tmp.mkdir()
            proc = run_template(name, tmp, {"id": "t1", "input": "Capital of France?"}, env)
            assert proc.returncode == 0, proc.stderr
            (ex,) = gw.release(lease.token)
            events = [json.loads(x) for x in (tmp / "out" / "trajectory.jsonl").read_text().splitlines()]
            seen[name] = (
                (tmp / "out" / "answer.txt").read_bytes(),
                ex.request,
                ex.streamed,
                [{k: v for k, v in e.items() if k != "t"} for e in events],
            )
    assert seen["chat"] == seen["chat-sdk"]
    assert seen["chat"][0] == b"Paris" and seen["chat"][2] == (stream == "1")


def test_chat_template_retries_like_the_sdk(tmp_path: Path):
    """A 529 with x-should-retry, then an answer: one retry; a 400 is not retried."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    statuses = [529, 200, 400, 200]
    hits: list[int] = []
    auth: list[tuple[str | None, str | None]] = []  # (anthropic-version, authorization) per request

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            auth.append((self.headers.get("anthropic-version"), self.headers.get("authorization")))
            status = statuses[len(hits)]
            hits.append(status)
            body = json.dumps(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Oslo"}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
                if status == 200
                else {"type": "error", "error": {"type": "x", "message": "no"}}
            ).encode()
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.send_header("retry-after", "0")
            if status == 529:
                self.send_header("x-should-retry", "true")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_port}",
            "ANTHROPIC_API_KEY": "k",
            "HARNESSOPT_TARGET_MODEL": "m",
        }
        proc = run_template("chat", tmp_path, {"id": "t", "input": "q"}, env)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / "out" / "answer.txt").read_text() == "Oslo" and hits == [529, 200]
        proc = run_template("chat", tmp_path, {"id": "t", "input": "q"}, env)
        assert proc.returncode == 1 and "BadRequestError" in proc.stderr and hits == [529, 200, 400]
        sdk = tmp_path / "sdk"
        sdk.mkdir()
        assert run_template("chat-sdk", sdk, {"id": "t", "input": "q"}, env).returncode == 0
        assert len(set(auth)) == 1, auth  # the SDK's version and auth headers, on every request
    finally:
        server.shutdown()
        server.server_close()


def _completion(text: str) -> dict:
    from tests.support.fake_openai import completion

    return completion(" " + text + " \n", finish="stop")


@pytest.mark.parametrize("stream", ["0", "1"])
def test_openai_chat_template_on_the_standard_library_matches_the_sdk_variant(tmp_path: Path, stream: str):
    """`openai-chat` (http.client) and `openai-chat-sdk` (the openai SDK) on a local Chat
    Completions endpoint: the same path, body and key header reach it, the same answer and
    trajectory events come out, streamed or not."""
    from tests.support.fake_openai import FakeOpenAIServer

    seen = {}
    with FakeOpenAIServer(lambda request: _completion("Paris")) as fake:
        for name in ("openai-chat", "openai-chat-sdk"):
            env = {
                "OPENAI_BASE_URL": fake.base_url,
                "OPENAI_API_KEY": "tok-1",
                "HARNESSOPT_TARGET_MODEL": "gpt-test",
                "HO_FLAG_STREAM": stream,
            }
            tmp = tmp_path / name
            tmp.mkdir()
            proc = run_template(name, tmp, {"id": "t1", "input": {"country": "France"}}, env)
            assert proc.returncode == 0, proc.stderr
            (request,) = fake.requests[-1:]
            events = [json.loads(x) for x in (tmp / "out" / "trajectory.jsonl").read_text().splitlines()]
            headers = {k.lower(): v for k, v in request["headers"].items()}
            seen[name] = (
                (tmp / "out" / "answer.txt").read_bytes(),
                request["path"],
                request["body"],
                request["stream"],
                headers["authorization"],
                headers["content-type"],
                [{k: v for k, v in e.items() if k != "t"} for e in events],
            )
    assert len(fake.requests) == 2 and seen["openai-chat"] == seen["openai-chat-sdk"]
    answer, path, body, streamed, auth, _, events = seen["openai-chat"]
    assert answer == b"Paris" and path == "/v1/chat/completions" and auth == "Bearer tok-1"
    assert streamed == (stream == "1") and body["messages"][0]["content"].startswith("# Geography")
    assert body["messages"][1] == {"role": "user", "content": '{"country": "France"}'}
    assert [e["event"] for e in events] == ["request", "response"] and events[1]["stop_reason"] == "stop"


def test_openai_chat_template_retries_like_the_sdk(tmp_path: Path):
    """Side by side on the same replies: a 503, a 429 with retry-after-ms, then an answer: two
    retries; a 400, or a 500 with x-should-retry: false, is not retried; three 503s give up."""
    error = {"error": {"message": "no", "type": "server_error", "param": None, "code": None}}
    cases = [
        ([(503, {}, error), (429, {"retry-after-ms": "10"}, error), (200, {}, _completion("Oslo"))], 0, None),
        ([(400, {}, error)], 1, "BadRequestError"),
        ([(500, {"x-should-retry": "false"}, error)], 1, "InternalServerError"),
        ([(503, {}, error)] * 3, 1, "InternalServerError"),
    ]
    for i, (replies, code, name) in enumerate(cases):
        outcome = {}
        for template in ("openai-chat", "openai-chat-sdk"):
            server = StatusServer(replies)
            try:
                env = {
                    "OPENAI_BASE_URL": server.url + "/v1",
                    "OPENAI_API_KEY": "k",
                    "HARNESSOPT_TARGET_MODEL": "m",
                }
                tmp = tmp_path / f"{template}-{i}"
                tmp.mkdir()
                proc = run_template(template, tmp, {"id": "t", "input": "q"}, env)
            finally:
                server.close()
            answer = tmp / "out" / "answer.txt"
            outcome[template] = (
                proc.returncode,
                server.hits,
                answer.read_text() if answer.exists() else None,
            )
            assert name in proc.stderr if name else proc.returncode == 0, proc.stderr
        assert outcome["openai-chat"] == outcome["openai-chat-sdk"], outcome
        assert outcome["openai-chat"][0] == code and len(outcome["openai-chat"][1]) == len(replies)
    assert outcome["openai-chat"][1][0] == ("/v1/chat/completions", 503)


def test_openai_chat_template_fails_loudly_on_api_error(tmp_path: Path):
    with Gateway(ScriptedModel.from_dict({"rules": [{"reply": "x"}]}), BudgetConfig()) as gw:
        proc = run_template(
            "openai-chat", tmp_path, {"id": "t", "input": "q"}, gateway_env(gw, "wrong-token")
        )
    assert proc.returncode == 1 and "AuthenticationError" in proc.stderr
    assert not (tmp_path / "out" / "answer.txt").exists()


def test_openai_chat_template_does_not_repeat_a_stream_cut_short(tmp_path: Path):
    """A stream that breaks off mid-chunk may be billed already: like the SDK, one request, exit 1."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            line = (
                b'data: {"choices": [{"index": 0, "delta": {"content": "Par"}, "finish_reason": null}]}\n\n'
            )
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line) + b"ff\r\nabc")  # then the connection drops
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_port}/v1",
            "OPENAI_API_KEY": "k",
            "HARNESSOPT_TARGET_MODEL": "m",
            "HO_FLAG_STREAM": "1",
        }
        for name in ("openai-chat", "openai-chat-sdk"):
            (tmp_path / name).mkdir()
            proc = run_template(name, tmp_path / name, {"id": "t", "input": "q"}, env)
            assert proc.returncode == 1 and not (tmp_path / name / "out" / "answer.txt").exists(), proc.stderr
    finally:
        server.shutdown()
        server.server_close()
    assert hits == ["/v1/chat/completions"] * 2


@pytest.mark.parametrize("template", ["chat", "openai-chat"])
def test_a_skill_md_with_a_bom_sends_its_body_not_its_front_matter(tmp_path: Path, template: str):
    """A SKILL.md that starts with a UTF-8 BOM (init and a round's check refuse one; a harness may
    be handed a skill from elsewhere): the templates looked for "---" at the very start, so the
    system prompt was the whole file, front matter included (QA)."""
    skill = make_skill(tmp_path)
    (skill / "SKILL.md").write_bytes(b"\xef\xbb\xbf" + (skill / "SKILL.md").read_bytes())
    script = {"rules": [{"system": "^# Geography\\nAnswer with the city name only\\.$", "reply": "Paris"}]}
    with Gateway(ScriptedModel.from_dict(script), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t1")
        task = {"id": "t1", "input": "Capital of France?"}
        proc = run_template(template, tmp_path, task, gateway_env(gw, lease.token), skill=skill)
        assert proc.returncode == 0, proc.stderr
        (exchange,) = gw.release(lease.token)
        assert "name:" not in json.dumps(exchange.request)
        assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
