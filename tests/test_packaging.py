"""A wheel (not only an editable checkout) carries the templates, the sandbox build files and the demo."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_carries_templates_sandbox_files_and_demo(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("harnessopt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in ("chat", "tool-agent", "claude-code", "command"):
        assert f"harnessopt/workspace_templates/{template}/run.py" in names
    for name in (
        "workspace_templates/scorer.py",
        "sandbox/image/context/Dockerfile",
        "sandbox/image/context/runner.py",
    ):
        assert f"harnessopt/{name}" in names
    for name in ("model.yaml", "tasks.jsonl", "skill/SKILL.md"):
        assert f"harnessopt/data/demo/{name}" in names
