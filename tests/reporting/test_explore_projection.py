"""benchmarks/explore_projection.py --keep: the world in which a chain's steps are kept. The target
must answer a group's isles right once the skill names the group, and only those, or no step would
be kept (or every one would) and the checkpoint share it measures would mean nothing."""

from __future__ import annotations

from pathlib import Path

from benchmarks.explore_projection import _answer_by_group
from harnessopt.gateway.models import ScriptedModel
from tests.support.workspace import DEMO_LINE, scripted_edits


def _answer(model: ScriptedModel, skill: str, isle: int) -> str:
    body = {
        "model": "scripted-demo-target",
        "max_tokens": 50,
        "system": skill,
        "messages": [{"role": "user", "content": f"What is the capital of Isle {isle}?"}],
    }
    return model.create(body, "target")["content"][0]["text"]


def test_a_group_named_in_the_skill_makes_the_target_answer_its_isles_and_no_others(tmp_path: Path) -> None:
    path = scripted_edits(tmp_path, {"step": ("Your step: (?P<s>s\\d+),", DEMO_LINE, DEMO_LINE + " x")})
    _answer_by_group(path, isles=56, rounds=2, steps=3, groups=23)
    model = ScriptedModel.from_yaml(path)
    # round 1, step s2 is group 1: isles 1, 24 and 47 (i mod 23 = 1)
    named = f"{DEMO_LINE} Isle group r1s2."
    assert [_answer(model, named, i) for i in (1, 24, 47)] == ["Port"] * 3
    assert all(_answer(model, named, i) != "Port" for i in (0, 2, 23, 25, 48))
    assert all(_answer(model, DEMO_LINE, i) != "Port" for i in (1, 24, 47))  # the group unnamed
    # two groups named: both groups' isles (round 2, step s1 is group 3)
    both = f"{DEMO_LINE} Isle group r1s2. Isle group r2s1."
    assert [_answer(model, both, i) for i in (1, 3, 26)] == ["Port"] * 3
    # "r1s1." is not "r1s10.": a step's group is named by its whole number
    assert _answer(model, f"{DEMO_LINE} Isle group r1s10.", 0) != "Port"
