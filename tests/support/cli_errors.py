"""Test support: assert_user_error, snapshot, assert_unchanged (shared by several test modules)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def assert_user_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_unchanged(ws: Path, before: dict[str, bytes]) -> None:
    """Nothing in the workspace ``ws`` changed since ``snapshot`` took ``before``, its state
    directory (.harnessopt: caches, the journal) aside."""
    after = snapshot(ws)
    assert {k: v for k, v in after.items() if ".harnessopt" not in k} == {
        k: v for k, v in before.items() if ".harnessopt" not in k
    }
