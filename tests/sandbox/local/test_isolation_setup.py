"""A fresh machine set up by ``.ci/run`` runs every isolation mode's tests: none skips there."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harnessopt.sandbox.local import isolation

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = {"bwrap": "bubblewrap", "unshare": "util-linux"}  # the Debian package of each mode's tool


def test_every_mode_the_tests_need_is_installed_by_the_ci_set_up() -> None:
    named = {
        m for f in (ROOT / "tests").rglob("*.py") for m in re.findall(r'available\("(\w+)"\)', f.read_text())
    }
    used = named | {"bwrap", "unshare"}  # and the modes tests/sandbox/local parametrizes over
    ci = "\n".join(p.read_text() for p in (ROOT / ".ci").iterdir() if p.is_file())
    assert "sandbox_setup.sh" in (ROOT / ".ci" / "run").read_text()
    for mode in sorted(used - {"session"}):
        assert PACKAGE[mode] in ci, f".ci/ installs nothing that provides {mode} ({PACKAGE[mode]})"


@pytest.mark.parametrize("mode", ["bwrap", "unshare"])
def test_in_ci_each_isolation_mode_works(mode: str) -> None:
    """Under CI=true a missing mode is a failure (its tests would skip), as a missing Docker is."""
    if not os.environ.get("CI") and not isolation.available(mode):
        pytest.skip(f"{mode} cannot run here; set CI=true to make this a failure (.ci/sandbox_setup.sh)")
    assert isolation.available(mode), f"{mode} cannot run here: run .ci/sandbox_setup.sh"
