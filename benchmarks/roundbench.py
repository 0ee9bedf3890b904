"""What the round benchmarks share: a model of fixed latency behind the real gateway,
a workspace of N val and N train tasks, and the round's phases run by harnessopt's own Runner.

The model is ``tests/fake_anthropic.FakeAnthropicServer`` (the Messages API as the real one
serves it) answering every call after ``latency`` seconds; harnessopt's ``anthropic`` provider
points at it, so a task's call goes harness -> gateway -> provider -> fake like a real one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harnessopt.commands.demo import DEMO_DATA  # noqa: E402
from harnessopt.protocols import TaskResult  # noqa: E402
from harnessopt.rollout.runner import Candidate  # noqa: E402
from harnessopt.round.services import Services, open_services  # noqa: E402
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace, init_workspace  # noqa: E402
from tests.support.fake_anthropic import FakeAnthropicServer  # noqa: E402

CAPITALS = ["Canberra", "Ottawa", "Paris", "Berlin", "Tokyo", "Lima", "Cairo", "Oslo", "Rome", "Quito"]


def latency_model(latency_s: float) -> Any:
    """A Messages endpoint that answers every call with the city after ``latency_s`` seconds."""

    def answer(req: dict[str, Any]) -> dict[str, Any]:
        time.sleep(latency_s)
        text = json.dumps(req["body"].get("messages", [{}])[-1].get("content", ""))
        city = next((c for c in CAPITALS if c.lower() in text.lower()), "Canberra")
        return {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": req["body"].get("model", "m"),
            "content": [{"type": "text", "text": city}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 2},
        }

    return answer


def write_tasks(path: Path, n_train: int, n_val: int) -> None:
    lines = []
    for split, n in (("train", n_train), ("val", n_val), ("test", 2)):
        for i in range(n):
            city = CAPITALS[i % len(CAPITALS)]
            lines.append(
                {
                    "id": f"{split}-{i:03d}",
                    "input": f"{split} {i}: which city is {city}?",
                    "answer": city,
                    "split": split,
                }
            )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@contextlib.contextmanager
def bench_services(
    tmp: Path,
    *,
    sandbox: str,
    concurrency: int,
    n_train: int,
    n_val: int,
    latency_s: float,
    template: str = "chat",
) -> Iterator[tuple[Workspace, Services]]:
    """A fresh workspace (demo skill, ``template``) and its Services against the latency model."""
    tasks = tmp / "tasks.jsonl"
    write_tasks(tasks, n_train, n_val)
    ws_root = init_workspace(
        tmp / "ws", DEMO_DATA / "skill", tasks, template=template, announce=lambda _m: None
    )
    overrides = {
        "model.provider": "anthropic",
        "model.target": "bench-target",
        "rollout.sandbox": sandbox,
        "rollout.concurrency": concurrency,
        "rollout.timeout_s": 120,
    }
    ws = Workspace.open(ws_root, overrides)
    with FakeAnthropicServer(latency_model(latency_s)) as fake:
        saved = {k: os.environ.get(k) for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
        os.environ["ANTHROPIC_API_KEY"] = "bench-key"
        os.environ["ANTHROPIC_BASE_URL"] = fake.base_url
        try:
            with open_services(
                ws.root, ws.cfg, lambda _m: None, with_optimizer=False, keep_rollouts=False
            ) as svc:
                yield ws, svc
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def candidate_copy(ws: Workspace, dest: Path, label: str = "incumbent") -> Candidate:
    """A private copy of the workspace's skill/ and harness/, as the loop makes one per round."""
    for p in EDITABLE_PATHS:
        shutil.copytree(ws.root / p, dest / p)
    return Candidate(dest, label, "bench")


@dataclass
class Phase:
    """One phase of a round: its tasks' results and its wall time."""

    name: str
    results: list[TaskResult]
    wall_s: float

    @property
    def calls(self) -> int:
        return sum(len(r.exchanges) for r in self.results)

    def model_s(self) -> float:
        """Mean seconds a task spent waiting for the model (the gateway's own record of each call)."""
        return (
            statistics.mean(sum(e.wall_s for e in r.exchanges) for r in self.results) if self.results else 0.0
        )

    def harness_s(self) -> float:
        """Mean seconds of the harness process (the sandbox's measure: start to exit)."""
        return statistics.mean(r.wall_s for r in self.results) if self.results else 0.0


def timed_phase(
    name: str, svc: Services, cand: Candidate, tasks: Sequence[Any], k: int, epoch: int = 0
) -> Phase:
    return timed(name, lambda: svc.runner.run(cand, tasks, k, epochs=[epoch], phase="validation"))


def timed(name: str, step: Callable[[], list[TaskResult]]) -> Phase:
    """One phase: ``step`` returns the results it made."""
    t0 = time.perf_counter()
    results = step()
    return Phase(name, results, time.perf_counter() - t0)


def new_tmp(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path
