"""The real Codex CLI (issue 23), through the real gateway's Responses API, against local fakes.

As the target: the ``codex`` template in the image variant (``sandbox build --with codex``),
the skill installed under CODEX_HOME/skills, the JSON events turned into the trajectory, the
session log kept, the skill check; its upstream is the strict Responses API fake (tool-call
pairing, part types per role), so what Codex sends and what the gateway makes of it must pass
it. A budget refusal reaches Codex as the Responses API's ``insufficient_quota`` error and the
gateway records it. Then a whole round by the CLI with Codex as target and as optimizer.
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

from harnessopt.config import BudgetConfig, Config, ModelConfig, RolloutConfig
from harnessopt.gateway.models.openai_api import OpenAIModel
from harnessopt.gateway.server import Gateway
from harnessopt.ledger import store as ledger
from harnessopt.protocols import RunSpec
from harnessopt.sandbox.docker.sandbox import DockerSandbox
from harnessopt.workspace.core import Workspace, templates_dir
from tests.support.cli import REAL_KEY, cli, git, write_example
from tests.support.codex import CodexScript, codex_image, command, say, tool_results
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_openai import FakeOpenAIServer, response

pytestmark = [pytest.mark.docker, pytest.mark.codex]

TARGET = "gpt-test-codex"
OPTIMIZER = "gpt-test-optimizer"
SKILL = (
    "---\nname: geo-facts\ndescription: Answers questions about capitals.\n---\nReply with the city only.\n"
)


@pytest.fixture
def image(docker_client: Any) -> str:
    return codex_image(docker_client)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ho-gwx-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _responses_upstream(requests: list[dict[str, Any]]) -> Any:
    """A Responses API model: read the skill first, then answer (the strict fake checks the input)."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        requests.append(request["body"])
        items = request["body"]["input"]
        if not any(i.get("type") == "function_call_output" for i in items):
            args = json.dumps({"cmd": 'cat "$CODEX_HOME/skills/geo-facts/SKILL.md"'})
            return response(None, [("call_skill1", "exec_command", args)], model=TARGET)
        return response("Paris", model=TARGET)

    return answer


def _run_target(image, docker_client, socket_dir, tmp_path, budget: BudgetConfig) -> tuple[Any, Any, Gateway]:
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text(SKILL)
    shutil.copytree(templates_dir() / "codex", tmp_path / "harness", ignore=shutil.ignore_patterns("*.yaml"))
    cfg = RolloutConfig(image=image, concurrency=1, memory_mb=1024, pids=256, timeout_s=180)
    sandbox = DockerSandbox(cfg, docker_client, warm=1)
    task = {"id": "t1", "input": "What is the capital of France?", "split": "train", "metadata": {}}
    bodies: list[dict[str, Any]] = []
    try:
        with FakeOpenAIServer(_responses_upstream(bodies)) as fake:
            upstream = OpenAIModel(REAL_KEY, fake.base_url, max_retries=0, wire_api="responses")
            run_cfg = Config(model=ModelConfig(provider="openai", target=TARGET), budget=budget)
            gw = Gateway.from_config(upstream, run_cfg, socket_dir=socket_dir)
            with gw:
                lease = gw.lease("target", 1, "t1")
                env = {"HARNESSOPT_TARGET_MODEL": TARGET}
                spec = RunSpec(task, tmp_path / "skill", tmp_path / "harness", env, lease, 180)
                out = sandbox.run(spec, tmp_path / "out")
                exchanges = gw.release(lease.token)
    finally:
        sandbox.close()
    return out, exchanges, gw


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "trajectory.jsonl").read_text().splitlines()]


def test_codex_as_the_target(image, docker_client, socket_dir, tmp_path) -> None:
    out, exchanges, gw = _run_target(image, docker_client, socket_dir, tmp_path, BudgetConfig())
    assert out.exit_code == 0, (out.error_class, out.stderr_tail[-3000:])
    assert (tmp_path / "out" / "answer.txt").read_text() == "Paris"
    assert [e.error for e in exchanges] == [None, None] and all(e.streamed for e in exchanges)
    assert all(e.request["model"] == TARGET for e in exchanges)  # canonical bodies, the target's model
    events = _events(tmp_path / "out")
    kinds = [e["event"] for e in events]
    check = next(e for e in events if e["event"] == "skill_check")
    assert check["listed"] is True and check["loaded"] is True, check
    call = kinds.index("tool_use")  # every call and its result, in order
    assert "SKILL.md" in events[call]["input"] and kinds[call + 1] == "tool_result"
    assert "Reply with the city only." in events[call + 1]["content"]
    assert kinds[-1] == "codex_exit" and "assistant_text" in kinds and "turn_completed" in kinds
    session = (tmp_path / "out" / "codex_session.jsonl").read_text()
    assert "function_call_output" in session and "Paris" in session  # Codex's own log, kept
    assert gw.total().calls == 2


def test_a_budget_refusal_reaches_codex_in_the_responses_format(
    image, docker_client, socket_dir, tmp_path
) -> None:
    out, exchanges, gw = _run_target(image, docker_client, socket_dir, tmp_path, BudgetConfig(max_calls=1))
    assert out.exit_code == 1 and not (tmp_path / "out" / "answer.txt").exists()
    assert gw.refusals == 1 and gw.total().calls == 1  # Codex did not retry the refusal
    assert exchanges[-1].error is not None and "budget.max_calls" in exchanges[-1].error
    error = next(e for e in _events(tmp_path / "out") if e["event"] == "codex_error")
    assert "Quota exceeded" in error["message"]  # insufficient_quota, as Codex reads it


def _word(body: dict[str, Any]) -> str:
    found = re.search(
        r"Say\s+the\s+word:\s+(\w+)", json.dumps(body["messages"])
    )  # as robust to spaces as a model
    return found[1] if found else "?"


def test_a_round_with_codex_as_target_and_optimizer(image, docker_client, tmp_path) -> None:
    """``harnessopt run --optimizer codex`` on a ``--template codex`` workspace, through the fake."""
    target = CodexScript(
        [
            command('cat "$CODEX_HOME/skills/echo-word/SKILL.md"'),
            say(lambda b: _word(b) if "tersely" in tool_results(b) else f"The word is {_word(b)}."),
        ]
    )
    sed = "sed -i 's/Respond politely to the user./Respond politely to the user. Answer tersely./'"
    optimizer = CodexScript(
        [
            command(f"{sed} skill/SKILL.md"),
            say("Terse answers\n\nThe answers carried a sentence around the word."),
        ]
    )

    def upstream(request: dict[str, Any]) -> dict[str, Any]:
        return (optimizer if request["body"].get("model") == OPTIMIZER else target)(request)

    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    with FakeAnthropicServer(upstream) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        assert (
            cli("init", ws, "--skill", skill, "--tasks", tasks, "--template", "codex", env=env).returncode
            == 0
        )
        cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
        cfg["model"]["target"] = TARGET
        cfg["optimizer"]["model"] = OPTIMIZER
        cfg["rollout"].update(image=image, memory_mb=1024, pids=256)
        (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
        git(ws, "commit", "-qam", "codex image")
        r = cli(
            "run", ws, "--rounds", "1", "--batch-size", "2", "--sandbox", "docker",
            "--optimizer", "codex", "-c", "gate.smoke=1",
            "-c", "gate.second_look=1",  # the default gate with a bank of 2 runs a task, not 11
            "-c", "search.explore=0",  # one proposal a round: the fake plays one Codex conversation
            env=env, timeout=900,
        )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (round1,) = ledger.past_rounds(Workspace.open(ws).repo)
    record = round1.manifest.optimizer
    assert record is not None and record.stopped_by == "done", round1.manifest
    assert round1.manifest.summary.startswith("Terse answers")
    assert "Answer tersely." in git(ws, "show", f"{round1.commit}:skill/SKILL.md")  # Codex edited the view
    m = round1.manifest
    assert m.status == "accepted" and m.delta is not None and m.delta > 0, m  # the gate decided
    assert len(m.fixed) == m.n, m  # every val task flipped: the terse skill is read and obeyed
    assert round1.manifest.tokens["optimizer"].calls == len(optimizer.calls) == 2  # through the gateway
    trajectory = next((ws / "trajectories").glob("*.md")).read_text()
    assert "skill_check" in trajectory and "exec_command" in trajectory
