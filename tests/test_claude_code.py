"""The real Claude Code CLI (issue 11.6), against the fake Messages API through the real gateway.

As the target: the ``claude-code`` template in the image variant (``sandbox build --with
claude-code``), the skill installed as a project skill, the stream-json transcript turned into
the trajectory, and the skill check. As the optimizer: ``--optimizer claude-code`` through the
real CLI, the agent in the optimizer's container editing the view. The upstream is the real
``AnthropicModel`` pointed at ``tests/support/fake_anthropic.py``, which refuses beta-only body fields
whose ``anthropic-beta`` header did not arrive, so these tests fail if the gateway drops what
the CLI's features depend on (its beta header, ``?beta=true``).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harnessopt.config import Config, ModelConfig, RolloutConfig
from harnessopt.gateway.http import api_key_of, estimate_input_tokens
from harnessopt.gateway.models.anthropic_api import AnthropicModel
from harnessopt.gateway.server import Gateway
from harnessopt.ledger import store as ledger
from harnessopt.protocols import RunSpec
from harnessopt.sandbox.docker.sandbox import DockerSandbox
from harnessopt.workspace.core import Workspace, templates_dir
from tests.support.claude_code import CliScript, claude_code_image, text, tool_use
from tests.support.cli import REAL_KEY, cli, git, write_example
from tests.support.fake_anthropic import FakeAnthropicServer

pytestmark = [pytest.mark.docker, pytest.mark.claude_code]

TARGET = "claude-sonnet-4-5"
OPTIMIZER = "claude-opus-4-1"
SKILL = (
    "---\nname: geo-facts\ndescription: Answers questions about capitals.\n---\nReply with the city only.\n"
)


@pytest.fixture
def image(docker_client: Any) -> str:
    return claude_code_image(docker_client)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ho-gwc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "trajectory.jsonl").read_text().splitlines()]


def _check_forwarded(requests: list[dict[str, Any]]) -> None:
    """What the CLI's features need reached upstream: its beta header and query, on every call."""
    messages = [r for r in requests if r["path"] == "/v1/messages"]
    assert messages, "the CLI made no model call"
    for r in messages:
        assert r["query"] == "beta=true", r["query"]
        assert "claude-code-" in r["headers"].get("anthropic-beta", ""), r["headers"]
    assert any("context_management" in r["body"] for r in messages)  # accepted: its beta arrived
    assert all(api_key_of(r["headers"]) == REAL_KEY for r in requests)  # the real key, upstream only


@pytest.mark.parametrize("invokes_skill", [True, False])
def test_claude_code_as_the_target(image, docker_client, socket_dir, tmp_path, invokes_skill) -> None:
    steps = [tool_use("Skill", {"skill": "geo-facts"})] if invokes_skill else []
    script = CliScript([*steps, text("Paris")])
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text(SKILL)
    shutil.copytree(
        templates_dir() / "claude-code", tmp_path / "harness", ignore=shutil.ignore_patterns("*.yaml")
    )
    cfg = RolloutConfig(image=image, concurrency=1, memory_mb=1024, pids=256, timeout_s=180)
    sandbox = DockerSandbox(cfg, docker_client, warm=1)
    task = {"id": "t1", "input": "What is the capital of France?", "split": "train", "metadata": {}}
    try:
        with FakeAnthropicServer(script) as fake:
            upstream = AnthropicModel(REAL_KEY, fake.base_url, max_retries=0)
            run_cfg = Config(model=ModelConfig(target=TARGET))  # the target lease may call TARGET only
            with Gateway.from_config(upstream, run_cfg, socket_dir=socket_dir) as gw:
                lease = gw.lease("target", 1, "t1")
                spec = RunSpec(
                    task,
                    tmp_path / "skill",
                    tmp_path / "harness",
                    {"HARNESSOPT_TARGET_MODEL": TARGET},
                    lease,
                    180,
                )
                out = sandbox.run(spec, tmp_path / "out")
                exchanges = gw.release(lease.token)
            requests = list(fake.requests)
    finally:
        sandbox.close()
    assert out.exit_code == 0, (out.error_class, out.stderr_tail[-3000:])
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
    _check_forwarded(requests)
    assert all(e.request.get("model") == TARGET and e.error is None for e in exchanges), [
        e.error for e in exchanges
    ]
    events = _events(tmp_path / "out")
    kinds = [e["event"] for e in events]
    init = next(e for e in events if e["event"] == "claude_init")
    assert "geo-facts" in init["skills"] and init["model"] == TARGET  # installed as a project skill
    check = next(e for e in events if e["event"] == "skill_check")
    assert check["listed"] is True and check["loaded"] is invokes_skill
    if invokes_skill:
        call = kinds.index("tool_use")
        assert events[call]["name"] == "Skill" and "tool_result" in kinds[call:]  # every call and result
        assert "skill_not_loaded" not in kinds
    else:
        assert (
            "never called the Skill tool"
            in next(e for e in events if e["event"] == "skill_not_loaded")["why"]
        )
    assert kinds[-1] == "claude_exit" and "claude_result" in kinds
    calls = [r["body"] for r in requests if r["path"] == "/v1/messages"]
    estimated = [estimate_input_tokens(b) for b in calls]  # text/4, as the gateway estimates
    # Quoted in docs/models.md: what one task of Claude Code costs in calls and input tokens.
    print(
        f"claude-code target task, skill invoked={invokes_skill}: {len(calls)} calls "
        f"({len(script.side_calls)} without tools, e.g. a title), input ~{estimated} tokens, "
        f"{[len(b['tools']) for b in calls]} tools, max_tokens {[b['max_tokens'] for b in calls]}"
    )


def _fake_upstream(optimizer_script: CliScript, heeds: str | None = None) -> Any:
    """The target (chat template, one call per task) answers; the optimizer's calls go to the CLI
    script. With ``heeds``: the target says the word it is asked for when its request carries that
    text (the skill the optimizer edited), and "unknown" otherwise; on any spacing of the question,
    as the memorised-answer check perturbs it (a fake that only knew the val inputs would be an
    answer table, and the check rejects it)."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        body = request["body"]
        if body.get("model") == OPTIMIZER:
            return optimizer_script(request)
        question = json.dumps(body.get("messages"))
        said = "Paris" if "France" in question else "unknown"
        if heeds is not None and heeds in json.dumps([body.get("system"), body.get("messages")]):
            said = next(iter(re.findall(r"Say\s+the\s+word:\s+(\w+)", question)), said)
        return {
            "id": "msg_target",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{"type": "text", "text": said}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": 2},
        }

    return answer


TERSE = "Answer tersely."


def _terse_script() -> CliScript:
    """Each optimizer conversation: read the skill, add TERSE to it, summarise."""
    old = "Respond politely to the user."
    edit = {"file_path": "/view/skill/SKILL.md", "old_string": old, "new_string": f"{old} {TERSE}"}
    return CliScript(
        [
            tool_use("Read", {"file_path": "/view/skill/SKILL.md"}),
            tool_use("Edit", edit),
            text("Terse answers\n\nTasks t1 and t2 rambled; the skill now asks for the bare answer."),
        ]
    )


def _run_one_round(tmp_path: Path, image: str, upstream: Any) -> tuple[Path, Any, list[dict[str, Any]]]:
    """``harnessopt run --rounds 1 --optimizer claude-code`` on the example in Docker: the workspace,
    the finished process and the optimizer's requests the fake upstream saw."""
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    with FakeAnthropicServer(upstream) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        assert cli("init", ws, "--skill", skill, "--tasks", tasks, env=env).returncode == 0
        cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
        cfg["model"]["target"] = TARGET
        cfg["optimizer"]["model"] = OPTIMIZER
        cfg["rollout"].update(image=image, memory_mb=1024, pids=256)
        (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
        git(ws, "commit", "-qam", "claude-code image")
        r = cli(
            "run", ws, "--rounds", "1", "--batch-size", "2", "--sandbox", "docker",
            "--optimizer", "claude-code", "-c", "gate.smoke=1", env=env, timeout=900,
        )  # fmt: skip
        optimizer_requests = [q for q in fake.requests if q["body"].get("model") == OPTIMIZER]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return ws, r, optimizer_requests


def test_claude_code_as_the_optimizer_edits_the_view_through_the_gateway(
    image, docker_client, tmp_path
) -> None:
    script = _terse_script()
    ws, r, optimizer_requests = _run_one_round(tmp_path, image, _fake_upstream(script))
    (round1,) = ledger.past_rounds(Workspace.open(ws).repo)
    record = round1.manifest.optimizer
    assert record is not None and record.stopped_by == "done", round1.manifest
    assert round1.manifest.summary.startswith("Terse answers")
    assert "skill/SKILL.md" in round1.manifest.changed, round1.manifest  # the CLI could edit
    assert TERSE in git(ws, "show", f"{round1.commit}:skill/SKILL.md")
    assert record.transcript and record.transcript.startswith(".harnessopt/")  # relative: a moved ws keeps it
    assert (ws / record.transcript).is_file()
    transcript = [json.loads(x) for x in (ws / record.transcript).read_text().splitlines() if x.strip()]
    tools_used = [
        b["name"]
        for e in transcript
        if e.get("type") == "assistant"
        for b in e["message"]["content"]
        if b.get("type") == "tool_use"
    ]
    assert tools_used == ["Read", "Edit"] and transcript[-1]["type"] == "result"
    assert round1.manifest.tokens["optimizer"].calls == len(optimizer_requests) >= 3  # through the gateway
    # the default chains 3 steps (search.explore null: an Opus conversation costs hundreds of Sonnet
    # runs), each a Claude Code conversation of its own, screened on its batch of 2 and the other 4
    # train tasks (screen_tasks null: a dear turn is screened widely, up to the train split); the
    # script's edit changes nothing the fake target's answers show, so each is dropped on train
    chose = "this run chains 3 steps a round (search.explore: null; a step, screened on 4 train tasks beyond"
    assert chose in r.stdout, r.stdout[-3000:]
    search = round1.manifest.search
    assert search is not None and {c.name for c in search.candidates} == {f"s{j}" for j in range(1, 4)}
    assert all(c.changed == ["skill/SKILL.md"] and "did not beat" in c.reason for c in search.candidates)
    _check_forwarded(optimizer_requests)


def test_a_chain_claude_code_built_is_validated_confirmed_and_committed(
    image, docker_client, tmp_path
) -> None:
    """The default round end to end with the real CLI as the optimizer: the target heeds the edit,
    so the chain's first step beats the incumbent on train, the two after it (the same edit again)
    do not beat it, and the chain's end goes through smoke, validation, the banked gate and its
    confirmation, and main moves to it."""
    ws, r, optimizer_requests = _run_one_round(tmp_path, image, _fake_upstream(_terse_script(), heeds=TERSE))
    repo = Workspace.open(ws).repo
    (round1,) = ledger.past_rounds(repo)
    m = round1.manifest
    assert round1.status == "accepted", (m.reason, r.stdout[-3000:])
    assert TERSE in git(ws, "show", "main:skill/SKILL.md")
    assert m.search is not None and m.search.validated == m.search.winners == ["s1"]
    by_name = {c.name: c for c in m.search.candidates}
    assert sorted(by_name, key=lambda n: int(n[1:])) == [f"s{j}" for j in range(1, 4)]
    assert by_name["s1"].chosen and by_name["s1"].reason.startswith("validated: the chain's end")
    assert all("did not beat s1 on train" in by_name[f"s{j}"].reason for j in range(2, 4))
    gate = m.gate.model_dump()  # a policy's own keys: extras of the record
    assert (gate["design"], gate["incumbent_runs"], gate["look"]) == ("banked", 11, 1)  # a clear win
    assert m.checks.memorised is not None and not m.checks.memorised.collapsed  # not an answer table
    assert m.confirmation is not None and m.confirmation.confirmed, m.confirmation
    refs = git(ws, "for-each-ref", "--format=%(refname)", "refs/harnessopt/").split()
    assert "refs/harnessopt/explore/head" not in refs  # an accept drops the kept head
    assert {f"refs/harnessopt/candidates/round-1/s{j}" for j in range(1, 4)} <= set(refs)
    assert m.tokens["optimizer"].calls == len(optimizer_requests) >= 9  # three conversations, the gateway's
    _check_forwarded(optimizer_requests)
