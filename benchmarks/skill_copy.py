"""Per-task time with a 6 MB skill: a copy per task (as before sandbox.prepared) against one read-only copy
per candidate (now), in Docker and in the local sandbox (bwrap), side by side in one run.

    python benchmarks/skill_copy.py [--n 12] [--mb 6]

The skill is SKILL.md, a fonts/ directory of incompressible files adding up to --mb MB and a few
small files; the harness is a no-op that writes answer.txt. "before" is the sandbox with its
slot filled the old way (``_copy_readable`` of skill/ and harness/ into the slot for every task in
Docker, ``shutil.copytree`` into the task's directory locally), "now" is the sandbox as shipped.
Prints the median latency of one task (``sandbox.run``) and the wall time per task, at
concurrency 1 and 2 (needs Docker and the image; bwrap for the local rows).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harnessopt.config import RolloutConfig  # noqa: E402
from harnessopt.protocols import GatewayLease, RunSpec  # noqa: E402
from harnessopt.sandbox.docker import sandbox as docker_mod
from harnessopt.sandbox.docker.sandbox import DockerSandbox
from harnessopt.sandbox.image.build import docker_client
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import LocalSandbox

NOOP = (
    "import argparse, os\n"
    "p = argparse.ArgumentParser(); [p.add_argument(a) for a in ('--task', '--skill', '--out')]\n"
    "a = p.parse_args(); open(os.path.join(a.out, 'answer.txt'), 'w').write('ok')\n"
)


class CopyingDocker(DockerSandbox):
    """As before sandbox.prepared: skill/ and harness/ copied into every task's slot."""

    def _write_slot(self, warm: Any, spec: RunSpec, copy: str) -> bytes:
        job = super()._write_slot(warm, spec, copy)
        for part, src in (("skill", spec.skill_dir), ("harness", spec.harness_dir)):
            (warm.slot / part).unlink()
            docker_mod._copy_readable(src, warm.slot / part)
        return job


class CopyingLocal(LocalSandbox):
    """As before sandbox.prepared: skill/ and harness/ copied into every task's directory."""

    @contextlib.contextmanager
    def _candidate(self, spec: RunSpec, tmp: Path) -> Iterator[list[tuple[Path, Path]]]:
        for part, src in (("skill", spec.skill_dir), ("harness", spec.harness_dir)):
            shutil.copytree(src, tmp.resolve() / part, ignore=shutil.ignore_patterns(".git"))
        yield []


def make_candidate(work: Path, mb: int) -> tuple[Path, Path]:
    skill, harness = work / "cand" / "skill", work / "cand" / "harness"
    (skill / "fonts").mkdir(parents=True)
    harness.mkdir()
    (skill / "SKILL.md").write_text("---\nname: b\ndescription: a skill with fonts\n---\nUse the fonts.\n")
    for i in range(mb * 2):
        (skill / "fonts" / f"face-{i}.ttf").write_bytes(os.urandom(512 * 1024))
    for i in range(20):
        (skill / f"ref-{i}.md").write_text(f"reference {i}\n" * 50)
    (harness / "run.py").write_text(NOOP)
    for p in [work, work / "cand", *work.joinpath("cand").rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return skill, harness


def measure(sb: Any, spec: RunSpec, work: Path, n: int, conc: int) -> tuple[float, float]:
    lat: list[float] = []

    def one(i: int) -> None:
        t = time.perf_counter()
        out = sb.run(spec, work / f"out-{id(sb)}-{i}")
        assert out.error_class is None, out
        lat.append(time.perf_counter() - t)

    one(-1)  # warm-up: page cache, the prepared copy, the first containers
    time.sleep(1.0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        list(ex.map(one, range(n)))
    return statistics.median(lat), (time.perf_counter() - t0) / n


def slot_fill(skill: Path, harness: Path, work: Path, n: int) -> tuple[float, float]:
    """Median seconds to fill and later remove one slot: the old copy, and the two links now."""
    old, new = [], []
    for i in range(n):
        slot = work / f"slot-{i}"
        slot.mkdir()
        t = time.perf_counter()
        docker_mod._copy_readable(skill, slot / "skill")
        docker_mod._copy_readable(harness, slot / "harness")
        shutil.rmtree(slot)
        old.append(time.perf_counter() - t)
        slot.mkdir()
        t = time.perf_counter()
        for part in ("skill", "harness"):
            os.symlink(f"/ho-cand/token/{part}", slot / part)
        shutil.rmtree(slot)
        new.append(time.perf_counter() - t)
    return statistics.median(old), statistics.median(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--mb", type=int, default=6)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ho-bench-copy-"))
    try:
        skill, harness = make_candidate(work, a.mb)
        size = sum(p.stat().st_size for p in skill.rglob("*") if p.is_file())
        lease = GatewayLease("bench", "http://127.0.0.1:9", None)
        spec = RunSpec({"id": "b", "input": "x"}, skill, harness, {}, lease, 60)
        print(
            f"skill_copy: skill of {size / 1e6:.1f} MB ({len(list(skill.rglob('*')))} entries), {a.n} tasks per row"
        )
        old, new = slot_fill(skill, harness, work, a.n)
        print(
            f"filling and removing one slot (median of {a.n}): copy {old * 1e3:.1f} ms, links {new * 1e3:.2f} ms"
        )
        print(f"{'sandbox':10} {'slot':28} {'conc':>4} {'median s/task':>14} {'wall s/task':>12}")
        client = docker_client()
        for conc in (1, 2):
            cfg = RolloutConfig(concurrency=conc)
            rows: list[tuple[str, str, Any]] = [
                ("docker", "copy per task (before)", CopyingDocker(cfg, client)),
                ("docker", "read-only mount (now)", DockerSandbox(cfg, client)),
            ]
            if isolation.available("bwrap"):
                rows += [
                    ("local", "copy per task (before)", CopyingLocal(cfg, isolation_mode="bwrap")),
                    ("local", "read-only bind (now)", LocalSandbox(cfg, isolation_mode="bwrap")),
                ]
            for mode, name, sb in rows:
                try:
                    med, per = measure(sb, spec, work, a.n, conc)
                finally:
                    sb.close()
                print(f"{mode:10} {name:28} {conc:>4} {med:>14.3f} {per:>12.3f}")
        with open("/proc/loadavg") as f:
            print(f"load average {f.read().split()[0]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
