"""Trigger tasks: a user query whose gold answer says whether the skill should load.

A task line is a trigger task when its ``answer`` is ``{"trigger": true|false}``. Whether the
skill loaded is read from the gateway's record of the run (the trusted side), never from what the
harness says: a response of the target with a ``tool_use`` of the runtime's loading tool naming the
skill (Claude Code's ``Skill`` tool, ``{"skill": NAME}``; the templates' ``load_skill``,
``{"name": NAME}``), or an OpenAI-style ``tool_calls`` entry of the same. A trigger run scores 1
when the skill loaded exactly when it should.

The harness learns that a task is a trigger run, and which other skills to install beside the
candidate, from the task's ``metadata.trigger`` (``with_catalogue``): ``{"distractors": [{"name",
"description", "skill_md"}]}``, read from the workspace's distractor skills (``trigger.distractors``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harnessopt.config import TriggerConfig
from harnessopt.errors import UserError
from harnessopt.protocols import Exchange, Task
from harnessopt.util.text import FrontMatterError, read_front_matter

LOADING_TOOLS = {"Skill": "skill", "load_skill": "name"}  # tool name -> the input key naming the skill
MISSED, FALSE_TRIGGER = "missed (should load)", "false trigger (near miss)"  # the verdicts of a wrong run
# failure class (rollout.taxonomy) of a trigger run scored wrong, by the verdict its feedback opens with
FAILURE_CLASS = {MISSED: "trigger missed", FALSE_TRIGGER: "false trigger"}
MAX_DISTRACTORS = 64
MAX_SKILL_MD = 64 * 1024


def is_trigger_task(task: Task) -> bool:
    """``answer`` is exactly ``{"trigger": bool}``."""
    a = task.answer
    return isinstance(a, dict) and set(a) == {"trigger"} and isinstance(a["trigger"], bool)


def should_load(task: Task) -> bool:
    return bool(task.answer["trigger"])


def default_objective(tasks: Sequence[Task]) -> str:
    """The objective ``init`` writes: trigger when every task is a trigger task, both when some are."""
    n = sum(is_trigger_task(t) for t in tasks)
    return "task" if n == 0 else "trigger" if n == len(tasks) else "both"


def for_objective(tasks: Sequence[Task], objective: str) -> list[Task]:
    """The tasks a round of ``objective`` runs: trigger tasks, the others, or all (``both``)."""
    if objective == "both":
        return list(tasks)
    want = objective == "trigger"
    return [t for t in tasks if is_trigger_task(t) == want]


def skill_name(skill_dir: Path) -> str:
    """SKILL.md's front matter ``name``, else the directory's name."""
    try:
        meta, _ = read_front_matter((skill_dir / "SKILL.md").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, FrontMatterError):
        return skill_dir.name
    name = meta.get("name")
    return name if isinstance(name, str) and name else skill_dir.name


def read_distractors(folder: Path, skill: str | None = None) -> list[dict[str, str]]:
    """The distractor skills under ``folder`` (one Agent Skills directory each): name, description
    and the SKILL.md text. A missing folder means none; a broken skill there, or a name another
    distractor or the skill itself (``skill``) has, is a UserError: a catalogue keeps one skill a
    name, and the clash was dropped unsaid (QA)."""
    if not folder.is_dir():
        return []
    found: list[dict[str, str]] = []
    seen = {skill: "the skill being optimized"} if skill else {}
    for d in sorted(p for p in folder.iterdir() if (p / "SKILL.md").is_file()):
        text = (d / "SKILL.md").read_text(encoding="utf-8", errors="replace")
        try:
            meta, _ = read_front_matter(text)
        except FrontMatterError as e:
            raise UserError(f"{d}/SKILL.md: {e}; fix the distractor skill or remove it") from None
        name, description = meta.get("name"), meta.get("description")
        if not isinstance(name, str) or not isinstance(description, str) or not name or not description:
            raise UserError(f"{d}/SKILL.md needs a 'name' and a 'description'; fix the distractor skill")
        if len(text) > MAX_SKILL_MD:
            raise UserError(f"{d}/SKILL.md is over {MAX_SKILL_MD // 1024} KiB; shorten the distractor skill")
        if name in seen:
            raise UserError(
                f"{d}/SKILL.md is named '{name}', as {seen[name]} is; a catalogue holds one skill a "
                "name: rename the distractor or remove it"
            )
        seen[name] = f"{d.name}/"
        found.append({"name": name, "description": description, "skill_md": text})
    if len(found) > MAX_DISTRACTORS:
        raise UserError(
            f"{folder} holds {len(found)} skills; at most {MAX_DISTRACTORS} distractors are installed"
        )
    return found


def with_catalogue(tasks: Iterable[Task], distractors: list[dict[str, str]]) -> list[Task]:
    """Trigger tasks carry ``metadata.trigger`` (the distractors to install); others are unchanged."""
    return [
        dataclasses.replace(t, metadata={**t.metadata, "trigger": {"distractors": distractors}})
        if is_trigger_task(t)
        else t
        for t in tasks
    ]


def loading_calls(exchanges: Sequence[Exchange]) -> list[str]:
    """The skills the model asked to load in these exchanges, in order."""
    names: list[str] = []
    for x in exchanges:
        for name, tool_input in _tool_calls(x.response):
            key = LOADING_TOOLS.get(name)
            if key is not None and isinstance(tool_input, dict):
                names.append(str(tool_input.get(key, "")).lstrip("/"))
    return names


def offered(exchanges: Sequence[Exchange]) -> bool:
    """Whether any request gave the model a loading tool (else loading is not measured)."""
    for x in exchanges:
        for tool in (x.request or {}).get("tools") or []:
            if isinstance(tool, dict):
                name = tool.get("name") or (tool.get("function") or {}).get("name")
                if name in LOADING_TOOLS:
                    return True
    return False


def loaded(exchanges: Sequence[Exchange], skill: str) -> bool | None:
    """True when the model loaded ``skill``; None when no request offered a loading tool."""
    if skill in loading_calls(exchanges):
        return True
    return False if offered(exchanges) else None


def score(task: Task, skill: str, exchanges: Sequence[Exchange]) -> tuple[float, str]:
    """The built-in trigger score (1 when the skill loaded exactly when it should) and feedback
    the optimizer reads on train runs: what the query was, what should and what did happen."""
    should = should_load(task)
    calls = loading_calls(exchanges)
    did = skill in calls
    others = sorted({c for c in calls if c != skill})
    seen = f"; it loaded {', '.join(others)} instead" if others and not did else ""
    if not offered(exchanges):
        seen += "; no request offered a skill-loading tool (Skill or load_skill): is this a trigger harness?"
    verdict = "correct" if did == should else (MISSED if should else FALSE_TRIGGER)
    feedback = (
        f"trigger {verdict}: the skill '{skill}' {'loaded' if did else 'did not load'}; "
        f"it should {'' if should else 'not '}load for this query{seen}"
    )
    return (1.0 if did == should else 0.0), feedback


def failure_class(feedback: str) -> str | None:
    """``trigger missed`` or ``false trigger`` when ``feedback`` is the trigger score's of a wrong
    run (``score``), else None."""
    for verdict, kind in FAILURE_CLASS.items():
        if feedback.startswith(f"trigger {verdict}: "):
            return kind
    return None


def _tool_calls(response: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """(name, input) of every tool call in a Messages or Chat Completions response body."""
    if not isinstance(response, dict):
        return []
    calls: list[tuple[str, Any]] = []
    for block in response.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            calls.append((str(block.get("name")), block.get("input")))
    for choice in response.get("choices") or []:
        for call in ((choice or {}).get("message") or {}).get("tool_calls") or []:
            fn = (call or {}).get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                args = None
            calls.append((str(fn.get("name")), args))
    return calls


def round_tasks(
    ws_root: Path, objective: str, distractors: str, tasks: Sequence[Task], split: str
) -> list[Task]:
    """The tasks of ``split`` a round of ``objective`` runs, trigger tasks carrying the catalogue
    of distractor skills; a train or val split without a task of the objective is a UserError."""
    mine = for_objective(tasks, objective)
    kinds = ["trigger", "task"] if objective == "both" else [objective]  # both: each side needs its own
    for kind in kinds if split in ("train", "val") and tasks else []:
        if not for_objective(mine, kind):
            what = 'trigger tasks (answer {"trigger": true|false})' if kind == "trigger" else "task tasks"
            raise UserError(
                f"objective: {objective}, but the {split} split holds no {what}; add some to "
                f'tasks/{split}.jsonl and commit, or set another objective (docs/workspace.md, "Objectives")'
            )
    if objective == "task":
        return mine
    if distractors != TriggerConfig().distractors and not (ws_root / distractors).is_dir():
        raise UserError(  # a misspelt folder measured triggering with no competing skill, silently
            f"trigger.distractors: {ws_root / distractors} is not a folder; fix the setting or "
            "create it (one Agent Skills directory per distractor)"
        )
    return with_catalogue(mine, read_distractors(ws_root / distractors, skill_name(ws_root / "skill")))
