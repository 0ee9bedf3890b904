"""``run --help`` says what each flag does when it is not given, and what --mlflow writes to."""

from __future__ import annotations

import re

from tests.support.cli import cli


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_run_help_shows_defaults() -> None:
    out = cli("run", "--help", env={"COLUMNS": "400"})
    assert out.returncode == 0, out.stderr
    text = _flat(out.stdout)
    assert "--rounds ROUNDS rounds to run (default: 1)" in text
    assert "default: rollout.batch_size in harnessopt.yaml, shipped as 8" in text
    assert "default: rollout.concurrency in harnessopt.yaml, shipped as 2" in text
    assert "default: model.target in harnessopt.yaml, shipped as claude-sonnet-4-6" in text
    assert "default: budget.max_cost in harnessopt.yaml, shipped as unset" in text


def test_mlflow_help_names_the_sqlite_default() -> None:
    text = _flat(cli("run", "--help").stdout)
    assert "file store" not in text
    assert "sqlite:///WS/.harnessopt/mlflow.db" in text


def test_measuring_commands_show_their_rollout_defaults() -> None:
    for command in ("audit", "ablate", "replay"):
        text = _flat(cli(command, "--help").stdout)
        assert "default: rollout.sandbox in harnessopt.yaml, shipped as auto" in text, command
