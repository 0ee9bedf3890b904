"""A dollar budget needs a price for every model it must count (issue 20, item 5).

Without one, calls are counted as $0 and ``budget.max_cost`` never refuses anything (the review
saw 60 of 60 gpt-4o calls admitted under $0.01). ``run`` and ``run --dry-run`` refuse to start:
one line naming ``prices:``, exit code 2, nothing changed in the workspace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harnessopt.config import BudgetConfig, Config, ModelConfig, OptimizerConfig
from harnessopt.gateway.policy import unpriced_budget
from tests.support.cli import cli, git
from tests.support.cli_errors import assert_user_error, snapshot
from tests.support.workspace import make_ws


def openai_ws(tmp_path: Path, **extra: object) -> Path:
    """The demo workspace on the openai provider's gpt-4o (no built-in price), under $0.01."""
    ws = make_ws(tmp_path)
    cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
    cfg["model"].update(provider="openai", target="gpt-4o", script=None)
    cfg["optimizer"]["backend"] = "manual"
    cfg["budget"]["max_cost"] = 0.01
    cfg.update(extra)
    (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    git(ws, "commit", "-qam", "openai")
    return ws


@pytest.mark.parametrize("dry", [False, True])
def test_a_dollar_budget_with_an_unpriced_model_refuses_to_start(tmp_path: Path, dry: bool) -> None:
    ws = openai_ws(tmp_path)
    before = snapshot(ws)
    (ws / "STOP").write_text("")  # a run would remove this first: it must not get that far
    r = cli("run", ws, "--rounds", "1", *(["--dry-run"] if dry else []), env={"OPENAI_API_KEY": "sk-x"})
    assert_user_error(r, "prices:", "model.target", "'gpt-4o'", "budget.max_cost")
    (ws / "STOP").unlink()
    assert snapshot(ws) == before


def test_a_prices_entry_lets_it_start(tmp_path: Path) -> None:
    ws = openai_ws(tmp_path, prices={"gpt-4o": [2.5, 10.0]})
    r = cli("run", ws, "--rounds", "1", "--dry-run", env={"OPENAI_API_KEY": "sk-x"})
    assert r.returncode == 0, r.stderr


def test_which_roles_need_a_price() -> None:
    budget = BudgetConfig(max_cost=1.0)
    priced = Config(model=ModelConfig(target="claude-sonnet-4-5"), budget=budget)
    assert unpriced_budget(priced) is None
    assert unpriced_budget(Config(model=ModelConfig(target="gpt-4o"))) is None  # no dollar budget
    scripted = Config(model=ModelConfig(provider="scripted", target="demo-1"), budget=budget)
    assert unpriced_budget(scripted) is None  # costs nothing
    optimizer = Config(
        model=ModelConfig(target="claude-sonnet-4-5"),
        optimizer=OptimizerConfig(model="my-own"),
        budget=budget,
    )
    assert "optimizer.model 'my-own'" in (unpriced_budget(optimizer) or "")
    manual = optimizer.model_copy(update={"optimizer": OptimizerConfig(backend="manual", model="my-own")})
    assert unpriced_budget(manual) is None  # a person makes no model call
    assert unpriced_budget(optimizer, with_optimizer=False) is None  # audit, ablate, replay
