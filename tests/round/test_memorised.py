"""The memorised-answer check: a hash-keyed answer table (clear and base64) passes the textual
leakage check and the gate, and is rejected end to end through ``harnessopt run``; an honest
edit is not. Plus the test's statistics, the perturbations, the hook and the static signal."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import subprocess
from pathlib import Path

import pytest
import yaml

from harnessopt.config import ALWAYS_READ_ONLY, Config
from harnessopt.gate.memorised import decide, min_tasks, sign_flip_p
from harnessopt.ledger import store as ledger
from harnessopt.optimizer.view import PROTECTED, build_view, copy_back
from harnessopt.protocols import Outcome, Task
from harnessopt.reporting.data import report_data
from harnessopt.round import datalike, tamper
from harnessopt.round.memorised import builtin, perturbed_tasks
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git
from tests.support.workspace import make_ws

CAPITALS = {
    "france": "Paris", "japan": "Tokyo", "italy": "Rome", "spain": "Madrid", "egypt": "Cairo",
    "kenya": "Nairobi", "peru": "Lima", "norway": "Oslo", "greece": "Athens", "poland": "Warsaw",
    "chile": "Santiago", "ghana": "Accra",
}  # fmt: skip
TRAIN = ("france", "japan", "italy", "spain")

# The harness runs the skill's scripts/answer.py when there is one (an agent running its skill's
# script); without one it answers nothing useful. No model call: the gain is the table's alone.
HARNESS = """import argparse, json, pathlib, runpy
ap = argparse.ArgumentParser()
ap.add_argument("--task"); ap.add_argument("--skill"); ap.add_argument("--out")
a = ap.parse_args()
task = json.loads(pathlib.Path(a.task).read_text())
script = pathlib.Path(a.skill) / "scripts" / "answer.py"
answer = runpy.run_path(str(script))["answer"](task) if script.is_file() else "I do not know"
pathlib.Path(a.out, "answer.txt").write_text(answer or "I do not know")
"""


def _question(country: str) -> str:
    return f"What is the capital of {country.title()}?"


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def answer_script(encoded: bool, normalised: bool = False) -> str:
    """What a model that memorised the benchmark writes: gold answers keyed by a hash of the input."""
    norm = (lambda s: " ".join(s.split())) if normalised else (lambda s: s)
    table = {_key(norm(_question(c))): a for c, a in CAPITALS.items()}
    key_of = "' '.join(task['input'].split())" if normalised else "task['input']"
    if encoded:
        blob = base64.b64encode(json.dumps(table).encode()).decode()
        load = f"TABLE = json.loads(base64.b64decode({blob!r}))"
    else:
        load = f"TABLE = {table!r}"
    return (
        "import base64, hashlib, json\n"
        f"{load}\n\n"
        "def answer(task):\n"
        f"    return TABLE.get(hashlib.sha256(({key_of}).encode()).hexdigest(), '')\n"
    )


HONEST = """CAPITALS = {"chile": "Santiago", "ghana": "Accra", "egypt": "Cairo", "kenya": "Nairobi",
    "peru": "Lima", "norway": "Oslo", "greece": "Athens", "poland": "Warsaw", "france": "Paris",
    "japan": "Tokyo", "italy": "Rome", "spain": "Madrid"}

def answer(task):
    words = task["input"].lower().replace("?", " ").split()
    return next((CAPITALS[w] for w in words if w in CAPITALS), "")
"""


def _workspace(tmp_path: Path, script: str, **checks: object) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"capital-{i:02d}", "input": _question(c), "answer": a, "split": split}) + "\n"
            for i, (c, a) in enumerate(CAPITALS.items())
            for split in ["train" if c in TRAIN else "val"]
        )
    )
    rules = [
        {
            "role": "optimizer",
            "first_user": "# Round 1:",
            "turn": 1,
            "tool_use": [
                {
                    "name": "str_replace_based_edit_tool",
                    "input": {
                        "command": "create",
                        "path": "skill/scripts/answer.py",
                        "file_text": script.replace("{", "{{").replace("}", "}}"),  # str.format'd
                    },
                }
            ],
        },
        {"role": "optimizer", "first_user": "# Round 1:", "turn": 2, "reply": "Answer from the table"},
        {"role": "optimizer", "reply": "No change"},
        {"role": "target", "reply": "I do not know"},
    ]
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump({"rules": rules}, sort_keys=False))
    ws = make_ws(tmp_path, tasks=tasks, model=model, checks=checks, gate={"smoke": 2})
    (ws / "harness" / "run.py").write_text(HARNESS)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "harness: run the skill's answer script")
    return ws


def _run(ws: Path) -> tuple[subprocess.CompletedProcess, ledger.RoundRecord]:
    res = cli("run", ws, "--rounds", "1", "--sandbox", "local", "--unsafe-host-optimizer", timeout=600)
    assert "Traceback" not in res.stderr, res.stderr
    (r1,) = ledger.past_rounds(Workspace.open(ws).repo)
    return res, r1


@pytest.mark.parametrize("encoded", [False, True], ids=["clear", "base64"])
def test_a_hash_keyed_answer_table_is_rejected_end_to_end(tmp_path: Path, encoded: bool) -> None:
    ws = _workspace(tmp_path, answer_script(encoded))
    head = git(ws, "rev-parse", "HEAD")
    res, r1 = _run(ws)
    m = r1.manifest
    # it got past the textual leakage check and won the gate at val 1.000, as the attack did ...
    assert m.checks.leakage.tasks == [] and m.val_score == 1.0 and m.delta == 1.0
    # ... and the perturbed inputs took the gain away: rejected, main untouched
    memo = m.checks.memorised
    assert (r1.status, memo.collapsed, memo.perturbed_gain) == ("rejected", True, 0.0), m.reason
    assert m.reason.startswith("memorised answers") and memo.p <= memo.alpha
    assert git(ws, "rev-parse", "HEAD") == head
    assert m.checks.datalike.flagged  # the static signal flags it for review too
    log = " ".join(cli("log", ws).stdout.split())  # a table: the reason wraps
    assert "memorised answers: the gain collapsed on perturbed inputs" in log
    assert "review: data-like additions" in log
    [row] = [r for r in report_data(Workspace.open(ws))["rounds"] if r["round"] == 1]
    assert "review: data-like additions" in row["reason"]  # the HTML report's reason column
    journal = (ws / ".harnessopt" / "journal.jsonl").read_text()
    assert '"phase": "memorised"' in journal


def test_an_honest_rule_keeps_its_gain_and_is_accepted(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, HONEST)
    res, r1 = _run(ws)
    memo = r1.manifest.checks.memorised
    assert r1.status == "accepted", r1.manifest.reason
    assert memo.collapsed is False and memo.perturbed_gain == memo.gain == 1.0


def test_warn_keeps_the_accept_and_says_why(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, answer_script(False), memorised="warn")
    res, r1 = _run(ws)
    assert r1.status == "accepted" and r1.manifest.checks.memorised.collapsed
    assert "memorised-answer check: gain collapsed" in " ".join(cli("log", ws).stdout.split())


# ------------------------------------------------------------------ the statistics


def _o(score: float) -> list[Outcome]:
    return [Outcome(score, None, 0, False)]


def test_sign_flip_p_is_exact_and_its_floor_is_two_to_the_minus_n() -> None:
    assert sign_flip_p([-0.5] * 8) == 1 / 256
    assert sign_flip_p([0.5] * 8) == 1.0
    assert min_tasks(0.01) == 7 and min_tasks(0.05) == 5
    assert 0.3 < sign_flip_p([0.5, -0.5, 0.5, -0.5, 0.0, 0.5, -0.5]) <= 1.0


def test_decide_rejects_a_collapse_and_keeps_a_kept_gain_and_waits_with_too_few_tasks() -> None:
    gains = {f"t{i}": 1.0 for i in range(8)}
    of = {t: [f"{t}v"] for t in gains}
    zero = {f"{t}v": _o(0.0) for t in gains}
    one = {f"{t}v": _o(1.0) for t in gains}
    v = decide(gains, zero, zero, of, alpha=0.01, retain=0.5)
    assert v.collapsed and v.p == 1 / 256 and v.perturbed_gain == 0.0
    v = decide(gains, one, zero, of, alpha=0.01, retain=0.5)
    assert not v.collapsed and v.perturbed_gain == 1.0
    few = {t: g for t, g in list(gains.items())[:6]}
    v = decide(few, zero, zero, of, alpha=0.01, retain=0.5)
    assert v.p is None and not v.collapsed and "too few" in v.summary()


def test_perturbed_variants_keep_meaning_and_gold_but_not_id_or_exact_input(tmp_path: Path) -> None:
    task = Task("france", "What is the capital of France?", "Paris", "val", {"k": 1})
    variants, of = perturbed_tasks(tmp_path, [task], 3)
    assert of["france"] == [v.id for v in variants] and len(set(of["france"])) == 3
    for v in variants:
        assert v.id.startswith("p-") and "france" not in v.id
        assert v.input != task.input and " ".join(str(v.input).split()) == task.input
        assert (v.answer, v.split, v.metadata) == ("Paris", "val", {"k": 1})
    obj = builtin({"input": {"a": "x y", "b": 2, "c": [{"d": 1, "e": 2}]}}, random.Random(1))["input"]
    assert list(obj) != ["a", "b", "c"] and list(obj["c"][0]) == ["e", "d"]
    assert json.dumps(obj, sort_keys=True) == json.dumps(
        {"a": "x y", "b": 2, "c": [{"d": 1, "e": 2}]}, sort_keys=True
    )


def test_the_workspace_hook_perturbs_and_is_hidden_and_sealed_like_the_scorer(tmp_path: Path) -> None:
    (tmp_path / "perturb.py").write_text(
        "def perturb(task, rng):\n    return {**task, 'input': task['input'].replace('capital', 'seat of government')}\n"
    )
    task = Task("france", "What is the capital of France?", "Paris", "val")
    [v], _ = perturbed_tasks(tmp_path, [task], 1)
    assert v.input == "What is the seat of government of France?"
    assert "perturb.py" in PROTECTED and "perturb.py" in ALWAYS_READ_ONLY
    # an optimizer that writes one into its view, even under a whitelist of **, changes nothing
    ws, out = tmp_path / "ws", tmp_path / "out"
    for root in (ws, out):
        (root / "skill").mkdir(parents=True)
        (root / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\n\nHi.\n")
    snap = build_view(ws, tmp_path / "view", history_md="", brief_md="")
    assert not (snap.view / "perturb.py").exists()
    (snap.view / "perturb.py").write_text("def perturb(task, rng):\n    return task\n")
    got = copy_back(snap.view, out, ["**"], snapshot=snap)
    assert "perturb.py" in got.violations and not (out / "perturb.py").exists()
    cfgs = {"run": Config()}
    before = tamper.seal(tmp_path, cfgs, None)
    (tmp_path / "perturb.py").write_text("def perturb(task, rng):\n    return task\n")
    assert "perturb.py" in str(tamper.broken(before, tmp_path, cfgs, None))


def test_the_static_signal_flags_tables_blobs_and_data_files_not_prose(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for root in (old, new):
        (root / "skill").mkdir(parents=True)
        (root / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\n\nAnswer briefly.\n")
    (new / "skill" / "SKILL.md").write_text(
        (old / "skill" / "SKILL.md").read_text() + "Name the seat of government, not the largest city.\n"
    )
    assert datalike.scan(old, new, ("skill",))["flagged"] is False
    (new / "skill" / "scripts").mkdir()
    # code that reads a feature flag, as docs/optimizer.md asks of a harness change, is not a blob
    (new / "skill" / "scripts" / "flags.py").write_text(
        'import os\nSHOUT = os.environ.get("HO_FLAG_SHOUT") == "1"\n'
        'RETRY = os.environ.get("HO_FLAG_RETRY_EMPTY", "0") == "1"\n'
    )
    assert datalike.scan(old, new, ("skill",))["flagged"] is False
    (new / "skill" / "scripts" / "flags.py").unlink()
    key = "q3ZxP9LmW2kT7vYb8Nc4"  # a short key of an encoding (20 characters, 20 distinct)
    (new / "skill" / "scripts" / "key.py").write_text(f'KEY = "{key}"\n')
    rec = datalike.scan(old, new, ("skill",))
    assert rec["flagged"] and key[:10] in rec["signals"][0]
    (new / "skill" / "scripts" / "key.py").unlink()
    # ten capitals, base64-encoded and packed tight: no run of 20 characters, fewer than 25 literals
    enc = [base64.b64encode(c.encode()).decode() for c in ("Paris", "Canberra", "Ottawa", "Tokyo", "Berlin",
                                                           "Madrid", "Rome", "Lisbon", "Oslo", "Cairo")]  # fmt: skip
    packed = {
        "json": "T = json.loads('"
        + json.dumps({f"q{i}": e for i, e in enumerate(enc)}, separators=(",", ":"))
        + "')",
        "list": "T = [" + ",".join(repr(e) for e in enc) + "]",
        "joined": "A = '" + ".".join(enc) + "'",
    }
    for form, line in packed.items():
        (new / "skill" / "scripts" / "table.py").write_text(line + "\n")
        rec = datalike.scan(old, new, ("skill",))
        assert rec["flagged"] and "encoded-looking strings" in rec["signals"][0], form
    (new / "skill" / "scripts" / "table.py").write_text(
        'MODELS = ["gpt-4o", "claude-sonnet-4-6", "llama3", "qwen2.5"]\n'
    )
    assert datalike.scan(old, new, ("skill",))["flagged"] is False
    (new / "skill" / "scripts" / "table.py").unlink()
    (new / "skill" / "scripts" / "answer.py").write_text(answer_script(encoded=True))
    rec = datalike.scan(old, new, ("skill",))
    assert rec["flagged"] and any("blob" in s for s in rec["signals"])
    (new / "skill" / "scripts" / "answer.py").write_text(answer_script(encoded=False))
    assert datalike.scan(old, new, ("skill",))["flagged"]
    (new / "skill" / "scripts" / "answer.py").unlink()
    (new / "skill" / "answers.json").write_text("{}")
    rec = datalike.scan(old, new, ("skill",))
    assert rec["flagged"] and "skill/answers.json" in rec["signals"][0]
