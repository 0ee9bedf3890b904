"""A real model in the loop: SmolLM2-135M-Instruct on llama.cpp (one CPU thread) as the target.

Real tokens, real latency, real nondeterminism. ``.ci/llm_setup.sh`` installs the server and the
model (CI runs these); elsewhere they are skipped when not installed. The server is started once
for the module on a free loopback port (benchmarks/local_llm.py) and stopped at the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import anthropic
import git as gitpython
import openai
import pytest
import yaml

from benchmarks.local_llm import ALIAS, HARNESS_MAX_TOKENS, QUESTIONS, SKILL, LocalLLM, gguf_path
from harnessopt.config import BudgetConfig
from harnessopt.gateway.models import OpenAIModel
from harnessopt.gateway.server import Gateway
from harnessopt.ledger import store as ledger
from tests.support.cli import cli, git

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def llm() -> Iterator[LocalLLM]:
    try:
        import llama_cpp.server  # noqa: F401

        gguf_path()
    except (ImportError, FileNotFoundError) as e:
        if os.environ.get("CI"):
            pytest.fail(f"the local model is not installed ({e}); CI must run .ci/llm_setup.sh")
        pytest.skip(f"the local model is not installed ({e}); run .ci/llm_setup.sh")
    with LocalLLM() as server:
        yield server


def test_both_apis_reach_the_real_model_through_the_gateway(llm: LocalLLM) -> None:
    with Gateway(OpenAIModel("unused-local-key", llm.base_url), BudgetConfig()) as gw:
        lease = gw.lease("target", 1, "t")
        chat = openai.OpenAI(base_url=lease.base_url + "/v1", api_key=lease.token, max_retries=0)
        question = [{"role": "user", "content": "What is the capital of France? One word."}]
        done = chat.chat.completions.create(model=ALIAS, max_tokens=16, messages=question)  # type: ignore[arg-type]
        assert done.choices[0].finish_reason in ("stop", "length") and done.choices[0].message.content
        streamed = chat.chat.completions.create(model=ALIAS, max_tokens=16, messages=question, stream=True)  # type: ignore[arg-type]
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices).strip()
        messages = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0)
        reply = messages.messages.create(
            model=ALIAS,
            max_tokens=16,
            system="Answer in one word.",
            messages=question,  # type: ignore[arg-type]
        )
        assert reply.content[0].type == "text" and reply.content[0].text.strip()
        assert reply.stop_reason in ("end_turn", "max_tokens") and 0 < reply.usage.output_tokens <= 16
        exchanges = gw.release(lease.token)
    assert len(exchanges) == 3 and all(e.error is None for e in exchanges)
    assert all(e.input_tokens > 10 and e.output_tokens > 0 and e.wall_s > 0 for e in exchanges)
    assert exchanges[2].request["system"] == "Answer in one word."  # the canonical body was recorded


OPTIMIZER_SCRIPT = {
    "rules": [
        {
            "role": "optimizer",
            "turn": 1,
            "tool_use": [
                {
                    "name": "str_replace_based_edit_tool",
                    "input": {
                        "command": "str_replace",
                        "path": "skill/SKILL.md",
                        "old_str": "one or two words.",
                        "new_str": "one or two words. Never add a sentence around it.",
                    },
                }
            ],
        },
        {"role": "optimizer", "reply": "Ask for the bare city name\n\nAnswers carried extra words."},
    ],
    "default": "?",
}


def test_a_real_round_with_the_local_model_as_target(llm: LocalLLM, tmp_path: Path) -> None:
    """harnessopt run, one round: openai-chat harness -> gateway -> llama.cpp; a scripted optimizer."""
    skill = tmp_path / "capitals"  # the spec: the folder is named as the skill
    skill.mkdir()
    (skill / "SKILL.md").write_text(SKILL)
    splits = ["train"] * 3 + ["val"] * 6 + ["test"] * 3
    tasks = [
        {"id": country.lower(), "input": f"What is the capital of {country}?", "answer": city, "split": split}
        for (country, city), split in zip(QUESTIONS, splits, strict=True)
    ]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    ws = tmp_path / "ws"
    r = cli("init", ws, "--skill", skill, "--tasks", tmp_path / "tasks.jsonl", "--template", "openai-chat")
    assert r.returncode == 0, r.stderr
    run_py = ws / "harness" / "run.py"
    run_py.write_text(run_py.read_text().replace("MAX_TOKENS = 1024", f"MAX_TOKENS = {HARNESS_MAX_TOKENS}"))
    (ws / "optimizer.yaml").write_text(yaml.safe_dump(OPTIMIZER_SCRIPT))
    cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
    cfg["model"] |= {
        "provider": "openai",
        "target": ALIAS,
        "base_url": llm.base_url,
        "api_key_env": "LOCAL_LLM_KEY",
        "script": "optimizer.yaml",
    }
    # A scripted optimizer: harmless on the host (the local sandbox keeps the test quick).
    cfg["optimizer"] |= {
        "provider": "scripted",
        "model": "scripted-optimizer",
        "max_turns": 4,
        "unsafe_host": True,
    }
    cfg["rollout"] |= {"sandbox": "local", "batch_size": 2, "concurrency": 1, "timeout_s": 300}
    cfg["gate"] |= {"smoke": 2, "epochs": 1}
    cfg["search"] |= {"explore": 0}  # one proposal a round: the script plays one optimizer conversation
    (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "local model as target")

    r = cli("run", ws, "--rounds", "1", env={"LOCAL_LLM_KEY": "unused"}, timeout=1800)
    assert r.returncode in (0, 3), r.stdout + r.stderr  # 3: the round failed, still a real round
    out = r.stdout + r.stderr
    assert out.count(f"no list price for model '{ALIAS}'") == 1, out  # said once
    rounds = ledger.rounds(gitpython.Repo(ws))
    assert [x.round for x in rounds][-1] == 1
    manifest = rounds[-1].manifest
    target = manifest.tokens["target"]
    assert target.calls >= 2 + 6 and target.input > 0 and target.output > 0  # real usage
    assert manifest.tokens["optimizer"].calls == 2 and manifest.cost_usd == 0
    trajectories = list((ws / ".harnessopt").rglob("trajectories/*.md"))
    assert trajectories, "the optimizer's view had no trajectories"
    text = trajectories[0].read_text()  # what the optimizer read: the real model's call and answer
    assert f"target_model: {ALIAS}" in text and "## Call 1" in text and f"- model: {ALIAS}" in text
    status = cli("status", ws)
    assert status.returncode == 0 and f"no list price for model '{ALIAS}'" in status.stdout + status.stderr
