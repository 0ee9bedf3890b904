"""The harness templates a workspace is made from (``workspace_templates/``): where they are, and
which names are templates (``init --template``, the config's ``template``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harnessopt.errors import UserError


def templates_dir() -> Path:
    """The harness templates: the repo's workspace_templates/, or the copy inside an installed wheel."""
    package = Path(__file__).resolve().parents[1]  # harnessopt/
    for candidate in (package.parent / "workspace_templates", package / "workspace_templates"):
        if candidate.is_dir():
            return candidate
    raise UserError("harness templates not found: reinstall harnessopt (pip install -e .)")


def known_templates() -> list[str]:
    return sorted(p.name for p in templates_dir().iterdir() if (p / "run.py").is_file())


def unknown_template(name: str) -> str | None:
    """What is wrong with ``name`` as a template (None: nothing)."""
    known = known_templates()
    return None if name in known else f"unknown template {name!r}; known templates: {', '.join(known)}"


def template_meta(name: str) -> dict[str, Any]:
    """The template's template.yaml: its description, ``image_with``, ``loads_skills``, ``memory_mb``,
    ``speaks`` (the OpenAI API its harness calls, when it is not the Messages API)."""
    import yaml

    return yaml.safe_load((templates_dir() / name / "template.yaml").read_text(encoding="utf-8")) or {}


def loads_skills(name: str) -> bool:
    """Does the template offer the model a skill-loading tool (``load_skill``, Claude Code's
    ``Skill``) that trigger runs are scored by? Its template.yaml says so (``loads_skills: true``)."""
    return bool(template_meta(name).get("loads_skills"))


def loading_templates() -> list[str]:
    """The templates whose trigger runs can measure whether the skill loaded."""
    return [t for t in known_templates() if loads_skills(t)]
