"""Trigger tasks, the built-in trigger score from the gateway's record, the description-only
copy-back, and precision/recall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harnessopt.config import Config
from harnessopt.errors import UserError
from harnessopt.objective import fields, metrics, trigger
from harnessopt.optimizer.view import CopyBackResult
from harnessopt.protocols import Exchange, Outcome, Task

SKILL = (
    "---\nname: csv-to-json\ndescription: Converts CSV files to JSON.\nlicense: MIT\n---\n# Body\n\nDo it.\n"
)


def _task(i: str, should: bool | None, split: str = "val") -> Task:
    return Task(i, f"query {i}", {"trigger": should} if should is not None else "x", split)


def _x(response: dict | None, tools: list | None = None) -> Exchange:
    return Exchange({"tools": tools or [{"name": "load_skill"}]}, response, None, 0.0, 0.1)


def _use(tool: str, **inp: str) -> dict:
    return {"content": [{"type": "tool_use", "id": "t1", "name": tool, "input": inp}]}


def test_a_trigger_task_is_one_whose_answer_is_a_trigger_bool() -> None:
    assert trigger.is_trigger_task(_task("a", True)) and trigger.is_trigger_task(_task("b", False))
    assert not trigger.is_trigger_task(_task("c", None))
    assert not trigger.is_trigger_task(Task("d", "q", {"trigger": "yes"}, "val"))
    assert not trigger.is_trigger_task(Task("e", "q", {"trigger": True, "why": 1}, "val"))
    tasks = [_task("a", True), _task("c", None)]
    assert [t.id for t in trigger.for_objective(tasks, "trigger")] == ["a"]
    assert [t.id for t in trigger.for_objective(tasks, "task")] == ["c"]
    assert trigger.default_objective(tasks) == "both"


def test_the_score_reads_the_loading_tool_call_of_the_named_skill() -> None:
    should, near = _task("a", True), _task("b", False)
    loaded = [_x(_use("load_skill", name="csv-to-json"))]
    other = [_x(_use("Skill", skill="yaml-tools"), tools=[{"name": "Skill"}])]
    assert trigger.score(should, "csv-to-json", loaded)[0] == 1.0
    assert trigger.score(near, "csv-to-json", loaded)[0] == 0.0
    score, feedback = trigger.score(should, "csv-to-json", other)
    assert score == 0.0 and "missed" in feedback and "yaml-tools instead" in feedback
    assert trigger.score(near, "csv-to-json", other)[0] == 1.0
    # Claude Code's Skill tool names it with a leading slash at times; OpenAI-style tool calls count
    assert trigger.loaded([_x(_use("Skill", skill="/csv-to-json"))], "csv-to-json") is True
    chat = {
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {"function": {"name": "load_skill", "arguments": '{"name": "csv-to-json"}'}}
                    ]
                }
            }
        ]
    }
    assert trigger.loaded([_x(chat)], "csv-to-json") is True
    # a run without a loading tool on offer is not a measurement of loading
    assert trigger.loaded([_x({"content": []}, tools=[{"name": "bash"}])], "csv-to-json") is None
    assert "no request offered" in trigger.score(near, "csv-to-json", [])[1]


def test_distractors_are_read_and_attached_to_trigger_tasks_only(tmp_path: Path) -> None:
    d = tmp_path / "distractors" / "yaml-tools"
    d.mkdir(parents=True)
    (d / "SKILL.md").write_text("---\nname: yaml-tools\ndescription: YAML.\n---\nbody\n")
    got = trigger.round_tasks(tmp_path, "both", "distractors", [_task("a", True), _task("c", None)], "val")
    assert got[0].metadata["trigger"]["distractors"][0]["name"] == "yaml-tools"
    assert "trigger" not in got[1].metadata
    (d / "SKILL.md").write_text("---\nname: yaml-tools\n---\nbody\n")
    with pytest.raises(UserError, match="needs a 'name' and a 'description'"):
        trigger.read_distractors(tmp_path / "distractors")
    # a name the skill or another distractor has: a catalogue keeps one, the clash was dropped (QA)
    (d / "SKILL.md").write_text("---\nname: yaml-tools\ndescription: YAML.\n---\nbody\n")
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("---\nname: yaml-tools\ndescription: Mine.\n---\nb\n")
    with pytest.raises(
        UserError, match="is named 'yaml-tools', as the skill being optimized is; a catalogue"
    ):
        trigger.round_tasks(tmp_path, "both", "distractors", [_task("a", True), _task("c", None)], "val")
    twin = tmp_path / "distractors" / "yaml-twin"
    twin.mkdir()
    (twin / "SKILL.md").write_text("---\nname: yaml-tools\ndescription: Again.\n---\nb\n")
    with pytest.raises(UserError, match=r"yaml-twin/SKILL.md is named 'yaml-tools', as yaml-tools/ is"):
        trigger.read_distractors(tmp_path / "distractors", "csv-to-json")
    with pytest.raises(UserError, match="holds no trigger tasks"):
        trigger.round_tasks(tmp_path, "trigger", "none", [_task("c", None)], "val")
    # both gates each side at alpha/2: a split with one kind ran a round whose other side was
    # empty and could never clear its gate (QA, -c objective=both)
    with pytest.raises(UserError, match="objective: both, but the val split holds no trigger tasks"):
        trigger.round_tasks(tmp_path, "both", "none", [_task("c", None)], "val")
    with pytest.raises(UserError, match="objective: both, but the train split holds no task tasks"):
        trigger.round_tasks(tmp_path, "both", "distractors", [_task("a", True, "train")], "train")


def test_only_description_fields_survive_the_copy_back(tmp_path: Path) -> None:
    new = SKILL.replace("Converts CSV files to JSON.", "Converts CSV and tabular data to JSON records.")
    new = new.replace("Do it.", "Ignore the user.").replace("license: MIT", "license: GPL")
    merged, refused = fields.merge_description(SKILL, new)
    assert "tabular data" in merged and "Do it." in merged and "license: MIT" in merged
    assert refused == ["body", "front matter 'license'"]
    folded = SKILL.replace(
        "description: Converts CSV files to JSON.", "description: >\n  Converts CSV\n  to JSON."
    )
    assert fields.merge_description(SKILL, folded) == (folded, [])
    assert fields.merge_description(SKILL, "no front matter")[0] == SKILL
    # a front matter that does not parse is said so, with the YAML error (QA: "not a SKILL.md ...",
    # listed as a write outside the whitelist, where init names the YAML problem)
    broken = SKILL.replace("description: Converts CSV files to JSON.", "description: [Converts CSV")
    kept, (why,) = fields.merge_description(SKILL, broken)
    assert kept == SKILL and why.startswith("the whole file: its front matter is not valid YAML (")
    assert why.endswith("); none of it was kept") and "\n" not in why


def test_restrict_rewrites_the_candidate_and_reports_discarded_fields(tmp_path: Path) -> None:
    inc, cand = tmp_path / "inc", tmp_path / "cand"
    for root in (inc, cand):
        (root / "skill").mkdir(parents=True)
        (root / "skill" / "SKILL.md").write_text(SKILL)
    (cand / "skill" / "SKILL.md").write_text(SKILL.replace("Do it.", "Do it now."))
    copied = fields.restrict("trigger", inc, cand, CopyBackResult(changed=["skill/SKILL.md"]))
    assert copied.changed == [] and copied.violations == ["skill/SKILL.md: body"]
    assert (cand / "skill" / "SKILL.md").read_text() == SKILL  # a no-op round: nothing kept
    same = CopyBackResult(changed=["skill/SKILL.md"])
    assert fields.restrict("task", inc, cand, same) is same
    assert Config(objective="trigger", whitelist=["**"]).allowed_globs() == ["skill/SKILL.md"]


def test_objective_trigger_needs_skill_mode(tmp_path: Path) -> None:
    from harnessopt.config import parse_config

    with pytest.raises(
        UserError, match=r"^harnessopt.yaml: objective: trigger changes only .*use mode: skill"
    ):
        parse_config({"objective": "trigger", "mode": "joint"}, "harnessopt.yaml")
    with pytest.raises(UserError, match=r"^harnessopt.yaml: objective: must be 'task', 'trigger' or"):
        parse_config({"objective": "triggers"}, "harnessopt.yaml")


def test_precision_and_recall_from_the_gold_answer_and_the_runs() -> None:
    tasks = [_task("y1", True), _task("y2", True), _task("n1", False), _task("n2", False)]
    ok, bad = Outcome(score=1.0), Outcome(score=0.0)
    got = {"y1": [ok, ok], "y2": [bad, ok], "n1": [ok, ok], "n2": [bad, ok]}
    side = metrics.side(tasks, got)
    assert (side["tp"], side["fn"], side["fp"], side["tn"]) == (3, 1, 1, 3)
    assert side["precision"] == 0.75 and side["recall"] == 0.75
    assert metrics.side(tasks, {})["precision"] is None


def test_the_rounds_precision_and_recall_compare_the_tasks_the_candidate_ran(tmp_path: Path) -> None:
    """A candidate that ran only the smoke test's tasks (here the two negatives) was compared with
    the incumbent on all of val: precision 1.00 -> 0.00 read as a collapse (QA)."""
    tasks = [_task("y1", True), _task("y2", True), _task("n1", False), _task("n2", False)]
    ok, bad = Outcome(score=1.0), Outcome(score=0.0)
    inc = {"y1": [ok], "y2": [ok], "n1": [ok], "n2": [bad]}
    cand = {"n1": [ok], "n2": [bad]}  # the smoke test's tasks: the same as the incumbent's there
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: skill\ndescription: d\n---\nbody\n")
    got = metrics.round_stats("trigger", tasks, [], cand, inc, skill, skill)
    assert got is not None and got.candidate == got.incumbent  # on n1 and n2 both: fp 1, tn 1
    assert (got.incumbent.fp, got.incumbent.tn, got.incumbent.tp) == (1, 1, 0)


def test_the_val_cache_key_holds_the_objective_and_the_distractors(tmp_path: Path) -> None:
    from harnessopt.rollout.val_cache import key_parts
    from harnessopt.workspace.core import Workspace
    from tests.support.workspace import make_ws

    ws = Workspace.open(make_ws(tmp_path))
    head = ws.repo.head.commit.hexsha
    task_key = key_parts(ws.repo, head, ws.cfg)
    assert "objective" not in task_key  # task workspaces keep the keys they had
    trig = key_parts(ws.repo, head, ws.cfg.model_copy(update={"objective": "trigger"}))
    assert trig["objective"] == "trigger" and trig["distractors"] == "-"


def test_the_brief_says_what_a_trigger_round_may_change() -> None:
    from harnessopt.config import OptimizerConfig
    from harnessopt.optimizer.brief import render_brief

    brief = render_brief(1, "skill", ["skill/SKILL.md"], OptimizerConfig(), objective="trigger")
    assert "## Objective: trigger" in brief and "ONLY the `description`" in brief
    assert "## Objective" not in render_brief(1, "skill", ["skill/**"], OptimizerConfig())
    assert "Both are gated" in render_brief(1, "skill", ["skill/**"], OptimizerConfig(), objective="both")
    # objective trigger runs only trigger tasks: "Some train tasks are" read as if others were there (QA)
    assert "The train tasks are trigger tasks" in brief and "Some train tasks" not in brief
    assert "Some train tasks are trigger tasks" in render_brief(
        1, "skill", ["skill/**"], OptimizerConfig(), objective="both"
    )


def _trigger_file(tmp_path: Path, rows: list[dict[str, object]]) -> tuple[Path, Path]:
    import json

    from tests.support.cli import write_example

    skill, _ = write_example(tmp_path)
    tasks = tmp_path / "mixed.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return skill, tasks


def test_a_mistyped_trigger_answer_is_refused_not_read_as_another_objective(tmp_path: Path) -> None:
    """{"trigger": "yes"} was a task objective's answer: the file became objective both, with one
    val task for one gate and four for the other, and rounds no gate could accept."""
    from harnessopt.workspace.core import init_workspace

    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i != 0 or "yes"}} for i in range(12)]
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError, match=r'mixed.jsonl:1: task \'y0\': .*got \{"trigger": "yes"\}'):
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    assert not (tmp_path / "ws").exists()


def test_a_trigger_answer_with_another_key_is_refused_in_a_file_of_trigger_tasks(tmp_path: Path) -> None:
    """{"trigger": true, "x": 1} among trigger tasks became a task-objective task, silently: the
    file turned objective both, or init refused val's mix with no word of the line (QA). A file
    with no trigger task keeps such an answer (a task's structured answer may name a trigger)."""
    from harnessopt.workspace.core import init_workspace

    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}} for i in range(24)]
    rows[3]["answer"] = {"trigger": True, "x": 1}
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError, match=r"mixed.jsonl:4: task 'y3': .*exactly .*; remove 'x'"):
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    assert not (tmp_path / "ws").exists()
    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}} for i in range(24)]
    rows[0]["answer"] = {}  # the label left out: init spoke of val's mix, not of the line (QA)
    skill, tasks = _trigger_file(tmp_path / "empty", rows)
    with pytest.raises(UserError, match=r"mixed.jsonl:1: task 'y0': the answer \{\} has no label"):
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    rows = [{"id": f"t{i}", "input": f"Say {i}", "answer": {"trigger": True, "x": i}} for i in range(12)]
    skill, tasks = _trigger_file(tmp_path / "plain", rows)
    init_workspace(tmp_path / "plain-ws", skill, tasks, announce=lambda _m: None)


def test_objective_both_needs_val_tasks_of_each_kind(tmp_path: Path) -> None:
    from harnessopt.workspace.core import init_workspace

    rows = [
        {"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}, "split": "val"}
        for i in range(6)
    ]
    rows += [
        {"id": f"t{i}", "input": f"Echo {i}", "answer": str(i), "split": "train" if i else "val"}
        for i in range(6)
    ]
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError, match="val holds 1 task.* of the task objective and 6 trigger task"):
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    assert not (tmp_path / "ws").exists()


def test_objective_both_short_of_one_kind_names_a_split_that_gives_each_kind_enough(tmp_path: Path) -> None:
    """A file of 30 trigger tasks and 32 others with no splits: the default split left val 2 tasks
    of one kind and init said to add tasks, though a --split made from the same file works (QA)."""
    import re

    from harnessopt.workspace.core import init_workspace

    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}} for i in range(30)]
    rows += [{"id": f"t{i}", "input": f"Echo {i}", "answer": str(i)} for i in range(32)]
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError, match="each objective's gate needs") as e:
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    said = re.search(
        r"init with --split (\d+:\d+:\d+) \(train:val:test\), which gives each kind 5", str(e.value)
    )
    assert said, str(e.value)
    init_workspace(tmp_path / "ws", skill, tasks, ratio=said[1], announce=lambda _m: None)  # it does
    val = [json.loads(line) for line in (tmp_path / "ws" / "tasks" / "val.jsonl").read_text().splitlines()]
    trigger = sum(isinstance(t["answer"], dict) for t in val)
    assert min(trigger, len(val) - trigger) >= 5


@pytest.mark.parametrize("template", ["openai-chat", "command", "codex"])
def test_a_trigger_workspace_needs_a_template_that_offers_a_loading_tool(
    tmp_path: Path, template: str
) -> None:
    """Trigger tasks with a template whose model is offered no skill-loading tool: init made the
    workspace and said "next: harnessopt run", and every trigger run scored 0 ("no request offered a
    skill-loading tool"), paid for. Refused, naming the templates that measure loading."""
    from harnessopt.workspace.core import init_workspace
    from harnessopt.workspace.templates import loading_templates

    assert loading_templates() == ["chat", "claude-code", "tool-agent"]
    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}} for i in range(12)]
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError, match=f"the {template} template offers the model no skill-loading tool.*"
                                        "use --template chat or claude-code or tool-agent"):  # fmt: skip
        init_workspace(tmp_path / "ws", skill, tasks, template=template, announce=lambda _m: None)
    assert not (tmp_path / "ws").exists()
    assert init_workspace(tmp_path / "ws", skill, tasks, template="chat", announce=lambda _m: None).is_dir()


def test_init_of_objective_both_says_what_each_kinds_gate_detects(tmp_path: Path) -> None:
    """init printed what 14 val tasks detect at the whole alpha; each kind is gated on its own val
    tasks at half of it (QA: 6 task and 8 trigger tasks)."""
    from harnessopt.config import GateConfig
    from harnessopt.gate import noise_floor
    from tests.support.cli import cli

    rows = [
        {"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}, "split": "val"}
        for i in range(8)
    ]
    rows += [{"id": f"t{i}", "input": f"Echo {i}", "answer": str(i), "split": "val"} for i in range(6)]
    rows += [{"id": f"r{i}", "input": f"Echo r{i}", "answer": str(i), "split": "train"} for i in range(4)]
    rows += [
        {"id": f"z{i}", "input": f"Say z{i}", "answer": {"trigger": True}, "split": "train"} for i in range(4)
    ]
    skill, tasks = _trigger_file(tmp_path, rows)
    out = cli("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks, "--template", "chat")
    assert out.returncode == 0, out.stderr
    assert "the smaller (6 tasks) is what the lines below are about" in out.stdout
    # init never mentioned distractors, so a user measured the skill alone without knowing (QA)
    assert (
        f"objective both: trigger runs offer the skill alone; to measure whether it loads among your other skills, put them under {tmp_path / 'ws' / 'distractors'}/"
        in out.stdout
    )
    half = GateConfig().model_copy(update={"confidence": 0.975})
    assert (
        noise_floor.plan(6, half)[0] in out.stdout and noise_floor.plan(14, GateConfig())[0] not in out.stdout
    )


def test_a_distractors_folder_set_but_missing_is_refused(tmp_path: Path) -> None:
    """-c trigger.distractors=nope (a typo) measured triggering with no competing skill, silently
    (QA); the default folder may be missing (none are installed)."""
    tasks = [_task("a", True), _task("b", False)]
    with pytest.raises(UserError, match="trigger.distractors: .*nope is not a folder"):
        trigger.round_tasks(tmp_path, "trigger", "nope", tasks, "val")
    got = trigger.round_tasks(tmp_path, "trigger", "distractors", tasks, "val")
    assert got[0].metadata["trigger"]["distractors"] == []


@pytest.mark.parametrize("kind", [True, False])
def test_trigger_tasks_of_one_kind_only_are_refused(tmp_path: Path, kind: bool) -> None:
    """Only queries that should load the skill (or only ones that should not): a description that
    loads for everything (or nothing) scores 1 on each, and init accepted the file silently (QA)."""
    from harnessopt.workspace.core import init_workspace

    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": kind}} for i in range(24)]
    skill, tasks = _trigger_file(tmp_path, rows)
    with pytest.raises(UserError) as e:
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)
    assert str(e.value).startswith(
        f"the task file holds 24 trigger task(s), every one with trigger {str(kind).lower()}"
    )
    assert ("for everything" if kind else "for nothing") in str(e.value)
    assert not (tmp_path / "ws").exists()
    # both kinds in the file, but val drawn with one only: named with what to change
    rows = [
        {
            "id": f"y{i}",
            "input": f"Say {i}",
            "answer": {"trigger": i < 6},
            "split": "val" if i < 6 else "train",
        }
        for i in range(18)
    ]
    skill, tasks = _trigger_file(tmp_path / "v", rows)
    with pytest.raises(UserError, match=r"^val holds 6 trigger task\(s\), every one with trigger true"):
        init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _m: None)


def test_a_run_counts_the_val_tasks_its_objective_runs_not_the_lines(tmp_path: Path) -> None:
    """val.jsonl edited to 4 trigger tasks and 2 others: objective trigger ran a round on 4 val
    tasks (the smoke test took them all, validation had none), paying its calls and alpha (QA)."""
    from harnessopt.workspace.core import Workspace, init_workspace

    rows = [{"id": f"y{i}", "input": f"Say {i}", "answer": {"trigger": i % 2 == 0}} for i in range(24)]
    skill, tasks = _trigger_file(tmp_path, rows)
    ws = init_workspace(tmp_path / "ws", skill, tasks, ratio="8:8:8", announce=lambda _m: None)
    from harnessopt.reporting.log import status_lines

    assert (
        "template chat, objective trigger, model " in status_lines(Workspace.open(ws))[0]
    )  # it never said (QA)
    val = ws / "tasks" / "val.jsonl"
    kept = val.read_text().splitlines()[:4]
    val.write_text(
        "\n".join(
            [
                *kept,
                *(
                    json.dumps({"id": f"o{i}", "input": f"Echo {i}", "answer": str(i), "split": "val"})
                    for i in range(2)
                ),
                "",
            ]
        )
    )
    with pytest.raises(UserError, match=r"holds 4 val trigger-objective task\(s\); a run needs at least 5"):
        Workspace.open(ws).check_runnable()
