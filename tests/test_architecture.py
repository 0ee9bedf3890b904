"""The module map of docs/architecture.md, checked: no import cycle, no import from a lower layer up."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "harnessopt"

# Lowest first. A module may import its own layer or lower ones, never a higher one.
LAYERS: list[set[str]] = [
    {
        "errors",
        "protocols",
        "textutil",
        "stats",
        "journal",
        "interrupts",
        "proc",
        "registry",
        "lock",
        "hardening",
        "stop",
    },
    {
        "config",
        "tasks",
        "skillspec",
        "scoring",
        "trajectory",
        "messages_http",
        "http_guard",
        "vcs",
        "ledger_index",
        "untar",
        "translate",
        "chat_wire",
        "scorer_proc",
        "flags",
    },
    {
        "models",
        "gateway",
        "gateway_policy",
        "sandbox",
        "gate",
        "ledger",
        "workspace",
        "optimizer",
        "valcache",
        "secondary",
        "taxonomy",
        "noisefloor",
        "verdicts",
        "bank",
        "leakage",
        "tamper",
        "proposals",
        "candidate_check",
        "executors",
        "relay",
        "ray_worker",
        "ray_executor",
    },
    {"rollout", "services", "resume", "roundstats", "projection", "progress", "round0"},
    {"loop", "audit", "ablate", "replay", "report", "report_data", "adoption", "html_report", "gatereport"},
    {"demo", "mlflow_log"},
    {"cli", "__main__", "__init__"},
]


def _layer(module: str) -> int:
    top = module.split(".")[1] if module.count(".") else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
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
        if path.name == "ledger.py":
            continue
        for needle in ("MANIFEST_PREFIX", "manifest.get(", 'manifest["', "round_records("):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []


def test_run_imports_no_model_sdk_until_a_model_is_opened(tmp_path: Path) -> None:
    """`harnessopt run`'s modules, its start-up (``--dry-run``), ``log`` and ``status`` work where
    neither SDK can be imported (importing one costs 1-2 s of CPU, docs/performance.md); opening
    a model imports its SDK."""
    import subprocess
    import sys

    from tests.test_loop import make_ws

    ws = make_ws(tmp_path)
    blocked = (
        "import sys\nsys.modules['anthropic'] = None; sys.modules['openai'] = None  # any import fails\n"
        "import harnessopt.cli, harnessopt.loop, harnessopt.services, harnessopt.models, harnessopt.gateway\n"
        f"for command in ('log', 'status'):\n    assert harnessopt.cli.main([command, {str(ws)!r}]) == 0\n"
        f"sys.exit(harnessopt.cli.main(['run', {str(ws)!r}, '--dry-run']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout, proc.stderr)
    opened = (
        "import sys, harnessopt.loop\n"
        "from harnessopt.models import make_model\n"
        "assert 'anthropic' not in sys.modules and 'openai' not in sys.modules\n"
        "make_model('anthropic', env={'ANTHROPIC_API_KEY': 'k'})\n"
        "assert 'anthropic' in sys.modules and 'openai' not in sys.modules\n"
        "make_model('openai', env={'OPENAI_API_KEY': 'k'})\n"
        "assert 'openai' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", opened], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
