"""Read and validate an Agent Skills directory (``SKILL.md`` with YAML front matter).

Rules (agentskills.io specification): ``name`` 1-64 characters of ``a-z``, ``0-9`` and single
hyphens, not starting or ending with one; ``description`` 1-1024 characters; optional
``license`` (string), ``compatibility`` (string, at most 500 characters), ``metadata``
(mapping of string keys to string values) and ``allowed-tools`` (space-separated string). Any
other key is an error, because a typo like ``descripton`` would otherwise silently drop the
description that decides when the skill is used.

The spec also asks that ``name`` match the skill's folder name; a workspace keeps the skill in
``skill/``, so that check is opt-in (``expect_name``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harnessopt.errors import UserError

SKILL_FILE = "SKILL.md"
OPTIONAL_KEYS = ("license", "compatibility", "metadata", "allowed-tools")
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION, MAX_COMPATIBILITY = 64, 1024, 500


@dataclass(frozen=True)
class SkillInfo:
    """A validated skill: its front matter fields and the Markdown body after them."""

    name: str
    description: str
    body: str
    front_matter: dict[str, Any] = field(default_factory=dict)


def split_front_matter(text: str, where: str) -> tuple[str, str]:
    """Split ``---\\nYAML\\n---\\nbody`` into (yaml text, body); UserError when the fences are missing."""
    text = text.removeprefix("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise UserError(
            f"{where} must start with a '---' line opening the YAML front matter (name, description)"
        )
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    raise UserError(f"{where}: the YAML front matter is not closed; add a '---' line after it")


def read_skill(skill_dir: Path, expect_name: str | None = None) -> SkillInfo:
    """Read ``skill_dir/SKILL.md`` and check its front matter; every failure says what to fix."""
    path = _skill_file(skill_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path} is not UTF-8 text; re-save it as UTF-8") from e
    raw_yaml, body = split_front_matter(text, str(path))
    try:
        meta = yaml.safe_load(raw_yaml)
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"{path}: front matter is not valid YAML ({first}); fix the YAML between the '---' lines"
        ) from e
    if not isinstance(meta, dict):
        raise UserError(f"{path}: front matter must be a YAML mapping with 'name' and 'description'")
    _check_front_matter(meta, str(path))
    if expect_name is not None and meta["name"] != expect_name:
        raise UserError(f"{path}: name {meta['name']!r} must match the skill folder name {expect_name!r}")
    return SkillInfo(name=meta["name"], description=meta["description"], body=body.strip(), front_matter=meta)


def skill_body(skill_dir: Path) -> str:
    """The instructions of the skill: SKILL.md after its front matter, stripped."""
    return read_skill(skill_dir).body


def _skill_file(skill_dir: Path) -> Path:
    skill_dir = Path(skill_dir)
    if not skill_dir.is_dir():
        raise UserError(f"skill directory {skill_dir} does not exist; pass a folder that holds SKILL.md")
    path = skill_dir / SKILL_FILE
    if not path.is_file():
        raise UserError(
            f"{skill_dir} has no {SKILL_FILE}; a skill folder needs a SKILL.md with name and description"
        )
    return path


def _check_front_matter(meta: dict[Any, Any], where: str) -> None:
    unknown = sorted(str(k) for k in meta if k not in ("name", "description", *OPTIONAL_KEYS))
    if unknown:
        allowed = ", ".join(("name", "description", *OPTIONAL_KEYS))
        raise UserError(f"{where}: unknown front matter key {unknown[0]!r}; allowed keys are {allowed}")
    _check_name(meta.get("name"), where)
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise UserError(
            f"{where}: 'description' must be a non-empty string saying what the skill does and when to use it"
        )
    if len(description) > MAX_DESCRIPTION:
        raise UserError(
            f"{where}: 'description' is {len(description)} characters; shorten it to {MAX_DESCRIPTION}"
        )
    for key in ("license", "allowed-tools"):
        if key in meta and not isinstance(meta[key], str):
            raise UserError(f"{where}: {key!r} must be a string, got {type(meta[key]).__name__}")
    if "compatibility" in meta:
        value = meta["compatibility"]
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{where}: 'compatibility' must be a non-empty string (or left out)")
        if len(value) > MAX_COMPATIBILITY:
            raise UserError(
                f"{where}: 'compatibility' is {len(value)} characters; shorten it to {MAX_COMPATIBILITY}"
            )
    if "metadata" in meta:
        value = meta["metadata"]
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise UserError(
                f"{where}: 'metadata' must map string keys to string values (quote numbers: \"1.0\")"
            )


def _check_name(name: Any, where: str) -> None:
    if name is None:
        raise UserError(
            f"{where}: 'name' is required (lowercase letters, digits and hyphens, e.g. pdf-tools)"
        )
    if not isinstance(name, str) or not name:
        raise UserError(f"{where}: 'name' must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME:
        raise UserError(f"{where}: 'name' is {len(name)} characters; shorten it to {MAX_NAME}")
    if not NAME_RE.match(name):
        raise UserError(
            f"{where}: 'name' {name!r} may only use a-z, 0-9 and single hyphens, "
            "not starting or ending with a hyphen (e.g. pdf-tools)"
        )
