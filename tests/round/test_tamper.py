"""Tamper check: the scorer, the tasks and the locked settings cannot change under a round."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harnessopt.config import Config
from harnessopt.ledger import store as ledger
from harnessopt.protocols import Proposal
from harnessopt.round import driver
from harnessopt.round.tamper import VOID_PREFIX, broken, seal
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import leaky_workspace


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "tasks").mkdir(parents=True)
    (root / "scorer.py").write_text("def score(task, answer, out_dir):\n    return 1.0\n")
    (root / "tasks" / "val.jsonl").write_text('{"id": "a", "input": "x", "answer": "y"}\n')
    (root / "harnessopt.yaml").write_text("mode: skill\n")
    return root


def test_nothing_changed_is_no_void(tmp_path: Path) -> None:
    root, cfg = _root(tmp_path), Config()
    before = seal(root, {"run": cfg}, None)
    assert broken(before, root, {"run": cfg}, None) is None


def test_each_locked_input_voids_when_it_changes(tmp_path: Path) -> None:
    root, cfg = _root(tmp_path), Config(rollout={"sandbox": "local"})
    before = seal(root, {"run": cfg}, None)
    (root / "tasks" / "val.jsonl").write_text('{"id": "a", "input": "x", "answer": "z"}\n')
    why = broken(before, root, {"run": cfg}, None)
    assert why is not None and why.startswith(VOID_PREFIX) and "tasks/val.jsonl" in why
    before = seal(root, {"run": cfg}, None)
    (root / "tasks" / "test.jsonl").write_text("")  # a new task file counts too
    assert "tasks/test.jsonl" in str(broken(before, root, {"run": cfg}, None))
    before = seal(root, {"run": cfg}, None)
    cfg.model.target = "another-model"  # in memory, as a plugin in this process could
    cfg.rollout.timeout_s = 9999
    why = str(broken(before, root, {"run": cfg}, None)).split(" changed")[0]
    assert "run.settings.model" in why and "run.settings.rollout" in why and "scorer.py" not in why


class TamperingOptimizer:
    """An optimizer plugin (``optimizer.backend: tests.round.test_tamper:TamperingOptimizer``): it runs in
    harnessopt's own process, so nothing stops it writing to the workspace. It makes the real fix in
    the view, and appends to the workspace's scorer.py (named by ``HO_TEST_TAMPER``)."""

    name = "tampering"

    def __init__(self, cfg: Any, **_kwargs: Any):
        self.cfg = cfg

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal:
        skill = view / "skill" / "SKILL.md"
        old = "Be friendly and helpful. Explain your answer so the user learns something."
        skill.write_text(skill.read_text().replace(old, "Reply with only the city name: no sentence."))
        with open(os.environ["HO_TEST_TAMPER"], "a") as f:
            f.write("\n# every answer is right\n")
        return Proposal(summary="Answer with the city name only")


def test_an_optimizer_that_edits_the_scorer_voids_its_round(tmp_path: Path, monkeypatch) -> None:
    """The round runs to its gate; the scorer changed under it, so it is recorded as failed (void)
    and main keeps the incumbent."""
    ws = leaky_workspace(
        tmp_path,
        "unused",
        small=True,
        optimizer={"backend": "tests.round.test_tamper:TamperingOptimizer"},
        rollout={"batch_size": 3},
        gate={"confirm": "none", "smoke": 2},
    )
    monkeypatch.setenv("HO_TEST_TAMPER", str(ws / "scorer.py"))
    head = git(ws, "rev-parse", "HEAD")
    said: list[str] = []
    [result] = driver.run(Workspace.open(ws), 1, said.append)
    assert (ws / "scorer.py").read_text().endswith("# every answer is right\n")  # the edit did happen
    assert result.status == "failed", (result.status, result.reason)
    assert result.reason.startswith(VOID_PREFIX) and "scorer.py" in result.reason
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "tag", "--list", "ho/round-*") == "ho/round-0"
    rec = ledger.find(Workspace.open(ws).repo, 1)
    assert rec.status == "failed" and rec.manifest.val_score is not None  # the gate ran; its verdict is void
    assert any(VOID_PREFIX in line for line in said)
