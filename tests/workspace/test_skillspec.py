"""SKILL.md validation: each Agent Skills rule accepts the good case and rejects the bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.workspace.skillspec import read_skill, skill_body


def make_skill(tmp_path: Path, text: str, folder: str = "skill") -> Path:
    skill = tmp_path / folder
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(text, encoding="utf-8")
    return skill


GOOD = """---
name: pdf-tools
description: Extract text and tables from PDF files. Use when the user mentions PDFs.
license: MIT
compatibility: Needs python3 and poppler-utils
metadata:
  author: someone
  version: "1.0"
allowed-tools: Bash(pdftotext:*) Read
---

# PDF tools

Run `pdftotext` first.
"""


def test_valid_skill(tmp_path: Path) -> None:
    info = read_skill(make_skill(tmp_path, GOOD))
    assert info.name == "pdf-tools"
    assert info.description.startswith("Extract text")
    assert info.body == "# PDF tools\n\nRun `pdftotext` first."
    assert info.front_matter["metadata"] == {"author": "someone", "version": "1.0"}
    assert skill_body(tmp_path / "skill") == info.body


def test_minimal_skill_with_crlf_and_no_bom(tmp_path: Path) -> None:
    text = "---\r\nname: a\r\ndescription: d\r\n---\r\nBody\r\n"
    info = read_skill(make_skill(tmp_path / "crlf", text))
    assert (info.name, info.description, info.body) == ("a", "d", "Body")
    # a byte-order mark first: the reference validator refuses it ("must start with ---"); init
    # accepted it and committed it (QA)
    with pytest.raises(UserError, match="starts with a byte-order mark"):
        read_skill(make_skill(tmp_path / "bom", "\ufeff" + text))


def test_expect_name_matches_folder(tmp_path: Path) -> None:
    skill = make_skill(tmp_path, GOOD, folder="pdf-tools")
    assert read_skill(skill, expect_name="pdf-tools").name == "pdf-tools"
    with pytest.raises(UserError, match="must match the skill folder name 'other'"):
        read_skill(skill, expect_name="other")


def fm(**fields: str) -> str:
    base = {"name": "ok-name", "description": "Does things."}
    base.update(fields)
    body = "".join(f"{k}: {v}\n" for k, v in base.items() if v != "<omit>")
    return f"---\n{body}---\nBody\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("no front matter\n", "must start with a '---' line"),
        ("---\nname: a\ndescription: b\n", "not closed"),
        ("---\nname: [a\n---\n", "not valid YAML"),
        ("---\n- a\n- b\n---\n", "must be a YAML mapping"),
        (fm(name="<omit>"), "'name' is required"),
        (fm(name='""'), "'name' must be a non-empty string"),
        (fm(name="123"), "'name' must be a non-empty string"),
        (fm(name="a" * 65), "'name' is 65 characters"),
        (fm(name="PDF-tools"), "may only use a-z, 0-9 and single hyphens"),
        (fm(name="-pdf"), "single hyphens"),
        (fm(name="pdf-"), "single hyphens"),
        (fm(name="pdf--tools"), "single hyphens"),
        (fm(name="pdf_tools"), "single hyphens"),
        (fm(description="<omit>"), "'description' must be a non-empty string"),
        (fm(description='"   "'), "'description' must be a non-empty string"),
        (fm(description="x" * 1025), "'description' is 1025 characters"),
        (fm(compatibility="y" * 501), "'compatibility' is 501 characters"),
        (fm(compatibility='""'), "'compatibility' must be a non-empty string"),
        (fm(license="[1]"), "'license' must be a string"),
        (fm(**{"allowed-tools": "[Bash, Read]"}), "'allowed-tools' must be a string"),
        (fm(metadata="just text"), "'metadata' must map string keys to string values"),
        (fm(metadata="{version: 1.0}"), "'metadata' must map string keys to string values"),
        (fm(descripton="typo"), "unknown front matter key 'descripton'"),
    ],
)
def test_invalid_front_matter(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(UserError) as info:
        read_skill(make_skill(tmp_path, text))
    assert needle in str(info.value)
    assert "SKILL.md" in str(info.value)
    assert "\n" not in str(info.value)


def test_limits_are_inclusive(tmp_path: Path) -> None:
    text = fm(name="a" * 64, description="d" * 1024, compatibility="c" * 500)
    info = read_skill(make_skill(tmp_path, text))
    assert len(info.name) == 64 and len(info.description) == 1024


def test_missing_dir_and_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        read_skill(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="has no SKILL.md"):
        skill_body(tmp_path / "empty")


def test_hostile_yaml_is_a_user_error_not_a_crash(tmp_path: Path) -> None:
    deep = "---\nname: " + "[" * 20_000 + "\n---\nBody\n"
    with pytest.raises(UserError, match="not valid YAML") as info:
        read_skill(make_skill(tmp_path, deep))
    assert "\n" not in str(info.value)


def test_unknown_key_is_reported_before_field_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown front matter key 'b'"):
        read_skill(make_skill(tmp_path, "---\nname: BAD\nc: 1\nb: 2\n---\n"))
    with pytest.raises(UserError, match="unknown front matter key '1'") as info:
        read_skill(make_skill(tmp_path, "---\nname: ok\ndescription: d\n1: x\n---\n"))
    assert "--skill-rule-off unknown-keys" in str(info.value)  # how to keep a host's own keys
