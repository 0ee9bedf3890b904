"""Harnessopt's history at hundreds of rounds.

    python benchmarks/history_scale.py [--rounds 200] [--train 8] [--repeat 3] [--keep DIR]

Builds a workspace (the demo's skill and tasks, local sandbox) and records ROUNDS rounds through
harnessopt's own ledger (``ledger.record_accepted`` / ``record_other``), each with a realistic
manifest (gate details, phases, tokens, fixed/broken) and one trajectory file per train task
rendered by ``trajectory.write_trajectories`` from synthetic runs. IDEALIZATION: no rollout, no
optimizer and no model call happens; the rounds are what a real run would record, not a real run.
Every third round is accepted (on ``main``), the others are rejected, no-op or failed refs.

Then it times, through the real CLI in a fresh interpreter each (best of --repeat): ``log``,
``log --json``, ``status``, ``diff 150``, ``run --dry-run`` (run's start-up: workspace, ledger,
projection) and ``rollback`` to an accepted round; and prints the size of ``.git`` (after
``git gc``) against the trajectories it keeps, gzip-compressed file by file.
"""

from __future__ import annotations

import argparse
import gzip
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.commands.demo import DEMO_DATA, demo_config
from harnessopt.config import Config
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.index import INDEX_FILE
from harnessopt.ledger.store import OptimizerRecord, PhaseStats, RoleUsage, RoundManifest
from harnessopt.protocols import Exchange, TaskResult  # noqa: E402
from harnessopt.rollout.trajectory import write_trajectories
from harnessopt.workspace.core import Workspace, init_workspace

ROOT = Path(__file__).resolve().parents[1]
WORDS = tuple(
    [
        "the",
        "capital",
        "of",
        "country",
        "answer",
        "tool",
        "call",
        "search",
        "result",
        "city",
        "population",
        "river",
        "border",
        "north",
        "south",
        "east",
        "west",
        "language",
        "currency",
        "flag",
        "anthem",
        "mountain",
        "coast",
        "island",
        "republic",
        "kingdom",
        "federal",
        "state",
        "province",
        "region",
        "museum",
        "parliament",
        "president",
        "minister",
        "election",
        "treaty",
        "ocean",
        "sea",
        "lake",
        "desert",
    ]
)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _result(rng: random.Random, k: int, task_id: str) -> TaskResult:
    """One synthetic run: a few model calls with tool use, like a chat-template trajectory."""
    history: list[dict] = [{"role": "user", "content": f"What is the capital of {task_id}?"}]
    exchanges = []
    for call in range(rng.randint(2, 4)):
        text = _sentence(rng, rng.randint(20, 60))
        response = {
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "usage": {"input_tokens": 300 + 40 * call, "output_tokens": 60},
        }
        request = {"model": "target", "system": "You answer questions.", "messages": list(history)}
        exchanges.append(Exchange(request, response, None, 0.0, 2.0, 300 + 40 * call, 60))
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": _sentence(rng, 12)}]
    passed = rng.random() < 0.6
    return TaskResult(
        task_id=task_id,
        split="train",
        round=k,
        epoch=0,
        score=1.0 if passed else 0.0,
        passed=passed,
        soft=None,
        feedback=f"expected the capital of {task_id}; got: {_sentence(rng, 5)}",
        answer=_sentence(rng, 6),
        exit_code=0,
        error_class=None,
        wall_s=round(rng.uniform(2, 9), 2),
        input_tokens=1200,
        output_tokens=240,
        steps=len(exchanges),
        stderr_tail="",
        task_input=f"What is the capital of {task_id}?",
        exchanges=exchanges,
    )


def _manifest(rng: random.Random, k: int, status: str, parent: str, val: list[str]) -> RoundManifest:
    delta = round(rng.uniform(-0.1, 0.2), 3)
    phases = {
        ph: PhaseStats(
            runs=n,
            passed=n // 2,
            calls=3 * n,
            input_tokens=900 * n,
            output_tokens=180 * n,
            wall_s=2.5 * n,
            failures={"wrong_answer": n // 2},
            turns=sorted([3] * n),
        )
        for ph, n in (("rollout", 8), ("smoke", 5), ("validation", len(val)), ("incumbent", len(val)))
    }
    return RoundManifest(
        round=k,
        status=status,
        reason=f"{status}: delta {delta:+.3f} against dead zone 0.050",
        summary=f"Round {k}: {_sentence(rng, 8)}\n\n{_sentence(rng, 40)}",
        parent=parent,
        val_score=round(rng.uniform(0.3, 0.9), 3),
        incumbent_score=round(rng.uniform(0.3, 0.9), 3),
        delta=delta,
        dead_zone=0.05,
        n=len(val),
        fixed=rng.sample(val, 2),
        broken=rng.sample(val, 1),
        gate={"alpha": 0.05, "p_value": round(rng.random(), 4), "test": "mcnemar", "discordant": [3, 1]},
        train_passed=rng.randint(2, 8),
        train_tasks=8,
        changed=["skill/SKILL.md"],
        optimizer=OptimizerRecord(turns=rng.randint(2, 8), input_tokens=20000, output_tokens=3000),
        tokens={
            "target": RoleUsage(calls=60, input=50000, output=9000, cost_usd=0.05),
            "optimizer": RoleUsage(calls=8, input=20000, output=3000, cost_usd=0.1),
        },
        cost_usd=0.15,
        phases=phases,
        repeats={t: [1, 0] for t in val[:5]},
        wall_s=round(rng.uniform(60, 300), 1),
    )


def _local_config() -> Config:
    """The demo's config, local sandbox; its optimizer may run on this host (the run, and since
    2026-12-05 its dry run, refuse one without that)."""
    cfg = demo_config("local")
    return cfg.model_copy(update={"optimizer": cfg.optimizer.model_copy(update={"unsafe_host": True})})


def init(ws: Path) -> None:
    init_workspace(
        ws,
        DEMO_DATA / "skill",
        DEMO_DATA / "tasks.jsonl",
        config=_local_config(),
        extra_files={"scripted_model.yaml": DEMO_DATA / "model.yaml"},
        announce=lambda _m: None,
    )


def build(ws: Path, n_rounds: int, n_train: int) -> int:
    """Record n_rounds rounds in the workspace; returns the bytes of trajectories written (gzip)."""
    w = Workspace.open(ws)
    repo = w.repo
    train = [t.id for t in w.tasks("train")][:n_train] or [f"task{i}" for i in range(n_train)]
    val = [t.id for t in w.tasks("val")] or [f"val{i}" for i in range(10)]
    val = (val * 5)[: max(5, len(val))]
    rng = random.Random(15)
    compressed = 0
    skill_text = (ws / "skill" / "SKILL.md").read_text()
    with tempfile.TemporaryDirectory(prefix="ho-hist-overlay-") as tmp:
        overlay = Path(tmp)
        for k in range(1, n_rounds + 1):
            parent = vcs.head_sha(repo)
            shutil.rmtree(overlay, ignore_errors=True)
            vcs.export(repo, parent, ["skill", "harness"], overlay)
            skill_text += f"\n- Round {k}: {_sentence(rng, 14)}\n"
            (overlay / "skill" / "SKILL.md").write_text(skill_text)
            results = [_result(rng, k, t) for t in train]
            paths = write_trajectories(
                overlay / "trajectories", results, harness_commit=parent, target_model="t"
            )
            compressed += sum(len(gzip.compress(p.read_bytes())) for p in paths)
            status = "accepted" if k % 3 == 0 else ("rejected", "noop", "failed")[k % 9 // 3]
            m = _manifest(rng, k, status, parent, val)
            rec = ["skill", "harness", "trajectories"]
            if status == "accepted":
                ledger.record_accepted(repo, w.journal, parent, overlay, rec, m, new_best=k % 6 == 0)
                w.journal.write(k, "recorded", status=status)
            else:
                ledger.record_other(repo, parent, overlay, rec, m)
                skill_text = (ws / "skill" / "SKILL.md").read_text()
                w.journal.write(k, "recorded", status=status)
    return compressed


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


WALK = (
    "import sys; from harnessopt.ledger import store as ledger; ledger.rounds = ledger.rounds_from_git; "
    "from harnessopt.cli import main; sys.exit(main(sys.argv[1:]))"
)
"""The CLI reading rounds commit by commit from git, as before the commit index (ledger.index) existed."""


def timed(
    args: list[str], repeat: int, *, walk: bool = False, drop_index: Path | None = None
) -> tuple[float, str]:
    """Best wall time of ``harnessopt ARGS`` in a fresh interpreter (``walk``: without the index;
    ``drop_index``: the index file deleted before each call, so it is rebuilt)."""
    best, out = float("inf"), ""
    for _ in range(repeat):
        if drop_index is not None:
            drop_index.unlink(missing_ok=True)
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, *(["-c", WALK] if walk else ["-m", "harnessopt"]), *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        best = min(best, time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"harnessopt {' '.join(args)} failed: {r.stderr.strip()[-500:]}")
        out = r.stdout
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--train", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="build the workspace here and keep it")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ho-history-")
    ws = a.keep or Path(tmp) / "ws"
    try:
        init(ws)
        subprocess.run(["git", "-C", str(ws), "gc", "-q"], check=True)
        git_before = _du(ws / ".git")
        t0 = time.perf_counter()
        compressed = build(ws, a.rounds, a.train)
        built = time.perf_counter() - t0
        subprocess.run(["git", "-C", str(ws), "gc", "-q"], check=True)
        git_after = _du(ws / ".git")
        print(
            f"history_scale: {a.rounds} rounds recorded through harnessopt.ledger.store in {built:.1f} s "
            f"(IDEALIZED: synthetic runs and manifests, no rollout or model call)"
        )
        rows = [
            ("log", ["log", str(ws)]),
            ("log --json", ["log", str(ws), "--json"]),
            ("status", ["status", str(ws)]),
            ("diff 150", ["diff", str(ws), "150"]),
            ("run --dry-run (start-up)", ["run", str(ws), "--dry-run"]),
        ]
        index = ws / ".harnessopt" / INDEX_FILE
        for name, args in rows:
            s, _ = timed(args, a.repeat)
            print(f"  harnessopt {name:<26} {s:6.2f} s  (best of {a.repeat})")
            if name in ("log", "status"):
                s_walk, _ = timed(args, a.repeat, walk=True)
                s_cold, _ = timed(args, a.repeat, drop_index=index)
                print(
                    f"    {name}: reading commits one by one (before the index) {s_walk:.2f} s; "
                    f"index deleted, rebuilt from git {s_cold:.2f} s"
                )
        repo = vcs.open_repo(ws)

        def best_of(call: Any, before: Any = lambda: None) -> float:
            times = []
            for _ in range(a.repeat):
                before()
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            return min(times)

        walk = best_of(lambda: ledger.rounds_from_git(repo))
        rebuild = best_of(lambda: ledger.rounds(repo), lambda: index.unlink(missing_ok=True))
        cached = best_of(lambda: ledger.rounds(repo))
        print(
            f"  in-process ledger.store.rounds at {a.rounds} rounds: {walk:.3f} s reading commit by commit, "
            f"{rebuild:.3f} s rebuilding the index, {cached:.3f} s with it (best of {a.repeat})"
        )
        k = max(r.round for r in ledger.rounds(repo) if r.status == "accepted" and r.round < a.rounds)
        s, out = timed(["rollback", str(ws), str(k - 3 if k > 3 else k)], 1)
        print(f"  harnessopt {'rollback ' + str(k - 3 if k > 3 else k):<26} {s:6.2f} s  ({out.strip()[:60]})")
        s, _ = timed(["status", str(ws)], a.repeat)
        print(f"  harnessopt {'status (after rollback)':<26} {s:6.2f} s")
        grown = git_after - git_before
        print(
            f"  .git after gc: {git_after / 1e6:.2f} MB, grown by {grown / 1e6:.2f} MB over round 0; "
            f"the {a.rounds * a.train} trajectories kept, gzip file by file: {compressed / 1e6:.2f} MB "
            f"(growth / compressed trajectories = {grown / max(compressed, 1):.2f})"
        )
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
