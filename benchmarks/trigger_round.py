"""Precision and recall of triggering before and after one trigger round, on the test workspace.

Builds the trigger workspace of tests/support/trigger_ws.py (the skill csv-to-json with a narrow
description, three distractor skills, should-trigger queries in other words and near-miss
negatives), runs two rounds through the CLI with a template (default tool-agent, local sandbox)
against the fake upstream of tests/support/trigger_upstream.py (it loads the skill whose
description fits the query; a stand-in for a model, so these numbers measure the loop, not a real
model's choice), then audits ho/best against round 0 on the test split. Prints, per round, the
gate's verdict and triggering on val (incumbent -> candidate), and the audit's triggering on test.

With ``--template claude-code`` (the real CLI in the image ``harnessopt-sandbox:claude-code``) it
runs the small workspace (4 train, 6 val, no test split) for one round with one epoch, as
tests/objective/test_trigger_round.py does, so there is no audit line.

Usage: python benchmarks/trigger_round.py [--template tool-agent|claude-code]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.ledger import store as ledger  # noqa: E402
from harnessopt.workspace.core import Workspace  # noqa: E402
from tests.support.trigger_run import run_trigger  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--template", default="tool-agent", choices=["tool-agent", "claude-code"])
    a = p.parse_args()
    args = ["--sandbox", "local", "-c", "optimizer.unsafe_host=true", "--batch-size", "8"]
    small = a.template == "claude-code"  # the real CLI: the small workspace, one round, no audit
    if small:
        args = ["--sandbox", "docker", "-c", "rollout.image=harnessopt-sandbox:claude-code"]
        args += ["--batch-size", "4", "-c", "rollout.memory_mb=1024", "-c", "rollout.pids=256"]
        args += ["-c", "gate.epochs=1", "-c", "gate.confirm=none", "-c", "gate.confirm_flips=false"]
    with tempfile.TemporaryDirectory(prefix="trigger-bench-") as tmp:
        rounds = 1 if small else 2
        ws, run, _fit, audit = run_trigger(
            Path(tmp), a.template, *args, audit=not small, small=small, rounds=rounds
        )
        if run.returncode != 0:
            print(run.stdout[-2000:], run.stderr[-2000:])
            return 1
        for r in ledger.past_rounds(Workspace.open(ws).repo):
            m, t = r.manifest, r.manifest.trigger
            line = f"round {r.round}: {r.status} ({m.reason[:90]})"
            if t is not None and m.val_score is not None:
                line += (
                    f"; val precision {t.incumbent.precision} -> {t.candidate.precision}, "
                    f"recall {t.incumbent.recall} -> {t.candidate.recall}, "
                    f"description {t.incumbent_description_chars} -> {t.description_chars} chars"
                )
            print(line)
            if m.violations:
                print(f"round {r.round}: discarded writes: {', '.join(m.violations)}")
        for line in audit.stdout.splitlines() if audit else []:
            if "triggering" in line or "held-out gain" in line:
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
