"""Wiring: the gateway, sandbox, runner, optimizer and gate one run uses, started and stopped together."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harnessopt.config import Config
from harnessopt.errors import UserError
from harnessopt.gate.policy import make_gate
from harnessopt.gateway.models import missing_key, model_for, optimizer_model_config, optimizer_model_for
from harnessopt.gateway.policy import unpriced_budget
from harnessopt.gateway.server import Gateway
from harnessopt.ledger.journal import STATE_DIR, Journal
from harnessopt.ledger.live_spend import Keeper
from harnessopt.optimizer import make_optimizer
from harnessopt.protocols import Announce, GatePolicy, Optimizer, Proposal, Sandbox
from harnessopt.rollout.executors import PooledExecutor
from harnessopt.rollout.run_cache import RoundStore, proposal_settings, rollout_settings
from harnessopt.rollout.runner import Runner, make_executor
from harnessopt.round import stop
from harnessopt.sandbox import make_sandbox
from harnessopt.util.hardening import drop_secrets_from_environ
from harnessopt.workspace.scorer_proc import ScorerProcess

WORKERS_JOIN_S = 10.0  # how long a stopped run waits in all for its task threads' clean-up

if TYPE_CHECKING:
    import anthropic


def _join(pooled: list[PooledExecutor]) -> None:
    """Wait, ``WORKERS_JOIN_S`` at most for each, for the executors' task threads to end."""
    for executor in pooled:
        executor.join(WORKERS_JOIN_S)


@dataclass
class Services:
    """Everything a round needs, built once per ``harnessopt run``."""

    cfg: Config
    gateway: Gateway
    sandbox: Sandbox
    runner: Runner
    optimizer: Optimizer | None
    gate: GatePolicy
    scratch: Path
    state_dir: Path
    store: RoundStore
    spend: Keeper
    """Keeps ``.harnessopt/spend-live.json`` with the spend of the rounds in progress (what a killed run spent)."""
    rates: dict[str, float] = field(default_factory=dict)
    """The projection's rates the run started with (``reporting.projection``): what a target run and
    an optimizer turn cost, for what the budget still pays for (``search.budget``); none: no plan."""
    deadline: float | None = None
    """The run's wall-clock deadline (``time.monotonic()``, from ``budget.max_hours``), or None."""
    optimizer_s: dict[int, float] = field(default_factory=dict)
    """Seconds the optimizer's conversations took, per round (every candidate and step)."""

    def seconds_left(self) -> float | None:
        """Seconds to the run's deadline (0 once past it), or None without ``budget.max_hours``."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal:
        assert self.optimizer is not None, "services were opened without an optimizer"
        t0 = time.monotonic()
        try:
            return self.optimizer.propose(view, brief, round_no)
        finally:
            self.optimizer_s[round_no] = self.optimizer_s.get(round_no, 0.0) + time.monotonic() - t0

    def usage_of_round(self, k: int) -> RoundUsage:
        """Calls and tokens per role, and dollars, that round ``k`` spent so far."""
        return usage_of_round(self.gateway, k)

    def write_spend(self, journal: Journal, k: int) -> None:
        """Round ``k``'s spend so far as its journal ``spend`` line (what ``status`` shows of a round
        that never recorded), leaving the live file in the same step."""
        spent = self.usage_of_round(k)
        with self.spend.ending(k):
            journal.write(k, "spend", cost_usd=spent.cost_usd, tokens=spent.tokens)


def usage_of_round(gateway: Gateway, k: int) -> RoundUsage:
    """Calls and tokens per role, and dollars, that round ``k`` spent so far on ``gateway``."""
    tokens: dict[str, dict[str, int]] = {}
    cost = 0.0
    for (role, round_no), u in gateway.usage().items():
        if round_no == k:
            tokens[role] = {"calls": u.calls, "input": u.input_tokens, "output": u.output_tokens}
            if u.estimated_calls:
                tokens[role]["estimated_calls"] = u.estimated_calls
            cost += u.cost_usd
    return RoundUsage(tokens, round(cost, 6))


@dataclass(frozen=True)
class RoundUsage:
    tokens: dict[str, dict[str, int]]  # role -> {"calls", "input", "output"[, "estimated_calls"]}
    cost_usd: float


def preflight(root: Path, cfg: Config) -> None:
    """What a run refuses at its start before it spends, asked by ``run --dry-run`` too, whose
    "start it with" line should be a command that starts: a scripted model's script reads (a
    model of an API is not made: that imports its SDK, a second of CPU), an optimizer whose
    tools would run on this host is allowed there, and a command optimizer has its argv (an API key
    a dry run does not need: ``unset_keys`` says what to set). Builds nothing that calls out or
    holds a process."""
    optimizer = cfg.optimizer.backend != "manual"  # a person makes no model call
    from harnessopt import registry

    parts = {"sandbox": cfg.rollout.sandbox, "optimizer": cfg.optimizer.backend, "model": cfg.model.provider,
             "gate": cfg.gate.policy, "executor": cfg.rollout.executor}  # fmt: skip
    for kind, name in parts.items():  # a user's part takes its kind's arguments (QA: a traceback, exit 1)
        registry.check_factory(kind, name)  # type: ignore[arg-type]
    if cfg.model.provider == "scripted":
        model = model_for(cfg.model, root, needs_tools=cfg.template == "tool-agent", warn=lambda _m: None)
        if optimizer and cfg.optimizer_provider == "scripted":
            optimizer_model_for(cfg, root, model)
    from harnessopt.optimizer import check_placement
    from harnessopt.sandbox import auto_is_local

    local = cfg.rollout.sandbox == "local" or (
        cfg.rollout.sandbox == "auto"
        and ((optimizer and not cfg.optimizer.unsafe_host) or bool(_template_clis(cfg.template)))
        and bool(auto_is_local(cfg.rollout))  # the engine asked, as the run asks it
    )
    if local:
        check_placement(cfg.optimizer, on_host=True, announce=lambda _m: None)
        check_template_clis(cfg.template)
    if cfg.rollout.sandbox == "docker" and (why_not := auto_is_local(cfg.rollout)):
        raise UserError(why_not)  # no engine, a missing image, one with no runner in it
    # the run's first step: a dry run said "start it with" for a cluster address that does not answer
    if cfg.rollout.executor == "ray":
        from harnessopt.rollout.ray.executor import check_reachable

        check_reachable(cfg.ray.address or os.environ.get("RAY_ADDRESS") or None)
    from harnessopt.optimizer.command import check_command, executable_of

    check_command(cfg.optimizer.backend, cfg.optimizer.command)
    agent = executable_of(cfg.optimizer.backend, cfg.optimizer.command)
    if cfg.rollout.sandbox == "local" and agent and shutil.which(agent) is None:  # where the run probes
        raise UserError(
            f"optimizer {cfg.optimizer.backend}: {agent!r} is not an executable on this host's PATH, "
            "where --sandbox local runs the agent; install it or fix the setting"
        )


def check_template_clis(template: str) -> None:
    """Under the local sandbox a template's harness runs its CLI agent (claude-code, codex) from
    this host's PATH: without it every task would fail, on the harness's line that names the
    Docker image. A UserError with the install command instead."""
    for variant, (cli, hint) in _template_clis(template).items():
        if shutil.which(cli) is None:
            raise UserError(
                f"template {template} runs the {cli!r} CLI, which is not on this host's PATH, where "
                f"the local sandbox runs the tasks; {hint}, or run in Docker with the image `harnessopt "
                f"sandbox build --with {variant}` makes"
            )


def _template_clis(template: str) -> dict[str, tuple[str, str]]:
    """The CLI agents a template's harness runs (its ``image_with`` variants): variant -> (its
    executable, how to install it on this host)."""
    from harnessopt.optimizer import claude_code, codex
    from harnessopt.optimizer.command import PRESETS
    from harnessopt.workspace.templates import template_meta

    on_host = {"claude-code": claude_code.MISSING_HINT[1], "codex": codex.MISSING_HINT[1]}
    return {
        v: (PRESETS[v], on_host[v]) for v in template_meta(template).get("image_with") or () if v in on_host
    }


def unset_keys(cfg: Config) -> list[str]:
    """The API keys the run's models need that the environment does not hold (the target's, and the
    optimizer's unless a person makes its turns): what a dry run says to set before the run."""
    configs = [cfg.model] + ([optimizer_model_config(cfg)] if cfg.optimizer.backend != "manual" else [])
    return list(dict.fromkeys(name for c in configs if (name := missing_key(c))))


@contextmanager
def open_services(
    root: Path,
    cfg: Config,
    say: Announce,
    *,
    progress: Any = None,
    with_optimizer: bool = True,
    keep_rollouts: bool = True,
) -> Iterator[Services]:
    """Build and start the parts; everything started is stopped again, also on Ctrl-C or a crash."""
    if unpriced := unpriced_budget(cfg, with_optimizer):  # a dollar budget no call would reach
        raise UserError(unpriced)
    state_dir = root / STATE_DIR
    model = model_for(cfg.model, root, needs_tools=cfg.template == "tool-agent", warn=say)
    # The optimizer's upstream (the target's unless optimizer.provider/base_url/api_key_env say otherwise).
    calls_model = with_optimizer and cfg.optimizer.backend != "manual"
    optimizer_model = optimizer_model_for(cfg, root, model) if calls_model else None
    # The models hold the keys now: no child started from here on may inherit them by accident.
    drop_secrets_from_environ()
    for name in {cfg.model.api_key_env, cfg.optimizer.api_key_env} - {None}:
        os.environ.pop(str(name), None)
    with ExitStack() as stack:
        # In its own processes, with a deadline and a memory limit; a broken import stops here.
        r = cfg.rollout
        scorer = ScorerProcess(root / "scorer.py", timeout_s=r.scorer_timeout_s, memory_mb=r.scorer_memory_mb)
        stack.callback(scorer.close)
        # On the way out, after the sandbox has stopped the tasks still running (Ctrl-C, SIGTERM, a
        # crash): their threads finish their own clean-up before the process exits.
        pooled: list[PooledExecutor] = []
        stack.callback(_join, pooled)
        sandbox = make_sandbox(cfg.rollout, announce=say)
        if sandbox.name == "local":  # auto may have fallen back to it
            check_template_clis(cfg.template)
        if sandbox.description:  # a weak sandbox warned already
            say(f"sandbox: {sandbox.description}")
        stack.callback(sandbox.close)
        socket_dir = Path(tempfile.mkdtemp(prefix="ho-gw-"))  # short path: Unix sockets cap it at 108 bytes
        stack.callback(shutil.rmtree, socket_dir, True)
        gateway = stack.enter_context(
            Gateway.from_config(
                model,
                cfg,
                socket_dir=socket_dir,
                optimizer_model=optimizer_model,
                peer_uids=sandbox.gateway_uids,  # the optimizer's container, say
            )
        )

        def spent(k: int) -> tuple[float, dict[str, dict[str, int]]]:
            u = usage_of_round(gateway, k)
            return u.cost_usd, u.tokens

        keeper = Keeper(root, spent)
        stack.callback(keeper.close)  # before the gateway's: no round is in progress any more
        scratch = state_dir / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        store = RoundStore(state_dir, rollout_settings(cfg, root), proposal_settings(cfg))
        executor = make_executor(cfg, sandbox, gateway.base_url)  # ray: joins the cluster here
        stack.callback(executor.close)
        if isinstance(executor, PooledExecutor):
            pooled.append(executor)
        if gateway.socket_path is not None and executor.uses_run_sandbox:
            sandbox.prewarm(str(gateway.socket_path.parent))  # docker: its pool starts containers meanwhile
        runner = Runner(
            cfg,
            sandbox,
            gateway,
            scorer,
            scratch,
            progress=progress,
            store=store if keep_rollouts else None,
            executor=executor,
        )
        stack.callback(runner.stop)  # first on the way out: nothing the teardown ends is kept

        def client_factory(round_no: int) -> anthropic.Anthropic:
            import anthropic  # deferred: the SDK's import is most of `run`'s start-up (docs/performance.md)

            lease = gateway.lease("optimizer", round_no, None)
            return anthropic.Anthropic(
                base_url=lease.base_url, api_key=lease.token, max_retries=0
            )  # the gateway retries

        optimizer = (
            make_optimizer(
                cfg.optimizer,
                client_factory=client_factory,
                shell_factory=sandbox.shell,  # the optimizer's bash is isolated like the tasks
                announce=say,
                transcript_dir=state_dir / "optimizer",
                lease_factory=lambda k: gateway.lease("optimizer", k, None),
                shell_on_host=not sandbox.shell_isolated,  # then it needs unsafe_host
                output_cap=cfg.budget.optimizer_max_output_tokens,  # what one optimizer call may ask
            )
            if with_optimizer
            else None
        )
        if hasattr(optimizer, "stop_requested"):  # a person's turn (manual) ends at STOP, not at DONE
            setattr(optimizer, "stop_requested", lambda: stop.requested(root))  # noqa: B010
        gate = make_gate(cfg.gate)
        yield Services(cfg, gateway, sandbox, runner, optimizer, gate, scratch, state_dir, store, keeper)
