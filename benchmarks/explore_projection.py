"""The projection of explore rounds against the calls they make (issue 21: the projection counts
the screening runs), on the demo's workspace.

    python benchmarks/explore_projection.py [--explore 3] [--rounds 2] [--train 64] [--checkpoints C]
        [--keep [--groups 23]] [--measured 1]

The demo's skill, tasks and scripted target with ``search.explore: E`` and a steady optimizer: in
every round each step appends a sentence of its own that the target's answers do not change with
(distinct content: no run is a cached one), so every step runs its screening and is dropped, and
the rounds are alike (none reaches validation). The demo has 8 train tasks, so every batch would be
the same 8 and the incumbent's runs on them cached after the first; ``--train N`` adds synthetic
train tasks (questions the target gets wrong) up to N, so that each step's base runs a fresh batch
as on a real task file. With ``--checkpoints C`` (``search.checkpoints: C``) the chain's head is
scored every C steps and at its end on 50 fixed train tasks; as no step is kept, the head is the
start throughout and only its first checkpoint runs (a head already scored is not run again).

With ``--keep`` steps are kept too: step ``sJ`` of round R writes "Isle group rRsJ." and once the
skill says it the target answers that group's synthetic isles right (the groups numbered in round
and step order; isle i is in group g when i mod G = g mod G, ``--groups G``). A step is kept when
its batch holds one of its isles that the head still gets wrong, so the head moves in some steps
and not in others, a checkpoint runs when the head moved since the last one, and the share of
checkpoints that run varies from round to round; with few groups the isles are all learned within
a few rounds and the head stops moving. Chains that move reach validation (val holds no isle, so
the gate rejects them), and the output adds each round's checkpoints run and held.

Rounds 1 to M (``--measured M``, 1 unless said) run alone; then ``harnessopt run --rounds R``
prints its projection from those measured rounds (journal ``run_start``), and the calls its rounds
made are printed beside it, per role.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.projection_accuracy import print_against  # noqa: E402
from harnessopt.commands.demo import DEMO_DATA  # noqa: E402
from harnessopt.ledger import store as ledger  # noqa: E402
from harnessopt.reporting.projection import measured_rates  # noqa: E402
from harnessopt.search import checkpoints  # noqa: E402
from harnessopt.workspace.core import Workspace  # noqa: E402
from tests.support.workspace import DEMO_LINE, make_ws, scripted_edits  # noqa: E402


def _answer_by_group(model: Path, isles: int, rounds: int, steps: int, groups: int) -> None:
    """Target rules, ahead of the script's: with "Isle group rRsJ." in its system prompt the target
    answers the isles of that group right (isle i is in group g when i % groups == g % groups, the
    groups numbered in round and step order)."""
    script = yaml.safe_load(model.read_text())
    mine = []
    for g, (r, j) in enumerate((r, j) for r in range(1, rounds + 1) for j in range(1, steps + 1)):
        ids = "|".join(str(i) for i in range(isles) if i % groups == g % groups)
        mine.append(
            {
                "role": "target",
                "system": rf"Isle group r{r}s{j}\.",
                "last_user": rf"\bIsle (?:{ids})\?",
                "reply": "Port",
            }
        )
    script["rules"] = mine + script["rules"]
    model.write_text(yaml.safe_dump(script, sort_keys=False))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--explore", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--train", type=int, default=64, help="train tasks (the demo's 8 and synthetic ones)")
    ap.add_argument("--checkpoints", type=int, default=0, help="search.checkpoints (0: off)")
    ap.add_argument("--keep", action="store_true", help="steps that the target's answers improve with")
    ap.add_argument("--measured", type=int, default=1, help="rounds run before the projected ones")
    ap.add_argument("--groups", type=int, default=23, help="with --keep: the synthetic isles' groups")
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
        sentence = " Isle group r{r}{s}." if a.keep else " Be kind (round {r}, {s})."
        model = scripted_edits(Path(tmp), {"step": (when, DEMO_LINE, DEMO_LINE + sentence)})
        if a.keep:
            _answer_by_group(
                model, len(extra), rounds=a.measured + a.rounds, steps=a.explore, groups=a.groups
            )
        ws = make_ws(
            Path(tmp), tasks=tasks, model=model, search={"explore": a.explore, "checkpoints": a.checkpoints}
        )
        for rounds in (a.measured, a.rounds):
            run = [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", str(rounds)]
            subprocess.run(run, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        w = Workspace.open(ws)
        starts = [e for e in w.journal.entries() if e["phase"] == "run_start"]
        projected = starts[-1]["projected"]
        past = ledger.past_rounds(w.repo)
        later = past[a.measured :]
        statuses = json.dumps([r.status for r in later])
        print(
            f"explore {a.explore}"
            + (f", checkpoints every {a.checkpoints}" if a.checkpoints else "")
            + f", {have + len(extra)} train tasks: rounds {a.measured + 1}-{a.measured + a.rounds} ({statuses}), "
            f"projection from {projected['basis']}"
        )
        if a.checkpoints:  # what each round's chain held and ran
            ran = [
                f"{r.manifest.search.checkpoints_run}/{r.manifest.search.checkpoints}"
                for r in past
                if r.manifest.search
            ]
            print(f"checkpoints run/held, round by round: {' '.join(ran)}")
            # the projection's checkpoint runs (the measured rounds' share of the chain's checkpoints)
            # against those the projected rounds ran
            each = checkpoints.runs(w.cfg.search, have + len(extra))
            share = measured_rates([r.manifest for r in past[: a.measured]], w.cfg)["checkpoint_share"]
            held = checkpoints.held(a.explore, a.checkpoints)
            ran_later = sum(r.manifest.search.checkpoints_run for r in later if r.manifest.search)
            print(
                f"checkpoint runs: projected {share * held * each * a.rounds:.0f} (share {share:.2f} of {held} "
                f"a round, {each} runs each), made {ran_later * each}"
            )
        print_against(projected, later)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
