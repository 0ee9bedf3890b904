"""Checks of a candidate before any rollout: its SKILL.md and harness compile (host, never run), then
the harness is imported in the sandbox with a no-op entry (``import_check``).

The import runs where the tasks run, never in this interpreter: the candidate harness is untrusted
code. It goes through the sandbox's own exec path, the optimizer's ``Shell`` (``Sandbox.shell``):
in Docker a container of the sandbox image with no network and the rollout limits, locally a
subprocess wrapped like a local task. ``harness/run.py`` is loaded as a module named
``ho_import_check`` (so its ``if __name__ == "__main__":`` block, the task entry, does not run)
with the environment a task gets but a dead model URL: a missing module or a top-level exception
rejects the round at once, before a single task (or model call) is spent on the candidate.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path

from harnessopt.config import Config
from harnessopt.errors import UserError
from harnessopt.protocols import Sandbox, SupportsClose
from harnessopt.workspace.skillspec import read_skill

IMPORT_TIMEOUT_S = 120.0  # importing a harness (the SDK alone takes ~3 s), capped by rollout.timeout_s
IMPORT_MARK = "HO-IMPORT-OK"
DEAD_URL = "http://127.0.0.1:9"  # the discard port: a top-level client is built, never answered
# Loads harness/run.py under another name, so that its main guard keeps the task entry from running.
_LOADER = (
    "import importlib.util, sys; sys.path.insert(0, 'harness'); "
    "sys.argv = ['harness/run.py', '--ho-import-check']; "
    "spec = importlib.util.spec_from_file_location('ho_import_check', 'harness/run.py'); "
    "module = importlib.util.module_from_spec(spec); sys.modules['ho_import_check'] = module; "
    "spec.loader.exec_module(module); print('" + IMPORT_MARK + "')"
)


def static_check(root: Path, skill_rules_off: Collection[str] = ()) -> str | None:
    """Why the candidate at ``root`` fails before any rollout: its SKILL.md front matter (but the
    spec rules in ``skill_rules_off``), or a harness module that does not compile. Any exception
    here is the candidate's fault."""
    try:
        read_skill(root / "skill", rules_off=skill_rules_off)
        compile_harness(root / "harness")
    except UserError as e:  # paths as the candidate's own (skill/SKILL.md), not the round's scratch copy
        return f"candidate fails its static check: {e}".replace(f"{root}/", "")
    except SyntaxError as e:
        return f"candidate harness does not compile: {e.filename}:{e.lineno}: {e.msg}"
    except Exception as e:  # RecursionError, MemoryError, ...: never an infrastructure failure
        return f"candidate fails its static check: {type(e).__name__}"
    return None


def compile_harness(harness: Path) -> None:
    """Compile (never run) every harness module on the host: a syntax error rejects early."""
    for path in sorted(harness.rglob("*.py")):
        compile(path.read_text(encoding="utf-8", errors="replace"), str(path), "exec")


def import_check(sandbox: Sandbox, root: Path, cfg: Config) -> str | None:
    """Import the candidate's ``harness/run.py`` (with ``skill/`` beside it) in ``sandbox``; None when
    it imports, else why not (the last lines of its traceback). Nothing here calls a model."""
    private = Path(tempfile.mkdtemp(prefix="ho-import-"))  # 0700: the shell's container may chmod inside
    work = private / "candidate"
    try:
        for part in ("harness", "skill"):
            shutil.copytree(root / part, work / part, ignore=shutil.ignore_patterns("__pycache__"))
        shell = sandbox.shell(work)
        try:
            timeout = min(IMPORT_TIMEOUT_S, cfg.rollout.timeout_s)
            done = shell.run(_command(sandbox, cfg), timeout)
        finally:
            if isinstance(shell, SupportsClose):
                shell.close()
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if done.timed_out:
        return f"candidate harness did not finish importing in {timeout:.0f} s (import check, no task run)"
    if done.exit_code == 0 and IMPORT_MARK in done.output:
        return None
    tail = [line.strip() for line in done.output.strip().splitlines() if line.strip()][-3:]
    said = " | ".join(tail) or f"exit code {done.exit_code}"
    return f"candidate harness fails to import (import check, no task run): {said}"[:1500]


def _command(sandbox: Sandbox, cfg: Config) -> str:
    """The shell line: the task's interpreter (this one for the local sandbox, the image's python3
    in Docker) with a task's variables, the gateway's replaced by a dead URL and a dummy key."""
    python = sandbox.task_python
    env = {
        "HARNESSOPT_TARGET_MODEL": cfg.model.target,
        "ANTHROPIC_BASE_URL": DEAD_URL,
        "ANTHROPIC_API_KEY": "ho-import-check",
        "OPENAI_BASE_URL": DEAD_URL + "/v1",
        "OPENAI_API_KEY": "ho-import-check",
        "PYTHONDONTWRITEBYTECODE": "1",
        **{f"HO_FLAG_{name.upper()}": str(value) for name, value in cfg.flags.items()},
    }
    assigns = " ".join(f"{k}={_quote(v)}" for k, v in env.items())
    return f"env {assigns} {_quote(python)} -c {_quote(_LOADER)} 2>&1"


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
