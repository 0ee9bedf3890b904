"""``harnessopt run WS --mlflow [URI]``: the run as an MLflow run, one step per round.

Params: the run's config, flattened (``rollout.batch_size``, ``gate.epochs``, ...). Metrics per
round (step = round number): val score, incumbent score, Δ, dead zone, fixed, broken, train pass
rate, tokens (per role and total), dollars, discarded writes, accepted (1/0). Artifacts: each
round's diff (``diffs/round-K.diff``) and, at the end, the HTML report with its plots (``report/``,
when matplotlib is installed; else its data as ``report/report.json``). Without a URI the runs go
to a local store in the workspace: ``WS/.harnessopt/mlflow.db`` (SQLite; MLflow 3 no longer writes
its plain-file store) with artifacts in ``WS/.harnessopt/mlartifacts``; ``mlflow ui
--backend-store-uri sqlite:///WS/.harnessopt/mlflow.db`` shows them. MLflow is the optional extra
``harnessopt[mlflow]``.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.ledger.journal import STATE_DIR
from harnessopt.ledger.manifest import pooled_dead_zone
from harnessopt.ledger.store import RoundManifest
from harnessopt.reporting.log import round_diff
from harnessopt.round.context import RoundResult
from harnessopt.workspace.core import Workspace

EXPERIMENT = "harnessopt"
# MLflow's own settings, unless the user set them: a call to a tracking server that went away
# fails within about a minute, not after its default retries (7, backing off, minutes)
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
FILE_STORE = (
    "--mlflow {uri}: this MLflow no longer writes a plain-folder store (its file store is in "
    "maintenance mode); give sqlite:///PATH/mlflow.db, a server's http://HOST:PORT, or no URI for the "
    "workspace's own store"
)
INSTALL_HINT = "--mlflow needs MLflow: pip install 'harnessopt[mlflow]' (or run without --mlflow)"


def default_uri(ws: Workspace) -> str:
    return f"sqlite:///{(ws.root / STATE_DIR / 'mlflow.db').resolve()}"


def artifact_location(ws: Workspace, uri: str | None = None) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store (the workspace's own, or
    the file a URI names), the tracking server's choice for http(s), else the workspace's ignored
    state folder. MLflow's default, ``./mlruns`` of the current directory, put them in the working
    tree of a run started inside the workspace, and the next run refused its uncommitted changes (QA)."""
    from urllib.parse import urlsplit

    if uri is None or uri == default_uri(ws):
        return (ws.root / STATE_DIR / "mlartifacts").resolve().as_uri()
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        return None
    if scheme == "sqlite" and (db := uri.removeprefix("sqlite:///")) and db != uri:
        return (Path(db).resolve().parent / "mlartifacts").as_uri()
    return (ws.root / STATE_DIR / "mlartifacts").resolve().as_uri()


def flat_params(data: Any, prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: dotted keys, values as text."""
    if isinstance(data, dict):
        out: dict[str, str] = {}
        for k, v in data.items():
            out.update(flat_params(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): json.dumps(data) if isinstance(data, list | dict) else str(data)}


def round_metrics(m: RoundManifest) -> dict[str, float]:
    """The numbers of one round MLflow keeps (missing ones, e.g. Δ of a no-op round, left out)."""
    values: dict[str, float | None] = {
        "val_score": m.val_score,
        "incumbent_score": m.incumbent_score,
        "delta": m.delta,
        "dead_zone": pooled_dead_zone(m),
        "fixed": len(m.fixed) if m.n else None,
        "broken": len(m.broken) if m.n else None,
        "train_pass_rate": m.train_passed / m.train_tasks
        if m.train_tasks and m.train_passed is not None
        else None,
        "cost_usd": m.cost_usd,
        "tokens": sum(u.input + u.output for u in m.tokens.values()),
        "calls": sum(u.calls for u in m.tokens.values()),
        "violations": len(m.violations),
        "accepted": 1.0 if m.status == "accepted" else 0.0,
    }
    for role, u in m.tokens.items():
        values[f"tokens_{role}"] = u.input + u.output
    return {k: float(v) for k, v in values.items() if v is not None}


def shown_uri(uri: str) -> str:
    """The URI as printed: a password in it (``postgresql://user:secret@host/db``) as ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(uri)
        if parts.password is None:
            return uri
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:  # no URI to parse (a bad port): printed as given, MLflow refuses it anyway
        return uri


def _hide(text: str, uri: str) -> str:
    """An error's text without the URI's password, if it quotes it."""
    from urllib.parse import urlsplit

    try:
        secret = urlsplit(uri).password
    except ValueError:
        return text
    return text.replace(secret, "***") if secret else text


# the stores MLflow's tracking client opens (a database through SQLAlchemy, a server, Databricks)
STORE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "databricks", "http", "https")


def _check_driver(uri: str) -> None:
    """The database driver SQLAlchemy would load for ``uri`` imports (MLflow brings neither
    PostgreSQL's nor MySQL's): else one UserError, before the run spends anything."""
    try:
        from sqlalchemy.engine import make_url

        make_url(uri).get_dialect().import_dbapi()
    except ImportError as e:
        raise UserError(
            f"--mlflow {shown_uri(uri)} needs a database driver MLflow does not install "
            f"({type(e).__name__}: {e}); pip install it, or give sqlite:///PATH/mlflow.db or no URI"
        ) from None
    except Exception:  # a URI SQLAlchemy cannot read: MLflow's own call says what is wrong
        return


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """What the run refuses of a tracking URI, asked without writing anything (``run --dry-run``
    too, whose "start it with" line then starts): a plain folder (MLflow 3 writes no file store), a
    scheme MLflow opens no store at, and an http(s) server that does not accept a connection within
    ``timeout_s``. Each one UserError."""
    from urllib.parse import urlsplit

    try:
        major = int(importlib.metadata.version("mlflow").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        raise UserError(INSTALL_HINT) from None
    except ValueError:  # a version that is no number: the run's own call says what is wrong
        major = 3
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0]  # postgresql+psycopg2: the dialect, then its driver
    if uri == "databricks":  # MLflow's own name for the workspace its config points at, no folder
        scheme = "databricks"
    if scheme == "sqlite" and parts.path in ("", "/", "/:memory:"):
        raise UserError(
            f"--mlflow {shown_uri(uri)} is a database in memory: what the run logs is gone when it "
            "ends; give sqlite:///PATH/mlflow.db, or no URI for the workspace's own store"
        )
    allowed = major < 3 or os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("1", "true")
    if scheme in ("", "file") and not allowed:
        raise UserError(FILE_STORE.format(uri=shown_uri(uri)))
    if scheme not in (*STORE_SCHEMES, "", "file"):
        raise UserError(
            f"--mlflow {shown_uri(uri)}: MLflow opens no tracking store at a {scheme}:// URI; give "
            "sqlite:///PATH/mlflow.db, a server's http://HOST:PORT, or no URI for the workspace's own store"
        )
    if scheme in ("postgresql", "mysql", "mssql"):  # its driver, imported, not connected
        _check_driver(uri)
    if scheme not in ("http", "https"):
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        socket.create_connection((parts.hostname or "", port), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise UserError(
            f"MLflow at {shown_uri(uri)} does not answer ({why}); start the tracking server or fix --mlflow URI"
        ) from None


class MlflowRun:
    """One MLflow run for one ``harnessopt run`` (a context manager; ``log_round`` per round)."""

    def __init__(self, ws: Workspace, uri: str | None, say: Callable[[str], None]):
        self.ws = ws
        self.uri = uri or default_uri(ws)
        self.say = say
        self.run_id = ""
        self._warned = False
        try:
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError(INSTALL_HINT) from None
        for name in ("mlflow", "alembic"):  # "Creating initial MLflow database tables..." and the
            logging.getLogger(name).setLevel(logging.WARNING)  # like came between the run's lines (QA)
        # its fallback from the Databricks SDK to MLflow's own credentials: a warning before the
        # one line that says what is wrong, when neither has any (QA)
        logging.getLogger("mlflow.utils.databricks_utils").setLevel(logging.ERROR)
        self._client_class = MlflowClient

    def __enter__(self) -> MlflowRun:
        check_server(self.uri)  # MLflow itself retries a refused connection for minutes, silently
        for name, value in HTTP_LIMITS.items():  # and a call to a server gone mid-run, for as long
            os.environ.setdefault(name, value)
        try:
            self.client = self._client_class(tracking_uri=self.uri)
            exp = self.client.get_experiment_by_name(EXPERIMENT)
            exp_id = (  # artifacts beside the store, never in the current directory
                exp.experiment_id
                if exp
                else self.client.create_experiment(
                    EXPERIMENT, artifact_location=artifact_location(self.ws, self.uri)
                )
            )
            self._end_killed_runs(exp_id)
            run = self.client.create_run(
                exp_id, run_name=self.ws.root.name, tags={"workspace": str(self.ws.root)}
            )
        except Exception as e:  # an unreachable server: say so before any model call is made
            if "MLFLOW_ALLOW_FILE_STORE" in str(e):
                raise UserError(FILE_STORE.format(uri=shown_uri(self.uri))) from None
            raise UserError(
                f"MLflow at {shown_uri(self.uri)} did not answer ({type(e).__name__}: {_first_line(e, self.uri)}); "
                "fix --mlflow URI"
            ) from e
        self.run_id = run.info.run_id
        self._journal_from = len(self.ws.journal.entries())  # this run's spend lines come after
        from mlflow.entities import Param

        params = flat_params(self.ws.cfg.model_dump(mode="json"))
        self.client.log_batch(self.run_id, params=[Param(k, v[:6000]) for k, v in sorted(params.items())])
        self.say(f"mlflow: run {self.run_id} in experiment '{EXPERIMENT}' at {shown_uri(self.uri)}")
        return self

    def _end_killed_runs(self, exp_id: str) -> None:
        """End this workspace's earlier MLflow runs still RUNNING as KILLED: a run killed outright
        (SIGKILL) never ended its own; only one command holds a workspace, so none is live. The
        newest gets what its run spent (the file it left, which this run folds into the journal
        later), now, not when this run ends: a run killed in its turn lost it (QA: it was logged
        under this run, and the killed one stayed RUNNING)."""
        runs = self.client.search_runs([exp_id], filter_string="attributes.status = 'RUNNING'")
        stale = [r.info.run_id for r in runs if r.data.tags.get("workspace") == str(self.ws.root)]
        if stale:  # search_runs lists the newest first
            self._log_spend(stale[0], [], set(), killed=True)
        for run_id in stale:
            self.client.set_terminated(run_id, "KILLED")

    def _log_spend(
        self, run_id: str, entries: list[dict[str, Any]], recorded: set[int], killed: bool = False
    ) -> None:
        """``unrecorded_*`` metrics at step = round of what ``entries``' spend lines paid for rounds
        that did not record, and with ``killed`` what the file a run killed outright left says
        (``log.unrecorded_spend``)."""
        from mlflow.entities import Metric

        from harnessopt.reporting.log import unrecorded_spend

        ts = _now_ms()
        metrics = [
            Metric(name, float(value), ts, k)
            for k, (usd, calls, tokens, _at_least) in unrecorded_spend(
                self.ws, entries, recorded, killed
            ).items()
            for name, value in (
                ("unrecorded_cost_usd", usd),
                ("unrecorded_calls", calls),
                ("unrecorded_tokens", tokens),
            )
        ]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def log_round(self, result: RoundResult) -> None:
        """Log a recorded round: its metrics at step = round number, its diff as an artifact. After a
        failure, nothing more is sent: a tracking server gone mid-run held the run in MLflow's
        retries for 17 minutes (QA)."""
        if self._warned:
            return
        try:
            from mlflow.entities import Metric

            ts = _now_ms()
            metrics = [Metric(k, v, ts, result.round) for k, v in round_metrics(result.manifest).items()]
            self.client.log_batch(self.run_id, metrics=metrics)
            self.client.log_text(
                self.run_id, round_diff(self.ws, result.round), f"diffs/round-{result.round}.diff"
            )
        except Exception as e:  # logging must never end a run that is spending money
            self._warn(e)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        status = "FINISHED" if exc_type is None else "KILLED" if exc_type is KeyboardInterrupt else "FAILED"
        if self._warned:  # the store failed once: the run ends without waiting on it again
            return
        try:
            self.ws.repo.git.clear_cache()  # Ctrl-C reached its git cat-file too: the report's reads need new ones
            self._log_unrecorded()
            self._log_report()
            self.client.set_terminated(self.run_id, status)
        except Exception as e:  # after a Ctrl-C too: the run's own exit line comes next
            self._warn(e)

    def _log_unrecorded(self) -> None:
        """What this run's attempts of rounds that never recorded spent (an interrupted round,
        one that failed before its record), as metrics at step = round: no round's metrics carry it
        (QA: the spend of an interrupted attempt was not in MLflow). Not what a killed run had
        spent, which this run folded in: that went to the killed run's MLflow run as this began."""
        from harnessopt.ledger import store as ledger

        entries = self.ws.journal.entries()[self._journal_from :]
        recorded = {r.round for r in ledger.past_rounds(self.ws.repo)}
        self._log_spend(self.run_id, [e for e in entries if not e.get("killed")], recorded)

    def _log_report(self) -> None:
        with tempfile.TemporaryDirectory(prefix="ho-mlflow-") as tmp:
            out = Path(tmp) / "report"
            try:
                from harnessopt.reporting.html import write_report

                write_report(self.ws, out)
            except UserError:  # no matplotlib: the report's data still goes along
                from harnessopt.reporting.data import report_data

                out.mkdir(parents=True, exist_ok=True)
                (out / "report.json").write_text(json.dumps(report_data(self.ws), indent=2, default=str))
            self.client.log_artifacts(self.run_id, str(out), "report")

    def _warn(self, e: Exception) -> None:
        if not self._warned:
            self.say(
                f"mlflow: logging failed ({type(e).__name__}: {_hide(str(e), self.uri)}); the run goes on without it"
            )
            self._warned = True


def _first_line(e: Exception, uri: str) -> str:
    """An MLflow error's first line, without the URI's password (Databricks' runs over several)."""
    return _hide((str(e).strip().splitlines() or [""])[0], uri)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
