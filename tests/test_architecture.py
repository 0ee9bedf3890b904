"""The module map of docs/architecture.md, checked: no import cycle, no import from a lower layer up."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "harnessopt"

# Lowest first. A module may import its own layer or lower ones, never a higher one. Each entry is
# a module or a folder (every module inside it, at any depth); the longest entry that matches a
# module places it, so a folder whose modules sit in different layers lists them one by one and
# the test checks the order inside folders as well as between them.
LAYERS: list[set[str]] = [
    {"errors", "limits", "protocols", "registry", "util"},
    {
        "config",
        "workspace.tasks",
        "workspace.skillspec",
        "workspace.flags",
        "workspace.templates",
        "workspace.scoring",
        "workspace.scorer_proc",
        "gate.stats",
        "gate.bank",
        "ledger.vcs",
        "ledger.journal",
        "ledger.index",
        "ledger.lock",
        "gateway.http",
        "gateway.guard",
        "gateway.chat_wire",
        "gateway.responses_wire",
        "gateway.translate",
        "sandbox.untar",
        "sandbox.prepared",
        "sandbox.local.isolation",
        "sandbox.local.reaper",
        "sandbox.docker.capture",
        "sandbox.image.build",
        "rollout.trajectory",
        "round.stop",
    },
    {
        "ledger",
        "workspace",
        "gate",
        "gateway",
        "sandbox",
        "optimizer",
        "objective",
        "rollout",
        "round.checks",
        "round.leakage",
        "round.tamper",
        "search.screen",
        "search.clusters",
        "search.archive",
        "search.length",
        "search.budget",
        "search.checkpoints",
    },
    {"rollout.runner", "round.services", "reporting", "search.state"},
    {"round", "search"},
    {"commands", "reporting.mlflow"},
    {"cli", "__main__", "__init__"},
]


def _layer(module: str) -> int:
    name = module.removeprefix("harnessopt").removeprefix(".") or "__init__"
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        entry = ".".join(parts[:n])
        for i, names in enumerate(LAYERS):
            if entry in names:
                return i
    raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: place it")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """module -> harnessopt modules it imports (at top level or inside functions)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                base = node.module
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                if t.startswith("harnessopt") and t != name:
                    while t not in modules:
                        t = t.rsplit(".", 1)[0]
                    if t != name:
                        graph[name].add(t)
    return graph


def test_no_import_goes_up_a_layer() -> None:
    wrong = [
        f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
        for a, targets in import_graph().items()
        for b in targets
        if _layer(b) > _layer(a)
    ]
    assert wrong == []


def test_no_import_cycle() -> None:
    graph = import_graph()
    # A package's __init__ may import its own submodules (and they their siblings); a submodule
    # importing its package's __init__ back would close a cycle and counts.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []


def test_sandbox_does_not_import_the_optimizer() -> None:
    graph = import_graph()
    bad = {
        m: t for m, t in graph.items() if m.startswith("harnessopt.sandbox") for x in t if "optimizer" in x
    }
    assert bad == {}


def test_rounds_are_read_only_through_the_ledger() -> None:
    """No module but the ledger parses manifests or indexes them by string keys."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.parent.name == "ledger":
            continue
        for needle in ("MANIFEST_PREFIX", "manifest.get(", 'manifest["', "round_records("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter (what it imports is its own)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_run_imports_no_model_sdk_until_a_model_is_opened(tmp_path: Path) -> None:
    """`harnessopt run`'s modules, its start-up (``--dry-run``), ``log`` and ``status`` work where
    neither SDK can be imported (importing one costs 1-2 s of CPU, docs/performance.md); opening
    a model imports its SDK."""
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    blocked = (
        "import sys\nsys.modules['anthropic'] = None; sys.modules['openai'] = None  # any import fails\n"
        "import harnessopt.cli, harnessopt.round.steps, harnessopt.round.services, harnessopt.gateway.models, harnessopt.gateway.server\n"
        f"for command in ('log', 'status'):\n    assert harnessopt.cli.main([command, {str(ws)!r}]) == 0\n"
        f"sys.exit(harnessopt.cli.main(['run', {str(ws)!r}, '--dry-run']))\n"
    )
    proc = _python(blocked)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    opened = (
        "import sys, harnessopt.round.steps\n"
        "from harnessopt.gateway.models import make_model\n"
        "assert 'anthropic' not in sys.modules and 'openai' not in sys.modules\n"
        "make_model('anthropic', env={'ANTHROPIC_API_KEY': 'k'})\n"
        "assert 'anthropic' in sys.modules and 'openai' not in sys.modules\n"
        "make_model('openai', env={'OPENAI_API_KEY': 'k'})\n"
        "assert 'openai' in sys.modules\n"
    )
    proc = _python(opened)
    assert proc.returncode == 0, proc.stderr


def test_the_built_in_optimizer_loads_its_sdk_in_the_background() -> None:
    """Its module does not import the SDK; making the optimizer starts the import on a thread, so
    the run's start does not wait for it; an SDK that cannot be imported fails there in silence
    and again, with its message, where it is used."""
    loaded = (
        "import sys, threading\n"
        "import harnessopt.optimizer.anthropic_agent\n"
        "from harnessopt.config import OptimizerConfig\n"
        "from harnessopt.optimizer import make_optimizer\n"
        "assert 'anthropic' not in sys.modules\n"
        "make_optimizer(OptimizerConfig(unsafe_host=True), client_factory=None, announce=print)\n"
        "for t in threading.enumerate():\n"
        "    if t.name == 'import-anthropic': t.join(120)\n"
        "assert 'anthropic' in sys.modules\n"
    )
    proc = _python(loaded)
    assert proc.returncode == 0, proc.stderr
    blocked = (
        "import sys\nsys.modules['anthropic'] = None\n"
        "from harnessopt.optimizer import import_in_background\n"
        "import_in_background('anthropic').join(120)\n"
        "import anthropic\n"
    )
    proc = _python(blocked)
    assert proc.returncode == 1 and proc.stderr.count("Traceback") == 1, proc.stderr
    assert "ModuleNotFoundError: import of anthropic halted" in proc.stderr


def test_no_folder_holds_more_than_fifteen_modules() -> None:
    """One folder per concept, each small enough to take in at a glance."""
    crowded = {
        str(d.relative_to(PACKAGE.parent)): n
        for d in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (n := len([f for f in d.glob("*.py") if f.name != "__init__.py"])) > 15
    }
    assert crowded == {}
