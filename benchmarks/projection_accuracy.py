"""Projected model calls against the calls made, on the offline demo (docs/report.md quotes it).

    python benchmarks/projection_accuracy.py [--screenshot docs/report.png]

Runs `harnessopt demo` in a temporary directory (local sandbox, scripted model), then prints the
projection the run printed before spending (journal `run_start`) beside what its rounds spent,
per role and in total. With --screenshot it also writes the demo's HTML report and a screenshot
of it taken by a headless Chromium (the picture in docs/report.md).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harnessopt.ledger import store as ledger
from harnessopt.workspace.core import Workspace


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--screenshot", type=Path, help="write a PNG of the demo's report here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ho-projection-") as tmp:
        demo = Path(tmp) / "demo"
        run = [sys.executable, "-m", "harnessopt", "demo", str(demo), "--sandbox", "local"]
        subprocess.run(run, check=True, stdout=subprocess.DEVNULL)
        ws = Workspace.open(demo)
        (start,) = [e for e in ws.journal.entries() if e["phase"] == "run_start"]
        projected = start["projected"]
        rounds = ledger.past_rounds(ws.repo)
        print(f"demo, {len(rounds)} rounds, projection from {projected['basis']}")
        print_against(projected, rounds)
        if a.screenshot:
            out = Path(tmp) / "report"
            subprocess.run(
                [sys.executable, "-m", "harnessopt", "report", str(demo), "--out", str(out)], check=True
            )
            _screenshot(out / "report.html", a.screenshot.resolve(), Path(tmp) / "profile")
            print(f"screenshot: {a.screenshot}")
    return 0


def print_against(projected: dict[str, Any], rounds: list[ledger.Round]) -> None:
    """The projection (journal ``run_start``) beside the calls ``rounds`` made, per role and in all."""
    made = {
        role: sum(r.manifest.tokens[role].calls for r in rounds if role in r.manifest.tokens)
        for role in ("target", "optimizer")
    }
    total = sum(made.values())
    print(f"{'':10} {'projected':>9} {'made':>6} {'error':>7}")
    for role in ("target", "optimizer"):
        want = projected[f"{role}_calls"]
        print(f"{role:10} {want:>9} {made[role]:>6} {(want - made[role]) / max(made[role], 1):>+7.1%}")
    print(f"{'calls':10} {projected['calls']:>9} {total:>6} {(projected['calls'] - total) / total:>+7.1%}")


def _screenshot(page: Path, target: Path, profile: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if not binary:
        raise SystemExit("no chromium on PATH (bash .ci/browser_setup.sh)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    flags += [
        f"--user-data-dir={profile}",
        "--window-size=1000,1250",
        "--hide-scrollbars",
        f"--screenshot={target}",
    ]
    subprocess.run([binary, *flags, page.as_uri()], check=True, capture_output=True, timeout=120)


if __name__ == "__main__":
    sys.exit(main())
