"""The projection of explore rounds against the calls they make (issue 21: the projection counts
the screening runs), on the demo's workspace.

    python benchmarks/explore_projection.py [--explore 3] [--rounds 2] [--train 64] [--checkpoints C]

The demo's skill, tasks and scripted target with ``search.explore: E`` and a steady optimizer: in
every round each step appends a sentence of its own that the target's answers do not change with
(distinct content: no run is a cached one), so every step
runs its screening and is dropped, and the rounds are alike (none reaches validation). The demo
has 8 train tasks, so every batch would be the same 8 and the incumbent's runs on them cached
after the first; ``--train N`` adds synthetic train tasks (questions the target gets wrong) up to
N, so that each step's base runs a fresh batch as on a real task file. With ``--checkpoints C``
(``search.checkpoints: C``) the chain's head is scored every C steps and at its end on 50 fixed
train tasks; as no step is kept, the head is the start throughout and only its first checkpoint
runs (a head already scored is not run again). Round 1
runs alone; then ``harnessopt run --rounds R`` prints its projection from that measured round
(journal ``run_start``), and the calls its rounds made are printed beside it, per role.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.projection_accuracy import print_against  # noqa: E402
from harnessopt.commands.demo import DEMO_DATA  # noqa: E402
from harnessopt.ledger import store as ledger  # noqa: E402
from harnessopt.workspace.core import Workspace  # noqa: E402
from tests.support.workspace import DEMO_LINE, make_ws, scripted_edits  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--explore", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--train", type=int, default=64, help="train tasks (the demo's 8 and synthetic ones)")
    ap.add_argument("--checkpoints", type=int, default=0, help="search.checkpoints (0: off)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ho-explore-projection-") as tmp:
        lines = (DEMO_DATA / "tasks.jsonl").read_text().splitlines()
        have = sum(json.loads(x)["split"] == "train" for x in lines)
        extra = [
            {
                "id": f"isle{i:03d}",
                "input": f"What is the capital of Isle {i}?",
                "answer": "Port",
                "split": "train",
            }
            for i in range(max(0, a.train - have))
        ]
        tasks = Path(tmp) / "tasks.jsonl"
        tasks.write_text("\n".join([*lines, *map(json.dumps, extra)]) + "\n")
        when = r"# Round (?P<r>\d+):[\s\S]*Your step: (?P<s>s\d+),"  # a sentence of its own a step
        model = scripted_edits(
            Path(tmp), {"step": (when, DEMO_LINE, DEMO_LINE + " Be kind (round {r}, {s}).")}
        )
        ws = make_ws(
            Path(tmp), tasks=tasks, model=model, search={"explore": a.explore, "checkpoints": a.checkpoints}
        )
        for rounds in (1, a.rounds):
            run = [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", str(rounds)]
            subprocess.run(run, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        w = Workspace.open(ws)
        starts = [e for e in w.journal.entries() if e["phase"] == "run_start"]
        projected = starts[-1]["projected"]
        later = ledger.past_rounds(w.repo)[1:]
        statuses = json.dumps([r.status for r in later])
        print(
            f"explore {a.explore}"
            + (f", checkpoints every {a.checkpoints}" if a.checkpoints else "")
            + f", {have + len(extra)} train tasks: rounds 2-{a.rounds + 1} ({statuses}), "
            f"projection from {projected['basis']}"
        )
        print_against(projected, later)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
