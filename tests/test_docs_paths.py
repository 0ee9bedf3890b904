"""Every repository path the docs name exists: a module moved without its docs is caught here, not by a
reader who opens a file that is gone (the layout move of issue 21's round left seven such paths)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# A path in backticks, optionally with ::test_name; globs, placeholders and URLs are not paths.
PATH = re.compile(
    r"`((?:harnessopt|tests|benchmarks|\.ci|workspace_templates|sandbox|docs)/[A-Za-z0-9_./-]+)(?:::(\w+))?`"
)


def named_paths(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in PATH.finditer(text) if not any(c in m.group(1) for c in "*<>")]


def wheel_dirs() -> dict[str, str]:
    """Folders a wheel carries inside the package (pyproject's package-dir): installed path -> repository path."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {pkg.replace(".", "/"): src for pkg, src in setuptools["package-dir"].items()}


def resolves(path: str) -> bool:
    """A path names a file or folder of the repository; ``sandbox/...`` may be the package's own
    ``harnessopt/sandbox/...`` as well as the top-level image folder, and a folder only a wheel has
    (``harnessopt/sandbox/image/context/``) is the repository folder it is built from."""
    path = path.rstrip("/")
    for installed, source in wheel_dirs().items():
        if path == installed or path.startswith(installed + "/"):
            path = source + path[len(installed) :]
    candidates = [ROOT / path]
    if path.startswith("sandbox/"):
        candidates.append(ROOT / "harnessopt" / path)
    return any(c.exists() for c in candidates)


def test_the_pattern_finds_paths_and_tests() -> None:
    text = "see `harnessopt/gate/bank.py` and `tests/gate/test_bank.py::test_x`, not `tests/**/*.py` or `harnessopt`"
    assert named_paths(text) == [("harnessopt/gate/bank.py", None), ("tests/gate/test_bank.py", "test_x")]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    missing = []
    for path, test in named_paths(doc.read_text(encoding="utf-8")):
        if not resolves(path):
            missing.append(path)
        elif test and not re.search(rf"def {test}\b", (ROOT / path).read_text(encoding="utf-8")):
            missing.append(f"{path}::{test}")
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_a_stale_path_is_caught() -> None:
    assert not resolves("harnessopt/sandbox/docker.py")  # moved to harnessopt/sandbox/docker/
    assert resolves("harnessopt/sandbox/docker/") and resolves("sandbox/docker/pool.py")
    assert resolves("harnessopt/sandbox/image/context/runner.py")  # a wheel's copy of sandbox/runner.py
    assert not resolves("harnessopt/sandbox/image/context/nope.py")
