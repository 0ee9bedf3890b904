"""The import check: the candidate harness imported in the sandbox (local and Docker) with a no-op entry."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import Config, RolloutConfig
from harnessopt.round.checks import import_check
from harnessopt.workspace.core import templates_dir

SKILL = "---\nname: s\ndescription: d\n---\nbody\n"
CASES = {
    "missing module": ("import no_such_module_for_ho\n", "No module named 'no_such_module_for_ho'"),
    "top-level exception": ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    "helper module missing a name": (
        "from helper import nothing_here\n",
        "cannot import name 'nothing_here'",
    ),
}


def _candidate(tmp_path: Path, run_py: str) -> Path:
    root = tmp_path / "cand"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text(SKILL)
    (root / "harness").mkdir()
    (root / "harness" / "run.py").write_text(run_py)
    (root / "harness" / "helper.py").write_text("VALUE = 1\n")
    return root


def _cfg() -> Config:
    return Config(rollout=RolloutConfig(timeout_s=60, memory_mb=512), flags={"fast": "1"})


def _local() -> Any:
    from harnessopt.sandbox.local.sandbox import LocalSandbox

    return LocalSandbox(_cfg().rollout, announce=lambda _m: None)


def _check_all(sandbox: Any, tmp_path: Path) -> None:
    for name, (source, said) in CASES.items():
        problem = import_check(sandbox, _candidate(tmp_path / name.replace(" ", "-"), source), _cfg())
        assert problem is not None and "fails to import" in problem and said in problem, (name, problem)
    # The task entry is not run: only the import. Top-level code sees a task's variables.
    guarded = (
        "import os, sys\nfrom helper import VALUE\n"
        "assert os.environ['HARNESSOPT_TARGET_MODEL'] and os.environ['HO_FLAG_FAST'] == '1'\n"
        "if __name__ == '__main__':\n    sys.exit(7)\n"
    )
    assert import_check(sandbox, _candidate(tmp_path / "guarded", guarded), _cfg()) is None
    chat = _candidate(tmp_path / "chat", "")
    shutil.rmtree(chat / "harness")
    shutil.copytree(templates_dir() / "chat", chat / "harness")
    assert import_check(sandbox, chat, _cfg()) is None


def test_import_check_in_the_local_sandbox(tmp_path: Path) -> None:
    sandbox = _local()
    try:
        _check_all(sandbox, tmp_path)
    finally:
        sandbox.close()


def test_import_check_cannot_reach_the_network_or_spend(tmp_path: Path) -> None:
    """A harness that calls its model at import time gets a dead URL, not the gateway."""
    source = (
        "import os, urllib.request\n"
        "urllib.request.urlopen(os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', b'{}', timeout=5)\n"
    )
    sandbox = _local()
    try:
        problem = import_check(sandbox, _candidate(tmp_path, source), _cfg())
    finally:
        sandbox.close()
    assert problem is not None and "Connection refused" in problem


@pytest.mark.docker
def test_import_check_in_the_docker_sandbox_image(tmp_path: Path, docker_client: Any) -> None:
    from harnessopt.sandbox.docker.sandbox import DockerSandbox

    sandbox = DockerSandbox(_cfg().rollout, docker_client, warm=0)
    try:
        _check_all(sandbox, tmp_path)
    finally:
        sandbox.close()


def test_a_static_check_names_the_candidates_own_paths(tmp_path: Path) -> None:
    """A rejection named the round's scratch copy (.../.harnessopt/scratch/round-1/candidate/skill/...),
    a path the reviewer never sees (QA); it names skill/SKILL.md."""
    from harnessopt.round.checks import static_check

    root = tmp_path / ".harnessopt" / "scratch" / "round-1" / "candidate"
    (root / "skill").mkdir(parents=True)
    (root / "harness").mkdir()
    (root / "skill" / "SKILL.md").write_text("---\nname: [unclosed\n---\nbody\n")
    problem = static_check(root) or ""
    assert problem.startswith("candidate fails its static check: skill/SKILL.md"), problem
    assert str(tmp_path) not in problem
