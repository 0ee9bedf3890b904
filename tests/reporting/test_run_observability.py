"""A fake-server run seen from outside: dry run, projection against the calls made, status,
progress lines, and the run logged to a real local MLflow store read back through MLflow's client."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from harnessopt.config import OptimizerConfig
from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.ledger.store import RoundManifest
from tests.support.cli import REAL_KEY, cli, git, write_example
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.workspace import make_ws

SAY = r"Say the word: (?P<w>\w+)"
# The optimizer's tools run on this host with the local sandbox: say so where that must be said.
HOST = ["-c", "optimizer.unsafe_host=true"] if "unsafe_host" in OptimizerConfig.model_fields else []


def steady_script() -> dict[str, Any]:
    """Every round alike: the optimizer adds a line that changes nothing (rejected inside the dead
    zone, no flip to rerun); the target answers the words starting a-f right and the others wrong."""
    first = r"# Round \d+:"
    return {
        "rules": [
            {"first_user": first, "turn": 1, "tool_use": [{"name": "bash", "input": {"command": "printf '\\nBe kind.\\n' >> skill/SKILL.md"}}]},
            {"first_user": first, "turn": 2, "reply": "Add a kind line\n\nNo shared pattern."},
            {"last_user": r"Say the word: (?P<w>[a-f]\w*)", "reply": "{w}"},
            {"last_user": SAY, "reply": "I cannot say {w}."},
        ],
        "default": "?",
    }  # fmt: skip


@pytest.fixture
def run_env(tmp_path: Path):
    with FakeAnthropicServer(ScriptedModel.from_dict(steady_script())) as fake:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        skill, tasks = write_example(tmp_path)
        ws = tmp_path / "ws"
        assert cli("init", ws, "--skill", skill, "--tasks", tasks, env=env).returncode == 0
        cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
        cfg["model"]["target"] = "claude-haiku-4-5"  # a model with a list price: dollars are counted
        cfg["optimizer"]["model"] = "claude-sonnet-4-5"
        cfg["search"]["explore"] = 0  # one proposal a round, validated: the figures below are a round's
        (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
        git(ws, "commit", "-qam", "priced models")
        yield ws, env, fake


def _calls(ws: Path) -> list[int]:
    rows = json.loads(cli("log", ws, "--json").stdout)
    return [sum(u["calls"] for u in row["tokens"].values()) for row in rows]


def _projected(ws: Path) -> list[dict[str, Any]]:
    journal = (ws / ".harnessopt" / "journal.jsonl").read_text().splitlines()
    return [e["projected"] for e in map(json.loads, journal) if e.get("phase") == "run_start"]


def test_dry_run_projection_against_the_calls_made_and_mlflow(run_env) -> None:
    ws, env, fake = run_env
    head = git(ws, "rev-parse", "HEAD")
    dry = cli(
        "run", ws, "--rounds", "2", "--sandbox", "local", *HOST, "--batch-size", "4", "--dry-run", env=env
    )
    assert dry.returncode == 0, dry.stderr
    assert "total" in dry.stdout and "config priors" in dry.stdout and "nothing was run" in dry.stdout
    again = f"start it with: harnessopt run {ws} --rounds 2 --sandbox local {' '.join(HOST)} --batch-size 4\n"
    assert again in dry.stdout  # the run as asked for, every flag kept
    assert fake.requests == [] and git(ws, "rev-parse", "HEAD") == head  # no model call, no change
    assert git(ws, "status", "--porcelain") == "" and not (ws / ".harnessopt" / "journal.jsonl").exists()

    first = cli("run", ws, "--rounds", "1", "--sandbox", "local", *HOST, "--batch-size", "4", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "projection for 1 round(s)" in first.stdout
    assert "round 1 rejected | val 0.625 (Δ +0.000" in first.stdout
    # Not a terminal: plain progress lines with counts, pass rate, tokens and dollars.
    assert "round 1 rollout: 4/4 tasks, pass 50%" in first.stdout and "round 1 validation:" in first.stdout

    second = cli(
        "run", ws, "--rounds", "2", "--sandbox", "local", *HOST, "--batch-size", "4", "--mlflow", env=env
    )
    assert second.returncode == 0, second.stdout + second.stderr
    projected = _projected(ws)[-1]
    made = sum(_calls(ws)[1:])
    assert projected["basis"] == "1 measured round(s)" and projected["rounds"] == 2
    print(f"fake-server run: projected {projected['calls']} calls, made {made}")  # quoted in docs/report.md
    assert abs(projected["calls"] - made) <= 0.10 * made, (projected, made)
    status = cli("status", ws).stdout
    assert f"last run spent:     {made} calls" in status and "last run projected" in status
    # beside the calls, the tokens and the time against the projection (QA: a first run's time on
    # priors was 23-86x off, and status never said)
    spent = next(x for x in status.splitlines() if x.startswith("last run spent:"))
    assert re.search(r"\(([+-]\d+% (calls|tokens|time)(, )?){3}\)$", spent), spent

    _check_mlflow(ws, second.stdout)


def _check_mlflow(ws: Path, out: str) -> None:
    mlflow = pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(ws / '.harnessopt' / 'mlflow.db').resolve()}")
    (run,) = client.search_runs([client.get_experiment_by_name("harnessopt").experiment_id])
    assert f"mlflow: run {run.info.run_id}" in out and run.info.status == "FINISHED"
    assert "INFO" not in out  # MLflow's "Creating initial MLflow database tables..." (QA)
    assert (
        run.data.params["rollout.batch_size"] == "4" and run.data.params["model.target"] == "claude-haiku-4-5"
    )
    history = client.get_metric_history(run.info.run_id, "val_score")
    assert [(m.step, m.value) for m in history] == [(2, 0.625), (3, 0.625)]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "accepted")] == [0.0, 0.0]
    assert client.get_metric_history(run.info.run_id, "cost_usd")[0].value > 0
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "diffs")}
    assert artifacts == {"diffs/round-2.diff", "diffs/round-3.diff"}
    diff = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id, artifact_path="diffs/round-2.diff", tracking_uri=client.tracking_uri
        )
    )
    assert "+Be kind." in diff.read_text()
    report = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
    assert "report/report.html" in report or "report/report.json" in report


def test_mlflow_missing_server_is_one_line_before_any_call(run_env) -> None:
    """A refused connection is said within seconds: MLflow's own retries took minutes, silently."""
    ws, env, fake = run_env
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    t0 = time.monotonic()
    r = cli("run", ws, "--sandbox", "local", *HOST, "--mlflow", "http://127.0.0.1:9", env=env, timeout=120)
    assert time.monotonic() - t0 < 60
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("harnessopt:")]
    assert r.returncode == 2 and "MLflow at http://127.0.0.1:9 does not answer" in line
    assert len(line) < 200 and "--mlflow" in line
    assert "Traceback" not in r.stderr and fake.requests == []


def test_mlflow_refusals_make_no_mlflow_run_and_print_no_password(run_env) -> None:
    """A run refused at its start (here: the optimizer would run on this host unasked) made an
    MLflow run first, for a harnessopt run that never started; a store whose database driver is not
    installed "did not answer", and the URI's password was printed with it (QA)."""
    ws, env, fake = run_env
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    refused = cli("run", ws, "--sandbox", "local", "--mlflow", env=env)
    assert refused.returncode == 2 and "--unsafe-host-optimizer" in refused.stderr
    assert "mlflow:" not in refused.stdout and not (ws / ".harnessopt" / "mlflow.db").exists()
    uri = "postgresql://ho:s3cret@127.0.0.1:9/db"
    for dry in ((), ("--dry-run",)):
        driver = cli("run", ws, "--sandbox", "local", *HOST, "--mlflow", uri, *dry, env=env)
        (line,) = [x for x in driver.stderr.splitlines() if x.startswith("harnessopt:")]
        assert driver.returncode == 2 and "needs a database driver MLflow does not install" in line, (
            driver.stderr
        )
        assert "postgresql://ho:***@127.0.0.1:9/db" in line and "s3cret" not in driver.stderr
        assert "Traceback" not in driver.stderr and fake.requests == []


def test_mlflow_plain_folder_store_says_what_to_use(run_env, tmp_path: Path) -> None:
    """MLflow 3 refuses a file store; the line says so and what to give instead, no folder made."""
    ws, env, fake = run_env
    mlflow = pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    if int(mlflow.__version__.split(".")[0]) < 3:
        pytest.skip("MLflow before 3 still writes its file store")
    for uri in ((tmp_path / "mlruns").as_uri(), str(tmp_path / "bare")):
        for dry in ((), ("--dry-run",)):  # the dry run passed it, and named a run that refused (QA)
            r = cli("run", ws, "--sandbox", "local", *HOST, "--mlflow", uri, *dry, env=env, timeout=120)
            (line,) = [x for x in r.stderr.splitlines() if x.startswith("harnessopt:")]
            assert r.returncode == 2 and "no longer writes a plain-folder store" in line, r.stderr
            assert "sqlite:///" in line and "Traceback" not in r.stderr and fake.requests == []
    for dry in ((), ("--dry-run",)):  # a scheme MLflow opens no store at
        r = cli("run", ws, "--sandbox", "local", *HOST, "--mlflow", "ftp://x", *dry, env=env, timeout=120)
        assert r.returncode == 2 and "MLflow opens no tracking store at a ftp:// URI" in r.stderr, r.stderr
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "bare").exists()


def test_mlflow_names_databricks_and_refuses_a_database_in_memory(tmp_path: Path) -> None:
    """``--mlflow databricks`` (MLflow's name for the Databricks workspace its config names) was
    refused as a plain folder; ``sqlite://`` (a database in memory, gone when the run ends) was
    accepted (QA)."""
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    from harnessopt.errors import UserError
    from harnessopt.reporting.mlflow import check_server

    for uri in ("databricks", "databricks://my-profile", "sqlite:////tmp/x/mlflow.db", "sqlite:///mlflow.db"):
        check_server(uri)
    for uri in ("sqlite://", "sqlite:///", "sqlite:///:memory:"):
        with pytest.raises(UserError, match="is a database in memory: what the run logs is gone"):
            check_server(uri)
    # with no Databricks credentials: one line (MLflow's error runs over several, after a warning)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS")}
    r = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(make_ws(tmp_path)), "--sandbox", "local", "--mlflow", "databricks"],
        env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("harnessopt: MLflow at databricks did not answer") and "\\n" not in r.stderr


def test_mlflow_with_a_sqlite_uri_keeps_artifacts_out_of_the_working_tree(run_env, tmp_path: Path) -> None:
    """A run started inside the workspace with --mlflow sqlite:///... wrote its artifacts to
    ./mlruns there, and the next run refused its "uncommitted changes" (QA). The dry run also asks
    the server a --mlflow URI names, as the run does."""
    ws, env, _ = run_env
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    dry = cli("run", ws, "--dry-run", "--sandbox", "local", *HOST, "--mlflow", "http://127.0.0.1:9", env=env)
    assert dry.returncode == 2 and "MLflow at http://127.0.0.1:9 does not answer" in dry.stderr
    store = tmp_path / "stores" / "explicit.db"
    store.parent.mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", ".", "--sandbox", "local", *HOST, "--mlflow", f"sqlite:///{store}"],
        cwd=ws, env={**os.environ, **env}, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(ws, "status", "--porcelain", "--untracked-files=all") == ""
    assert any((store.parent / "mlartifacts").rglob("round-1.diff"))  # beside the store


def test_mlflow_stops_calling_a_store_that_failed_once(tmp_path: Path) -> None:
    """A tracking server gone mid-run: every later round and the run's end waited out MLflow's
    retries again (17 minutes), then a traceback (QA). One warning, then nothing more is sent."""
    from harnessopt.reporting.mlflow import MlflowRun
    from harnessopt.workspace.core import Workspace

    calls: list[str] = []

    class Gone:
        def __getattr__(self, name: str) -> Any:
            def call(*_a: Any, **_k: Any) -> None:
                calls.append(name)
                raise ConnectionError("the server went away")

            return call

    said: list[str] = []
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    run = MlflowRun(Workspace.open(make_ws(tmp_path)), "http://127.0.0.1:9", said.append)
    run.client, run.run_id = Gone(), "r1"
    result = SimpleNamespace(round=1, manifest=RoundManifest(round=1, status="rejected"))
    run.log_round(result)  # type: ignore[arg-type]
    run.log_round(result)  # type: ignore[arg-type]
    run.__exit__(None, None, None)
    assert calls == ["log_batch"] and len(said) == 1 and "the run goes on without it" in said[0]


def test_mlflow_gets_what_an_interrupted_round_spent(tmp_path: Path) -> None:
    """A round stopped by Ctrl-C records nothing, so no round's metrics carried what it spent
    (status did, MLflow did not: QA). The MLflow run, ended KILLED, gets it at step = round."""
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")
    import signal

    from mlflow.tracking import MlflowClient

    from tests.support.cli import start_cli, wait_for_phase

    # the manual optimizer waits for a person: the run reliably sits in round 1's propose step
    ws = make_ws(tmp_path, optimizer={"settle_s": 0.5, "wall_s": 60})
    proc = start_cli("run", ws, "--rounds", "1", "--sandbox", "local", "--optimizer", "manual", "--mlflow")
    try:
        wait_for_phase(ws, proc, "propose")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    client = MlflowClient(tracking_uri=f"sqlite:///{(ws / '.harnessopt' / 'mlflow.db').resolve()}")
    (run,) = client.search_runs([client.get_experiment_by_name("harnessopt").experiment_id])
    assert run.info.status == "KILLED"
    calls = client.get_metric_history(run.info.run_id, "unrecorded_calls")
    assert [m.step for m in calls] == [1] and calls[0].value >= 8  # at least round 1's rollout
    status = cli("status", ws).stdout
    assert f"interrupted round 1 spent $0.0000, {int(calls[0].value)} model call(s)" in status, status


@pytest.mark.parametrize("limit", [("--max-tokens", "20000"), ("--max-cost", "0.16")], ids=["tokens", "cost"])
def test_a_budgeted_run_ends_with_recorded_rounds_and_its_budget_spent(
    run_env, limit: tuple[str, str]
) -> None:
    """Each optimizer call reserves its max_tokens (8,192 here, about 14k tokens or $0.14 with its
    input) though a round spends about 1.7k tokens: a target run's call refused while one was in
    flight ended the run with 91% of the budget left; and room for the largest call at round start
    alone let the rollout spend it, so the next round's first optimizer call was refused, the round
    failed and the run exited 3 (QA). The run now ends before a round it cannot finish, exit 0."""
    ws, env, fake = run_env
    assert (
        cli("run", ws, "--rounds", "1", "--sandbox", "local", *HOST, "--batch-size", "4", env=env).returncode
        == 0
    )
    r = cli("run", ws, "--rounds", "8", "--sandbox", "local", *HOST, "--batch-size", "4", *limit, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(cli("log", ws, "--json").stdout)
    assert all(row["status"] in ("accepted", "rejected") for row in rows), [row["status"] for row in rows]
    assert len(rows) >= 3 and "not starting round" in r.stdout, (
        r.stdout
    )  # it ended on the plan, not on a refusal
    assert not any(
        "budget refusal" in kinds for row in rows for kinds in (row.get("failures") or {}).values()
    ), rows


def test_mlflow_ends_a_killed_runs_mlflow_run_and_gives_it_what_that_run_spent(tmp_path: Path) -> None:
    """What a run killed outright (SIGKILL) leaves: its MLflow run RUNNING, and its keeper's last
    count in .harnessopt/spend-live.json. The next run folded that count in and logged it as its
    own round 1's unrecorded spend, and the killed run stayed RUNNING (QA). Now the next run ends
    the killed one KILLED and gives it the count as it starts, so a run killed in its turn loses
    nothing either (QA); its own metrics are its own."""
    pytest.importorskip("mlflow", reason="MLflow is the optional extra harnessopt[mlflow]")

    from mlflow.tracking import MlflowClient

    from harnessopt.ledger import live_spend
    from tests.support.cli import start_cli, wait_for_phase

    ws = make_ws(tmp_path, optimizer={"settle_s": 0.5, "wall_s": 120})
    client = MlflowClient(tracking_uri=f"sqlite:///{(ws / '.harnessopt' / 'mlflow.db').resolve()}")
    # where the run would put it: MLflow's default is ./mlruns of the current directory
    exp = client.create_experiment(
        "harnessopt", artifact_location=(ws / ".harnessopt" / "mlartifacts").resolve().as_uri()
    )
    first = client.create_run(exp, run_name=ws.name, tags={"workspace": str(ws.resolve())}).info.run_id
    other = client.create_run(exp, run_name="elsewhere", tags={"workspace": "/elsewhere"}).info.run_id
    left = {"1": {"cost_usd": 0.42, "tokens": {"optimizer": {"calls": 3, "input": 900, "output": 90}}}}
    live_spend.path(ws).write_text(json.dumps({"pid": 1, "rounds": left}))
    # a second run, killed outright in its turn, once its keeper has counted its rollout
    proc = start_cli("run", ws, "--rounds", "1", "--sandbox", "local", "--optimizer", "manual", "--mlflow")
    try:
        wait_for_phase(ws, proc, "propose")
        assert client.get_run(first).info.status == "KILLED"  # as the second began
        assert [(m.step, m.value) for m in client.get_metric_history(first, "unrecorded_calls")] == [(1, 3.0)]
        assert [m.value for m in client.get_metric_history(first, "unrecorded_cost_usd")] == [0.42]
        deadline = time.monotonic() + 60
        while not live_spend.left(ws).get(1, {}).get("tokens"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    (second,) = [x.info.run_id for x in client.search_runs([exp]) if x.info.run_id not in (first, other)]
    r = cli("run", ws, "--rounds", "1", "--sandbox", "local", "--mlflow")
    assert r.returncode == 0, r.stdout + r.stderr
    assert client.get_run(second).info.status == "KILLED"
    assert client.get_run(other).info.status == "RUNNING"  # another workspace's run is not ours to end
    (calls,) = client.get_metric_history(second, "unrecorded_calls")
    assert calls.step == 1 and calls.value >= 8  # at least its round 1's rollout
    assert len(client.get_metric_history(first, "unrecorded_calls")) == 1  # not given twice
    (third,) = [x for x in client.search_runs([exp]) if x.info.run_id not in (first, second, other)]
    assert third.info.status == "FINISHED" and not client.get_metric_history(
        third.info.run_id, "unrecorded_calls"
    )
