"""What a broken candidate costs, as a share of a full validation.

    python benchmarks/broken_candidate.py [--sandbox docker|local] [--n 40] [--concurrency 4] [--latency 2]

A workspace of the chat template with N val tasks, its target a model answering each call after
--latency seconds (benchmarks/roundbench.py). First the incumbent's full validation (N tasks) is
timed; then three broken candidates go through the round's own checks, each timed from the
candidate's arrival to its rejection:

  empty SKILL.md        candidate_check.static_check (the host, nothing runs)
  harness import fails  static_check, then candidate_check.import_check in the sandbox
  every task crashes    static_check and import_check pass; evaluate.smoke runs the smoke tasks,
                        reruns the crashed ones, takes the incumbent's side from the run the
                        loop made while the optimizer worked (evaluate.probe_jobs), and rejects

Prints each one's time and its share of the full validation's time (target <= 10%). ``--pool N``
sets the Docker warm pool's size instead of ``docker.warm_pool_size``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import roundbench  # noqa: F401  (puts the repository on sys.path)

from harnessopt.rollout.runner import Candidate, outcomes
from harnessopt.round import context, evaluate
from harnessopt.round.checks import import_check, static_check

CRASH_AT_IMPORT = "import harnessopt_no_such_module  # the optimizer's typo\n"
CRASH_EVERY_TASK = 'if __name__ == "__main__":\n    raise SystemExit("broken on purpose")\n'


def broken(base: Candidate, dest: Path, kind: str) -> Candidate:
    shutil.copytree(base.root, dest)
    run_py = dest / "harness" / "run.py"
    if kind == "empty SKILL.md":
        (dest / "skill" / "SKILL.md").write_text("")
    elif kind == "harness import fails":
        run_py.write_text(CRASH_AT_IMPORT + run_py.read_text())
    else:
        text = run_py.read_text()
        guard = 'if __name__ == "__main__":'
        run_py.write_text(
            text.replace(guard, CRASH_EVERY_TASK + guard, 1) if guard in text else text + CRASH_EVERY_TASK
        )
    return Candidate(dest, "candidate", f"broken-{kind}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default="docker")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--pool", type=int, help="Docker's warm pool size (default: warm_pool_size)")
    a = ap.parse_args()
    if a.pool is not None:
        from harnessopt.sandbox.docker import sandbox as docker

        docker.warm_pool_size = lambda _c: a.pool  # type: ignore[assignment]
    tmp = roundbench.new_tmp("ho-bench-p3-")
    try:
        with roundbench.bench_services(
            tmp, sandbox=a.sandbox, concurrency=a.concurrency, n_train=2, n_val=a.n, latency_s=a.latency
        ) as (ws, svc):
            inc = roundbench.candidate_copy(ws, tmp / "incumbent")
            val = ws.tasks("val")
            full = roundbench.timed_phase("validation", svc, inc, val, 1)
            assert all(r.error_class is None for r in full.results), [r.notes for r in full.results][:3]
            print(
                f"broken_candidate: {a.sandbox} sandbox, concurrency {a.concurrency}, pool "
                f"{a.pool if a.pool is not None else 'default'}, model latency "
                f"{a.latency:g} s; full validation of {len(val)} tasks: {full.wall_s:.1f} s ({full.calls} calls)"
            )
            rc = context.RoundContext(
                k=1, scratch=tmp / "scratch", incumbent=inc, parent="bench", val=list(val)
            )
            inc_out = outcomes(full.results)
            # The incumbent's rerun of the first smoke task, which the loop makes while the
            # optimizer works (evaluate.probe_jobs): made here before the candidate arrives, untimed.
            made = evaluate.probe(svc, rc)
            for kind in ("empty SKILL.md", "harness import fails", "every task crashes"):
                cand = broken(inc, tmp / kind.replace(" ", "-"), kind)
                t0 = time.perf_counter()
                why = static_check(cand.root)
                stage = "static check"
                if why is None:
                    why, stage = import_check(svc.sandbox, cand.root, ws.cfg), "import check"
                if why is None:
                    _, why = evaluate.smoke(ws, svc, rc, cand, inc_out, lambda _m: None, made)
                    stage = "smoke test"
                cost = time.perf_counter() - t0
                verdict = f"rejected by the {stage}" if why else "NOT rejected"
                print(
                    f"  {kind:<22} {cost:6.2f} s = {cost / full.wall_s:6.1%} of the full validation; "
                    f"{verdict}: {(why or '').splitlines()[-1][:90] if why else ''}"
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/proc/loadavg") as f:
        print(f"load average {f.read().split()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
