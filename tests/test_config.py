"""The workspace's settings (harnessopt.config) as users write them."""

from __future__ import annotations

import pytest
import yaml

from harnessopt.config import Config, apply_overrides, parse_assignment, parse_config
from harnessopt.errors import UserError


@pytest.mark.parametrize("check", ["leakage", "memorised", "datalike"])
def test_a_check_turned_off_as_the_docs_write_it(check: str) -> None:
    """docs/workspace.md says `checks.memorised: off`; YAML reads an unquoted off as false, which
    was refused with "must be 'reject', 'warn' or 'off', got False"."""
    raw = yaml.safe_load(f"checks:\n  {check}: off\n")
    assert getattr(parse_config(raw, "harnessopt.yaml").checks, check) == "off"
    key, value = parse_assignment(f"checks.{check}=off")
    assert getattr(apply_overrides(Config(), {key: value}).checks, check) == "off"
    with pytest.raises(UserError, match=f"checks.{check}: must be"):  # on is no setting of a check
        apply_overrides(Config(), dict([parse_assignment(f"checks.{check}=on")]))


def test_a_free_form_maps_key_may_hold_dots() -> None:
    """-c prices.gpt-4.1=[2,8] was "unknown setting": the key was split at every dot (QA)."""
    cfg = apply_overrides(Config(), dict([parse_assignment("prices.gpt-4.1=[2, 8]")]))
    assert tuple(cfg.prices["gpt-4.1"]) == (2.0, 8.0)
    assert apply_overrides(Config(), {"flags.v1.5": 1}).flags["v1.5"] == "1"
    with pytest.raises(UserError, match="unknown setting 'gate.nope.x'"):
        apply_overrides(Config(), {"gate.nope.x": 1})


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("model.target=", "model.target: must not be empty;"),
        (
            'prices={"*": [1]}',
            "prices.*: a price is [input, output] USD per million tokens, e.g. [3, 15], got [1];",
        ),
    ],
)
def test_a_setting_of_the_wrong_shape_is_said_in_the_settings_words(setting: str, said: str) -> None:
    """pydantic's own words ("String should have at least 1 character", "List should have at least
    2 items after validation, not 1") named no fix (QA)."""
    with pytest.raises(UserError) as e:
        apply_overrides(Config(), dict([parse_assignment(setting)]))
    assert said in str(e.value)


def test_null_on_the_command_line_sets_the_key_to_null() -> None:
    """-c search.explore=null was dropped as "a flag that was not given" (the workspace's 0 stayed,
    and the dry run printed the command back as if it had worked) (QA)."""
    zero = apply_overrides(Config(), {"search.explore": 0})
    assert zero.search.explore == 0
    assert apply_overrides(zero, dict([parse_assignment("search.explore=null")])).search.explore is None
    with pytest.raises(UserError, match="gate.confidence: expected a number, got None"):
        apply_overrides(Config(), dict([parse_assignment("gate.confidence=null")]))


@pytest.mark.parametrize("key", ["whitelist", "read_only"])
def test_an_invalid_glob_is_refused_when_the_settings_are_read(key: str) -> None:
    """An invalid whitelist glob was found at copy-back: after the round's rollouts and optimizer
    turns were paid for, and never in a round whose optimizer changed nothing (QA)."""
    with pytest.raises(UserError, match=rf"{key}: 'skill/\[z-a\]' is not a valid glob \(bad character range"):
        apply_overrides(Config(), {key: ["skill/**", "skill/[z-a]"]})
    with pytest.raises(UserError, match=rf"{key}: 'a\\\\' is not a valid glob"):
        parse_config({key: ["a\\"]}, "harnessopt.yaml")
    assert getattr(apply_overrides(Config(), {key: ["skill/[a-z]*.md", "!x"]}), key) == [
        "skill/[a-z]*.md",
        "!x",
    ]
