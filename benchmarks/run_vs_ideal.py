"""A whole run against the model-bound ideal (issue 21's latency target), with K candidates a round
or an explore chain of E steps.

    python benchmarks/run_vs_ideal.py [--candidates 1 3] [--explore 3] [--sandbox local] [--latency 1] [--rounds 2] [--concurrency 4]

For each K: the demo's workspace (its skill, tasks and scripted model, which plays K distinct
candidates a round) with every model reply held ``--latency`` seconds (the scripted model's
``latency_s``), then ``harnessopt run WS --rounds R`` through the real CLI, timed end to end
(start-up, rollout, optimizer, screening, probe, smoke, validation, flip reruns, confirmation,
git). Prints the wall time, the seconds before the first round (from the command's start to
the journal's ``run_start``), the ideal ``target calls x latency / C + optimizer calls x latency``
(calls counted from the rounds' manifests) and their ratio. The optimizer's calls are
sequential (one conversation after another), the target's run C at a time.

With ``--explore E`` (one row a value, after the K rows) the round chains E steps
(``search.explore``): the scripted optimizer's step s1 of round 1 fixes the answers' form, s2
the capitals, s3 changes nothing the scorer sees (the explore tests' script); later steps and
rounds make no edit the rules match. Each step's screening and its base's fresh batch are target
calls like any other, and every step is an optimizer conversation. With ``--more-train N`` the
workspace has N more train tasks (ones the scripted target gets wrong whatever the skill) and with
``--screen-tasks S`` each step screens on its batch and S of them (``search.screen_tasks``, what
the default's rule chooses where an optimizer turn costs hundreds of runs): the base runs them
beside its batch, step 1's while its optimizer works.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harnessopt.commands.demo import DEMO_DATA  # noqa: E402
from harnessopt.config import GateConfig  # noqa: E402
from harnessopt.ledger import store as ledger  # noqa: E402
from harnessopt.workspace.core import Workspace  # noqa: E402
from tests.support.workspace import (  # noqa: E402
    DEMO_LINE,
    FORM,
    SEAT,
    make_ws,
    scripted_edits,
    with_more_train,
)

GATES = {
    "default": GateConfig(smoke=5),
    "whole-bank": GateConfig(smoke=5, confirm_epochs=GateConfig().banked_epochs),
}
STEPS = {  # explore's steps in round 1: (old, new), each on the files of the chain before it
    "s1": (DEMO_LINE, FORM),
    "s2": (FORM, f"{FORM}\n\n{SEAT}"),
    "s3": (SEAT, f"{SEAT} Keep it short."),
}


def started(ws: Workspace, t0: float) -> float:
    """Seconds from the command's start (``t0``, wall clock) to the journal's ``run_start`` (imports,
    the projection, the services opened: what the run does before its first round)."""
    return next((float(e["t"]) - t0 for e in ws.journal.entries() if e["phase"] == "run_start"), float("nan"))


def one(
    k: int,
    sandbox: str,
    latency: float,
    rounds: int,
    concurrency: int,
    gate: str = "default",
    explore: int = 0,
    more_train: int = 0,
    screen_tasks: int = 0,
) -> tuple[float, float, int, int, list[str]]:
    """(wall seconds, seconds to the first round, target calls, optimizer calls, statuses) of one run."""
    with tempfile.TemporaryDirectory(prefix="ho-run-ideal-") as tmp:
        model = DEMO_DATA / "model.yaml"
        if explore:
            when = r"# Round 1:[\s\S]*Your step: {},"
            model = scripted_edits(Path(tmp), {n: (when.format(n), *e) for n, e in STEPS.items()})
        script = yaml.safe_load(model.read_text())
        script["latency_s"] = latency
        path = Path(tmp) / "model.yaml"
        path.write_text(yaml.safe_dump(script, sort_keys=False))
        ws = make_ws(
            Path(tmp),
            tasks=with_more_train(Path(tmp), more_train),
            model=path,
            rollout={"concurrency": concurrency, "sandbox": sandbox},
            search={"candidates": k, "explore": explore, "screen_tasks": screen_tasks},
            # the shipped gate (GateConfig(): the banked gate), the same with the previous stop's
            # confirmation of the winner's whole bank, or the demo's (the paired gate)
            **({"gate": GATES[gate]} if gate in GATES else {}),
        )
        t0, at = time.monotonic(), time.time()
        r = subprocess.run(
            [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", str(rounds)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        wall = time.monotonic() - t0
        if r.returncode not in (0,):
            print(r.stdout[-1500:], r.stderr[-1500:], sep="\n")
        w = Workspace.open(ws)
        found = ledger.past_rounds(w.repo)
        calls = {role: sum(x.manifest.tokens[role].calls for x in found if role in x.manifest.tokens)
                 for role in ("target", "optimizer")}  # fmt: skip
        return wall, started(w, at), calls["target"], calls["optimizer"], [x.status for x in found]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, nargs="*", default=[1, 3])
    ap.add_argument("--explore", type=int, nargs="*", default=[], help="explore rows: steps a round")
    ap.add_argument("--sandbox", default="local")
    ap.add_argument("--latency", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--more-train", type=int, default=0, help="train tasks added to the demo's 8")
    ap.add_argument("--screen-tasks", type=int, default=0, help="search.screen_tasks of the rows")
    ap.add_argument("--gate", choices=(*GATES, "demo"), default="default",
                    help="GateConfig() (the banked gate), the same confirmed by the winner's whole bank "
                         "(confirm_epochs 11, the previous stop's), or the demo's config (the paired gate of "
                         "before issue 21)")  # fmt: skip
    a = ap.parse_args()
    print(
        f"run_vs_ideal: sandbox {a.sandbox}, latency {a.latency} s, C = {a.concurrency}, {a.rounds} rounds, "
        f"gate {a.gate}"
        + (f", {a.more_train} more train tasks" if a.more_train else "")
        + (f", search.screen_tasks {a.screen_tasks}" if a.screen_tasks else "")
    )
    print(
        f"{'K/E':>4}  {'wall s':>7}  {'start s':>7}  {'target':>6}  {'optim.':>6}  {'ideal s':>7}  {'ratio':>5}  statuses"
    )
    rows = [(f"K={k}", k, 0) for k in a.candidates] + [(f"E={e}", 1, e) for e in a.explore]
    for label, k, e in rows:
        wall, start, target, optimizer, statuses = one(
            k, a.sandbox, a.latency, a.rounds, a.concurrency, a.gate, e, a.more_train, a.screen_tasks
        )
        ideal = target * a.latency / a.concurrency + optimizer * a.latency
        print(
            f"{label:>4}  {wall:>7.1f}  {start:>7.2f}  {target:>6}  {optimizer:>6}  {ideal:>7.1f}  {wall / ideal:>5.2f}  "
            f"{' '.join(statuses)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
