"""A part of your own implements only the required members of its class in ``protocols`` and gets
the declared defaults for the rest; a part that lacks a member is refused when it is built."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harnessopt import registry
from harnessopt.config import Config, GateConfig, RolloutConfig
from harnessopt.errors import UserError
from harnessopt.gate import stats
from harnessopt.gateway.models import make_model
from harnessopt.ledger import store as ledger
from harnessopt.protocols import (
    ConfirmFn,
    GateDecision,
    GatePolicy,
    J,
    Outcomes,
    R,
    RunOutput,
    RunSpec,
    Sandbox,
    SandboxCall,
    Shell,
)
from harnessopt.rollout.executors import PooledExecutor
from harnessopt.rollout.runner import make_executor
from harnessopt.round import driver
from harnessopt.sandbox.local.sandbox import LocalSandbox
from harnessopt.workspace.core import Workspace
from tests.support.workspace import leaky_workspace


class MeanGate(GatePolicy):
    """A policy with only ``name`` and ``decide``: accept when the val mean rose."""

    name = "mean-rose"

    def __init__(self, cfg: GateConfig):
        self.cfg = cfg

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        ids = sorted(set(candidate) & set(incumbent))
        c, i = stats.task_means(candidate), stats.task_means(incumbent)
        delta = stats.mean([c[t] - i[t] for t in ids]) if ids else 0.0
        return GateDecision(delta > 0, "mean rose" if delta > 0 else "mean did not rise", len(ids),
                            stats.mean(list(c.values())), stats.mean(list(i.values())), delta, 0.0)  # fmt: skip


class HostSandbox(Sandbox):
    """A sandbox with only ``name``, ``run``, ``shell`` and ``close`` (it lends the local one's)."""

    name = "host-lent"

    def __init__(self, cfg: RolloutConfig, *, announce: Any = None):
        self.inner = LocalSandbox(cfg, isolation_mode="session")

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        return self.inner.run(spec, out_dir)

    def shell(self, view: Path) -> Shell:
        return self.inner.shell(view)

    def close(self) -> None:
        self.inner.close()


class CountingExecutor(PooledExecutor):
    """An executor of one's own: threads here, counting the jobs it was given."""

    name = "counting"
    max_retries = 0
    uses_run_sandbox = True
    jobs = 0

    def __init__(self, cfg: Config, *, sandbox: Sandbox, gateway_url: str):
        super().__init__(cfg.rollout.concurrency)
        self.sandbox = sandbox

    def submit(self, fn: Callable[[J], R], job: J, *, ahead: bool = False) -> Future[R]:
        type(self).jobs += 1
        return super().submit(fn, job, ahead=ahead)

    def sandbox_for(self, root: Path) -> SandboxCall:
        return self.sandbox.run

    def close(self) -> None:
        self.shutdown()


class NoFutile:
    """A policy that does not subclass GatePolicy and lacks its optional ``futile``."""

    name = "no-futile"

    def __init__(self, cfg: GateConfig):
        pass

    def decide(
        self, candidate: Outcomes, incumbent: Outcomes, confirm: ConfirmFn | None = None
    ) -> GateDecision:
        raise AssertionError("never built")


def test_a_minimal_policy_and_sandbox_get_the_declared_defaults() -> None:
    gate = registry.build("gate", "tests.test_registry:MeanGate", GateConfig())
    assert gate.futile({"a": []}, {"a": []}, ["b"]) is False  # the default: validation never stops early
    sandbox = registry.build("sandbox", "tests.test_registry:HostSandbox", RolloutConfig(), announce=print)
    try:
        assert sandbox.identity == "host-lent"  # the val cache keys by the name
        assert (sandbox.description, sandbox.gateway_uids, sandbox.shell_isolated) == ("", (), False)
        assert sandbox.task_python == "python3"
        assert sandbox.prewarm("/nowhere") is None
    finally:
        sandbox.close()


def test_a_part_that_lacks_a_member_is_refused_with_what_it_lacks() -> None:
    with pytest.raises(
        UserError, match=r"NoFutile has no bank_first_look, futile; subclass harnessopt.protocols.GatePolicy"
    ):
        registry.build("gate", "tests.test_registry:NoFutile", GateConfig())


def test_a_round_runs_with_a_minimal_policy_and_a_minimal_sandbox(tmp_path: Path) -> None:
    ws = leaky_workspace(
        tmp_path,
        "Reply with only the city name: no sentence.",
        small=True,
        rollout={
            "sandbox": "tests.test_registry:HostSandbox",
            "executor": "tests.test_registry:CountingExecutor",
            "batch_size": 3,
        },
        gate={"policy": "tests.test_registry:MeanGate", "confirm": "none", "smoke": 2},
    )
    [result] = driver.run(Workspace.open(ws), 1, lambda _m: None)
    assert result.status == "accepted", (result.status, result.reason)
    rec = ledger.find(Workspace.open(ws).repo, 1)
    assert rec.manifest.reason == "mean rose" and rec.manifest.n == 5  # MeanGate decided, on all of val
    used = registry.resolve("executor", "tests.test_registry:CountingExecutor")  # the class the run built
    assert used.jobs >= 3 + 2 * 5  # train, then val on both sides ran through it


def test_executors_are_registry_parts_chosen_by_name_or_dotted_path() -> None:
    assert registry.known("executor") == ["local", "ray"]
    assert RolloutConfig(executor="tests.test_registry:CountingExecutor").executor.endswith(
        ":CountingExecutor"
    )
    with pytest.raises(ValidationError, match="unknown executor 'nope'; known: local, ray"):
        RolloutConfig(executor="nope")
    cfg = Config.model_validate({"rollout": {"executor": "local", "concurrency": 3}})
    sandbox = LocalSandbox(cfg.rollout, isolation_mode="session")
    executor = make_executor(cfg, sandbox, "http://127.0.0.1:9")
    try:
        assert executor.name == "local" and executor.uses_run_sandbox
        assert executor.sandbox_for(Path(".")) == sandbox.run
    finally:
        executor.close()
        sandbox.close()


def test_the_model_providers_have_one_list_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.PARTS, "model", {**registry.PARTS["model"], "mine": "pkg.mod:Mine"})
    with pytest.raises(UserError, match="known providers: anthropic, openai, scripted, mine$"):
        make_model("gemini")
    # a setting that names one is said as a provider (it said "unknown model 'foo'": the model is
    # model.target, QA)
    with pytest.raises(
        ValidationError, match="model.provider\n.*unknown model provider 'foo'; known: anthropic"
    ):
        Config.model_validate({"model": {"provider": "foo"}})


class TakesNothing(GatePolicy):
    """A gate whose factory cannot take the config it is called with."""

    def __init__(self) -> None:
        pass


def raising_gate(cfg: GateConfig) -> GatePolicy:
    raise RuntimeError("no gate today")


def test_a_factory_of_ones_own_that_fails_is_one_line_dry_run_too(tmp_path: Path) -> None:
    """gate.policy=mod:G2 whose __init__ takes no config: a traceback through make_gate, exit 1,
    and the dry run passed it (QA). The dry run checks the signature without calling it; the run
    says what the factory raised, one line, exit 2, before any rollout."""
    from tests.support.cli import cli
    from tests.support.cli_errors import assert_unchanged, assert_user_error, snapshot

    ws = leaky_workspace(tmp_path, "Reply with only the city name.", small=True)
    before = snapshot(ws)
    bad = ["-c", "gate.policy=tests.test_registry:TakesNothing", "--sandbox", "local"]
    for dry in (("--dry-run",), ()):
        out = cli("run", ws, "--rounds", "1", *bad, "--unsafe-host-optimizer", *dry)
        assert_user_error(out, "gate 'tests.test_registry:TakesNothing'", "factory(cfg)")
    out = cli("run", ws, "--rounds", "1", "-c", "gate.policy=tests.test_registry:raising_gate", "--sandbox", "local",
              "--unsafe-host-optimizer")  # fmt: skip
    assert_user_error(out, "raised RuntimeError: no gate today", "fix the factory")
    assert_unchanged(ws, before)
    with pytest.raises(UserError, match="cannot be called as factory"):
        registry.check_factory("gate", "tests.test_registry:TakesNothing")
    registry.check_factory("gate", "tests.test_registry:MeanGate")  # one that takes it: nothing said
