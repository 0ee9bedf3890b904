"""Adoption of accepted edits: a SKILL.md front matter field is matched by its value, as a skill
catalogue shows it to the model, not by its ``key: value`` line (harnessopt.reporting.adoption)."""

from __future__ import annotations

from pathlib import Path

import git

from harnessopt.reporting.adoption import Added, _norm, added_rules
from tests.support.trigger_ws import NEW_DESCRIPTION, SKILL_MD

FOLDED = """---
name: csv-to-json
description: >
  Converts comma separated or tabular data
  (CSV files, spreadsheet exports) into JSON records.
---
# CSV to JSON

Read the rows with Python's csv module and print a JSON list of objects.
Always quote the header names as JSON keys.
"""
# what the tool-agent template's catalogue put in the system prompt after the accepted edit
RECEIVED = (
    "These skills are available; when a request matches a skill's description, call load_skill:\n"
    "- chart-maker: Makes charts and plots from spreadsheet data.\n"
    "- csv-to-json: Converts comma separated or tabular data (CSV files, spreadsheet exports) into"
    " JSON records.\n"
)


def _commit(repo: git.Repo, root: Path, text: str) -> str:
    (root / "skill").mkdir(exist_ok=True)
    (root / "skill" / "SKILL.md").write_text(text)
    repo.index.add(["skill/SKILL.md"])
    return repo.index.commit("edit").hexsha


def test_a_front_matter_field_is_one_rule_matched_by_its_value(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path)
    before = _commit(repo, tmp_path, SKILL_MD)
    after = _commit(repo, tmp_path, FOLDED)
    rules = added_rules(repo, before, after)
    value = "Converts comma separated or tabular data (CSV files, spreadsheet exports) into JSON records."
    assert rules == [
        Added("skill/SKILL.md", f"description: {value}", seen_as=value),
        Added("skill/SKILL.md", "Always quote the header names as JSON keys."),  # a body line: itself
    ]  # the folded lines of the front matter are not rules of their own
    assert _norm(rules[0].seen_as) in _norm(RECEIVED) and _norm(rules[0].text) not in _norm(RECEIVED)


def test_a_one_line_description_edit_is_matched_without_its_key(tmp_path: Path) -> None:
    repo = git.Repo.init(tmp_path)
    before = _commit(repo, tmp_path, SKILL_MD)
    after = _commit(
        repo, tmp_path, SKILL_MD.replace("description: Converts CSV files to JSON.", NEW_DESCRIPTION)
    )
    (rule,) = added_rules(repo, before, after)
    assert rule.text == NEW_DESCRIPTION and rule.seen_as == NEW_DESCRIPTION.removeprefix("description: ")
