"""A run whose model call the gateway refused for lack of a slot is run again, never scored 0.

The shared loopback listener (what local-mode harnesses reach) cannot tell whose connection it
refused: every task running then is marked, and the runner runs it again with a fresh lease
(issue 20, item 2). The harness here is the real anthropic SDK with no retries of its own, so
one refused connection is one lost call.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from harnessopt.config import BudgetConfig, Config, GatewayConfig, RolloutConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import RunOutput, RunSpec, Task
from harnessopt.rollout.runner import REFUSED_RERUNS, Candidate, GatewayRefused, Runner

SLOTS = 4
SCRIPT = {"rules": [{"last_user": "capital", "reply": "Paris"}], "default": "ok"}
TASK = Task("t1", "Capital of France?", "Paris", "val")


@contextlib.contextmanager
def slots_held(gw: Gateway, n: int) -> Iterator[None]:
    """Another run's ``n`` silent connections to the gateway's loopback port."""
    host, port = gw.base_url.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port))) for _ in range(n)]
    try:
        yield
    finally:
        for s in socks:
            s.close()


class Harness:
    """A sandbox call: asks the model once; the first ``starved`` runs find every slot taken."""

    def __init__(self, gw: Gateway, starved: int):
        self.gw, self.starved, self.answers = gw, starved, list[str]()

    def __call__(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        client = anthropic.Anthropic(
            base_url=spec.gateway.base_url, api_key=spec.gateway.token, max_retries=0
        )
        with slots_held(self.gw, SLOTS if len(self.answers) < self.starved else 0):
            try:
                reply = client.messages.create(
                    model="claude-haiku-4-5",
                    max_tokens=16,
                    messages=[{"role": "user", "content": "capital?"}],
                )
                answer = reply.content[0].text
            except anthropic.APIStatusError:
                answer = ""  # the call was lost: a harness answers without it
        (out_dir / "answer.txt").write_text(answer)
        self.answers.append(answer)
        return RunOutput(exit_code=0, wall_s=0.1, out_dir=out_dir)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Gateway, Runner, Candidate]]:
    root = tmp_path / "cand"
    (root / "skill").mkdir(parents=True)
    (root / "harness").mkdir()
    settings = GatewayConfig(max_connections=SLOTS)
    cfg = Config(rollout=RolloutConfig(sandbox="local", timeout_s=60), gateway=settings)
    sock_dir = tmp_path / "gw"  # as in a run: leases get their own socket too, and local harnesses use TCP
    sock_dir.mkdir()
    with Gateway(
        ScriptedModel.from_dict(SCRIPT), BudgetConfig(), socket_dir=sock_dir, settings=settings
    ) as gw:
        scorer = lambda task, answer, out: float(answer == task["answer"])  # noqa: E731
        runner = Runner(cfg, object(), gw, scorer, tmp_path / "scratch")  # type: ignore[arg-type]
        yield gw, runner, Candidate(root, "incumbent", "c")


def test_a_run_that_lost_a_call_to_a_full_listener_is_run_again(setup) -> None:
    gw, runner, cand = setup
    harness = Harness(gw, starved=1)
    result = runner.run_one(cand, TASK, 1, 0, via=harness)
    assert harness.answers == ["", "Paris"]  # the starved run was not scored: it ran again
    assert result.passed and result.score == 1.0
    assert all(x.error is None for x in result.exchanges)  # the kept run's own transcript


def test_a_task_starved_on_every_run_fails_the_batch_instead_of_scoring_0(setup) -> None:
    gw, runner, cand = setup
    harness = Harness(gw, starved=REFUSED_RERUNS + 1)
    with pytest.raises(GatewayRefused, match="gateway.max_connections"):
        runner.run_one(cand, TASK, 1, 0, via=harness)
    assert harness.answers == [""] * (REFUSED_RERUNS + 1)


def test_a_run_the_budget_refused_is_not_kept_for_a_rerun_of_the_round(tmp_path: Path) -> None:
    """The gateway's transcript of its own budget refusal: the run is no evidence, so it is not
    kept (QA: a probe the budget refused was kept, and read again on resume, as a crash). A run
    whose call a policy refused (a 400: max_tokens over the per-call cap) is the harness's error
    and is kept."""
    from harnessopt.rollout.run_cache import RoundStore

    root = tmp_path / "cand"
    (root / "skill").mkdir(parents=True)
    (root / "harness").mkdir()
    cfg = Config(rollout=RolloutConfig(sandbox="local", timeout_s=60))
    budget = BudgetConfig(max_calls=1, target_max_output_tokens=64)
    with Gateway(ScriptedModel.from_dict(SCRIPT), budget) as gw:
        scorer = lambda task, answer, out: float(answer == task["answer"])  # noqa: E731
        runner = Runner(cfg, object(), gw, scorer, tmp_path / "scratch")  # type: ignore[arg-type]
        runner.store = store = RoundStore(tmp_path / "state", "settings")
        cand = Candidate(root, "incumbent", "c")

        def asking(max_tokens: int):
            def harness(spec: RunSpec, out_dir: Path) -> RunOutput:
                client = anthropic.Anthropic(
                    base_url=spec.gateway.base_url, api_key=spec.gateway.token, max_retries=0
                )
                try:
                    reply = client.messages.create(
                        model="claude-haiku-4-5",
                        max_tokens=max_tokens,
                        messages=[{"role": "user", "content": "capital?"}],
                    )
                    (out_dir / "answer.txt").write_text(reply.content[0].text)
                except anthropic.APIStatusError:
                    (out_dir / "answer.txt").write_text("")
                return RunOutput(exit_code=0, wall_s=0.1, out_dir=out_dir)

            return harness

        too_big = runner.run_one(cand, TASK, 1, 0, via=asking(1024))  # over the per-call cap
        assert too_big.exchanges[-1].error and "target_max_output_tokens" in too_big.exchanges[-1].error
        assert store.get(1, root, TASK, 0) is not None  # the harness's own error: kept
        assert runner.run_one(cand, TASK, 1, 1, via=asking(16)).passed  # the one call the budget holds
        spent = runner.run_one(cand, TASK, 1, 2, via=asking(16))
        assert spent.exchanges[-1].error and spent.exchanges[-1].error.startswith("harnessopt budget")
        assert store.get(1, root, TASK, 1) is not None and store.get(1, root, TASK, 2) is None
