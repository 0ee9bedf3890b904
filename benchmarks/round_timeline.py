"""Where a round's time goes, from the journal's timestamps: what is not the model's latency.

    python benchmarks/round_timeline.py [--sandbox local|docker]

Runs `harnessopt demo` (three rounds, the scripted model) into a fresh temp directory through the
real CLI, then reads `.harnessopt/journal.jsonl`. The loop writes an entry as each step ends, so
an entry's time minus the previous one's is that step's duration. Prints, per round, every step
with its seconds and its share of the round. The scripted model answers at once: the rollout
steps are the sandbox, harness and scorer with no model latency, so the steps around them
(trajectory files, the view, copy-back, git) show at their own size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

STEP = {  # the journal entry -> what ran since the previous entry (harnessopt/round/steps.py)
    "start": "round start: the incumbent's private copy",
    "rollout": "rollout: the train batch (sandbox, harness, scorer)",
    "propose": "trajectory files and the optimizer's view",
    "proposed": "the optimizer",
    "check": "copy-back, static and import checks",
    "incumbent_val": "leakage check; the incumbent on val (uncached)",
    "noise_floor": "the A/A test's second pass",
    "smoke": "the probe and the smoke test",
    "validate": "validation",
    "gate": "the gate (its reruns)",
    "confirm": "the accepted round's confirmation",
    "memorised": "the memorised-answer check (the fixed tasks' variants)",
    "record": "the record's commit built",
    "applying": "git: main, tags and refs moved",
    "recorded": "git: the record closed",
    "spend": "usage written",
    "run_end": "the run's end",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default="local")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ho-timeline-") as tmp:
        target = Path(tmp) / "demo"
        r = subprocess.run(
            [sys.executable, "-m", "harnessopt", "demo", str(target), "--sandbox", a.sandbox],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:], sep="\n")
            return 1
        entries = [json.loads(x) for x in (target / ".harnessopt" / "journal.jsonl").read_text().splitlines()]
    print(f"round_timeline: harnessopt demo --sandbox {a.sandbox}; seconds since the previous journal entry")
    by_round: dict[int, list[dict]] = {}
    for e in entries:
        by_round.setdefault(e["round"], []).append(e)
    for k, rows in sorted(by_round.items()):
        rows = [e for e in rows if e["phase"] != "run_start"]
        total = rows[-1]["t"] - rows[0]["t"] if len(rows) > 1 else 0.0
        print(f"round {k}: {total:.2f} s")
        for prev, e in zip(rows, rows[1:], strict=False):
            d = e["t"] - prev["t"]
            share = d / total if total else 0.0
            print(f"  {d:7.2f} s {share:6.1%}  {e['phase']:<14} {STEP.get(e['phase'], '')}")
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
