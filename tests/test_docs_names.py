"""Every repository path and command-line flag the docs name exists: a module moved or a flag renamed
without its docs is caught here, not by a reader who opens a file that is gone or types a flag the
command refuses (the layout move of issue 21's round left seven such paths)."""

from __future__ import annotations

import argparse
import functools
import re
import tomllib
from pathlib import Path

import pytest

from harnessopt.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
# A path in backticks, optionally with ::test_name; globs, placeholders and URLs are not paths.
PATH = re.compile(
    r"`((?:harnessopt|tests|benchmarks|\.ci|workspace_templates|sandbox|docs)/[A-Za-z0-9_./-]+)(?:::(\w+))?`"
)


def named_paths(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group(2)) for m in PATH.finditer(text) if not any(c in m.group(1) for c in "*<>")]


@functools.cache
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


# "harnessopt CMD ..." up to the end of the code span, table cell or line: the flags given to CMD.
COMMAND = re.compile(r"harnessopt ([a-z]+)\b([^`|\n]*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@functools.cache
def command_flags() -> dict[str, set[str]]:
    """Each command's flags, a command with commands of its own (sandbox build) taking theirs."""

    def flags(parser: argparse.ArgumentParser) -> set[str]:
        out = {o for a in parser._actions for o in a.option_strings}
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    out |= flags(sub)
        return out

    return {name: flags(parser) for name, parser in build_parser().commands.items()}


def unknown_flags(text: str, known: dict[str, set[str]]) -> list[str]:
    return [
        f"harnessopt {m.group(1)} {flag}"
        for m in COMMAND.finditer(text)
        if m.group(1) in known
        for flag in FLAG.findall(m.group(2))
        if flag not in known[m.group(1)]
    ]


def test_the_flag_pattern() -> None:
    known = {"run": {"--rounds"}, "sandbox": {"--with"}}
    text = "`harnessopt run WS --rounds 3 --frob` | `harnessopt sandbox build --with codex` and harnessopt is"
    assert unknown_flags(text, known) == ["harnessopt run --frob"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_flag_a_doc_gives_a_command_exists(doc: Path) -> None:
    unknown = unknown_flags(doc.read_text(encoding="utf-8"), command_flags())
    assert not unknown, f"{doc.name} gives flags the command does not have: {unknown}"
