"""Read and validate an Agent Skills directory (``SKILL.md`` with YAML front matter).

Rules (agentskills.io specification): ``name`` 1-64 characters of ``a-z``, ``0-9`` and single
hyphens, not starting or ending with one; ``description`` 1-1024 characters; optional
``license`` (string), ``compatibility`` (string, at most 500 characters), ``metadata``
(mapping of string keys to string values) and ``allowed-tools`` (space-separated string). Any
other key is an error, because a typo like ``descripton`` would otherwise silently drop the
description that decides when the skill is used.

The spec also asks that ``name`` match the skill's folder name; ``init`` checks it on the folder
it is given (a workspace keeps the skill in ``skill/``, so the rounds cannot). A key given twice is
an error (the spec's YAML refuses it; PyYAML would silently keep the last value).

Two spec rules can be turned off, for a skill that must break them (``init --skill-rule-off``,
recorded as ``checks.skill_rules_off``): ``folder-name`` (name and folder may differ) and
``unknown-keys`` (front matter keys outside the spec, e.g. a host's own, are kept and not checked).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from harnessopt.errors import UserError, not_utf8
from harnessopt.util.text import FrontMatterError, duplicate_key, load_yaml, split_front_matter

SKILL_FILE = "SKILL.md"
RULES_OFF = ("folder-name", "unknown-keys")  # spec rules a user may turn off (checks.skill_rules_off)
OPTIONAL_KEYS = ("license", "compatibility", "metadata", "allowed-tools")
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME, MAX_DESCRIPTION, MAX_COMPATIBILITY = 64, 1024, 500
_NAME_HINT = "lowercase letters, digits and hyphens, e.g. pdf-tools"
_DESCRIPTION_RULE = "'description' must be a non-empty string saying what the skill does and when to use it"


@dataclass(frozen=True)
class SkillInfo:
    """A validated skill: its front matter fields and the Markdown body after them."""

    name: str
    description: str
    body: str
    front_matter: dict[str, Any] = field(default_factory=dict)


def _fail(message: str) -> NoReturn:
    raise PydanticCustomError("skill_front_matter", message)


class SkillFrontMatter(BaseModel):
    """The front matter of ``SKILL.md``; each rule fails with the sentence the user sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """1-64 characters of a-z, 0-9 and single hyphens, not starting or ending with one."""
    description: str
    """What the skill does and when to use it, 1-1024 characters."""
    license: str | None = None
    """License name or file, free text."""
    compatibility: str | None = None
    """Environment requirements, at most 500 characters."""
    metadata: dict[str, str] | None = None
    """Extra string key/value pairs."""
    allowed_tools: str | None = Field(default=None, alias="allowed-tools")
    """Space-separated list of pre-approved tools."""

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, name: Any) -> Any:
        if name is None:
            _fail(f"'name' is required ({_NAME_HINT})")
        if not isinstance(name, str) or not name:
            _fail(f"'name' must be a non-empty string, got {name!r}")
        if len(name) > MAX_NAME:
            _fail(f"'name' is {len(name)} characters; shorten it to {MAX_NAME}")
        if not NAME_RE.match(name):
            _fail(
                f"'name' {name!r} may only use a-z, 0-9 and single hyphens, "
                "not starting or ending with a hyphen (e.g. pdf-tools)"
            )
        return name

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            _fail(_DESCRIPTION_RULE)
        if len(value) > MAX_DESCRIPTION:
            _fail(f"'description' is {len(value)} characters; shorten it to {MAX_DESCRIPTION}")
        return value

    @field_validator("license", "allowed_tools", mode="before")
    @classmethod
    def _plain_string(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            key = "allowed-tools" if info.field_name == "allowed_tools" else info.field_name
            _fail(f"{key!r} must be a string, got {type(value).__name__}")
        return value

    @field_validator("compatibility", mode="before")
    @classmethod
    def _compatibility(cls, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            _fail("'compatibility' must be a non-empty string (or left out)")
        if len(value) > MAX_COMPATIBILITY:
            _fail(f"'compatibility' is {len(value)} characters; shorten it to {MAX_COMPATIBILITY}")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            _fail("'metadata' must map string keys to string values (quote numbers: \"1.0\")")
        return value


def parse_skill_front_matter(meta: dict[Any, Any], where: str) -> SkillFrontMatter:
    """Validate a front-matter mapping; the first problem is a one-line ``UserError``."""
    try:
        return SkillFrontMatter.model_validate(meta)
    except ValidationError as e:
        raise UserError(f"{where}: {_first_problem(e)}") from e


def _first_problem(e: ValidationError) -> str:
    """One sentence for the first problem: an unknown key first, then fields in order."""
    errors = e.errors()
    unknown = sorted(
        str(err["loc"][0]) for err in errors if err["type"] in ("extra_forbidden", "invalid_key")
    )
    if unknown:
        allowed = ", ".join(("name", "description", *OPTIONAL_KEYS))
        return (
            f"unknown front matter key {unknown[0]!r}; allowed keys are {allowed} (to keep keys outside "
            "the spec: init --skill-rule-off unknown-keys, or checks.skill_rules_off in harnessopt.yaml)"
        )
    err = errors[0]
    if err["type"] == "missing":
        return f"'name' is required ({_NAME_HINT})" if err["loc"] == ("name",) else _DESCRIPTION_RULE
    if err["type"] == "skill_front_matter":
        return str(err["msg"])
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}; fix the front matter between the '---' lines"


def read_skill(skill_dir: Path, expect_name: str | None = None, rules_off: Collection[str] = ()) -> SkillInfo:
    """Read ``skill_dir/SKILL.md`` and check its front matter; every failure says what to fix.
    ``expect_name``: the folder name ``name`` must match; ``rules_off``: spec rules not checked."""
    path = _skill_file(skill_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(not_utf8(path, e)) from None
    if text.startswith("\ufeff"):  # the reference validator refuses it: "must start with ---"
        raise UserError(
            f"{path} starts with a byte-order mark, and SKILL.md must start with its front matter "
            "(---); save it as UTF-8 without one"
        )
    meta, body = _read_front_matter(text, str(path))
    known = ("name", "description", *OPTIONAL_KEYS)
    checked = {k: v for k, v in meta.items() if k in known} if "unknown-keys" in rules_off else meta
    spec = parse_skill_front_matter(checked, str(path))
    if expect_name is not None and spec.name != expect_name and "folder-name" not in rules_off:
        raise UserError(
            f"{path}: name {spec.name!r} must match the skill folder name {expect_name!r} (Agent Skills "
            "spec); rename one, or keep both with --skill-rule-off folder-name"
        )
    return SkillInfo(name=spec.name, description=spec.description, body=body.strip(), front_matter=meta)


def _read_front_matter(text: str, where: str) -> tuple[dict[Any, Any], str]:
    try:
        raw_yaml, body = split_front_matter(text)
    except FrontMatterError as e:
        raise UserError(f"{where}: the YAML front matter is not closed; add a '---' line after it") from e
    if raw_yaml is None:
        raise UserError(
            f"{where} must start with a '---' line opening the YAML front matter (name, description)"
        )
    try:
        meta = load_yaml(raw_yaml)
    except FrontMatterError as e:
        raise UserError(
            f"{where}: front matter is not valid YAML ({e.detail}); fix the YAML between the '---' lines"
        ) from e
    if not isinstance(meta, dict):
        raise UserError(f"{where}: front matter must be a YAML mapping with 'name' and 'description'")
    if twice := duplicate_key(raw_yaml):
        raise UserError(
            f"{where}: front matter key {twice!r} is given twice (only one value would count); keep one"
        )
    return meta, body


def skill_body(skill_dir: Path) -> str:
    """The instructions of the skill: SKILL.md after its front matter, stripped."""
    return read_skill(skill_dir).body


def _skill_file(skill_dir: Path) -> Path:
    skill_dir = Path(skill_dir)
    if skill_dir.exists() and not skill_dir.is_dir():
        raise UserError(f"{skill_dir} is a file; pass the skill's folder, the one that holds SKILL.md")
    if not skill_dir.is_dir():
        raise UserError(f"skill directory {skill_dir} does not exist; pass a folder that holds SKILL.md")
    path = skill_dir / SKILL_FILE
    if not path.is_file():
        raise UserError(
            f"{skill_dir} has no {SKILL_FILE}; a skill folder needs a SKILL.md with name and description"
        )
    return path
