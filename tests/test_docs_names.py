"""Every repository path and command-line flag the docs name exists: a module moved or a flag renamed
without its docs is caught here, not by a reader who opens a file that is gone or types a flag the
command refuses (the layout move of issue 21's round left seven such paths)."""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import re
import tomllib
import typing
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


# A dotted name in backticks whose first part is one of the package's folders or modules: a
# module, a name in one (`search.budget.validation_runs`, or `stats.round_levels` by the module's
# own name), a setting (`search.explore`) or a field of a round's manifest (`search.alpha_split`);
# `gateway.sock` and the like are file names. A name of the flat layout before its folders
# (2608b55) that no module has now (`loop.smoke`, `valcache.key_parts`) is stale.
DOTTED = re.compile(r"`([a-z_]+(?:\.[A-Za-z_]\w*)+)`")
FILE_SUFFIXES = {"sock", "json", "jsonl", "yaml", "md", "py", "txt", "html", "db", "lock", "png"}
# Names of other libraries and wire formats that share a first part with a module of ours.
NOT_OURS = {"ray.put", "ray.cancel", "http.client", "text.format", "text.verbosity"}
FLAT_LAYOUT = set(
    [
        "ablate",
        "adoption",
        "audit",
        "bank",
        "candidate_check",
        "chat_wire",
        "demo",
        "executors",
        "flags",
        "gate",
        "gatereport",
        "gateway",
        "gateway_policy",
        "hardening",
        "html_report",
        "http_guard",
        "interrupts",
        "journal",
        "leakage",
        "ledger",
        "ledger_index",
        "lock",
        "loop",
        "messages_http",
        "mlflow_log",
        "models",
        "noisefloor",
        "proc",
        "progress",
        "projection",
        "proposals",
        "ray_executor",
        "ray_worker",
        "relay",
        "replay",
        "report",
        "report_data",
        "resume",
        "rollout",
        "round0",
        "roundstats",
        "scoring",
        "secondary",
        "services",
        "skillspec",
        "stats",
        "stop",
        "tamper",
        "tasks",
        "taxonomy",
        "textutil",
        "trajectory",
        "translate",
        "valcache",
        "vcs",
        "verdicts",
        "workspace",
    ]
)


@functools.cache
def package_modules() -> dict[str, list[str]]:
    """A folder's or module's own name -> the dotted paths (below ``harnessopt``) it stands for."""
    out: dict[str, list[str]] = {}
    for path in (ROOT / "harnessopt").rglob("*.py"):
        parts = list(path.relative_to(ROOT / "harnessopt").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and parts[-1] != "__main__":
            out.setdefault(parts[-1], []).append(".".join(parts))
    return out


def _is_field_path(model: object, parts: list[str]) -> bool:
    """``parts`` walks pydantic fields from ``model`` (the last part may be a property)."""
    for i, part in enumerate(parts):
        fields = getattr(model, "model_fields", {})
        if part in fields:
            kinds = typing.get_args(fields[part].annotation) or (fields[part].annotation,)
            model = next((k for k in kinds if hasattr(k, "model_fields")), kinds[0])  # X | None: X
        else:
            return i == len(parts) - 1 and isinstance(getattr(model, part, None), property)
    return True


def _is_code_path(parts: list[str]) -> bool:
    """``parts`` is a module of the package, or a name (and its attributes) in one; its first part
    may be a module's own name (``stats`` for ``gate.stats``)."""
    for module in package_modules().get(parts[0], []):
        obj: object = importlib.import_module(f"harnessopt.{module}")
        rest = parts[1:]
        while rest and hasattr(obj, "__path__") and importlib.util.find_spec(f"{obj.__name__}.{rest[0]}"):
            obj = importlib.import_module(f"{obj.__name__}.{rest.pop(0)}")  # a module in a folder
        for name in rest:
            if not hasattr(obj, name):
                break
            obj = getattr(obj, name)
        else:
            return True
    return False


def unresolved_names(text: str) -> list[str]:
    from harnessopt.config import Config
    from harnessopt.ledger.manifest import RoundManifest

    out = []
    for m in DOTTED.finditer(text):
        parts = m.group(1).split(".")
        if parts[0] not in package_modules() and parts[0] not in FLAT_LAYOUT or parts[-1] in FILE_SUFFIXES:
            continue
        if m.group(1) in NOT_OURS or parts[0] == "manifest" and _is_field_path(RoundManifest, parts[1:]):
            continue
        if not (
            _is_code_path(parts) or _is_field_path(Config, parts) or _is_field_path(RoundManifest, parts)
        ):
            out.append(m.group(1))
    return out


def test_the_dotted_name_check() -> None:
    text = (
        "`round.evaluate.smoke`, `search.explore`, `gate.confirm_runs`, `search.alpha_split`, "
        "`gateway.sock`, `details.looks_planned`, `loop.smoke`, `valcache.key_parts`, "
        "`round.evaluate.nope`, `gate.second_looks`, `noise_floor.measure`, `stats.round_levels`, `manifest.checks.leakage`, `manifest.nope`"
    )
    assert unresolved_names(text) == [
        "loop.smoke",
        "valcache.key_parts",
        "round.evaluate.nope",
        "gate.second_looks",
        "manifest.nope",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_dotted_name_a_doc_gives_resolves(doc: Path) -> None:
    unresolved = unresolved_names(doc.read_text(encoding="utf-8"))
    assert not unresolved, f"{doc.name} names modules, names or settings that do not exist: {unresolved}"


@functools.cache
def subcommands() -> dict[str, set[str]]:
    """Commands that take a command of their own (``sandbox build``): command -> its commands."""
    out = {}
    for name, parser in build_parser().commands.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                out[name] = set(action.choices)
    return out


def unknown_subcommands(text: str, known: dict[str, set[str]]) -> list[str]:
    return [
        f"harnessopt {m.group(1)} {m.group(2)}"
        for m in re.finditer(r"harnessopt ([a-z]+) ([a-z]+)\b", text)
        if m.group(1) in known and m.group(2) not in known[m.group(1)]
    ]


def test_the_subcommand_pattern() -> None:
    text = "`harnessopt sandbox clean` and `harnessopt sandbox build --with codex`, `harnessopt run ws`"
    assert unknown_subcommands(text, {"sandbox": {"build", "cleanup"}}) == ["harnessopt sandbox clean"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_subcommand_a_doc_gives_exists(doc: Path) -> None:
    unknown = unknown_subcommands(doc.read_text(encoding="utf-8"), subcommands())
    assert not unknown, f"{doc.name} gives commands that do not exist: {unknown}"
