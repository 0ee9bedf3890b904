"""Test support: make_ws, with_more_train, leaky_workspace, MOTTO (shared by several test modules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from harnessopt.commands.demo import DEMO_DATA, demo_config
from harnessopt.workspace.core import init_workspace

# The demo skill's line its scripted optimizer edits, and what the scripted target answers to: FORM
# in the skill makes it answer the bare city (the largest), FORM and SEAT the capital.
DEMO_LINE = "Be friendly and helpful. Explain your answer so the user learns something."
FORM = "Reply with only the city name: no sentence, no explanation, no punctuation."
SEAT = "A country's capital is often not its largest city: name the seat of government."


def make_ws(
    tmp_path: Path,
    *,
    tasks: Path = DEMO_DATA / "tasks.jsonl",
    model: Path = DEMO_DATA / "model.yaml",
    **cfg_updates,
) -> Path:
    """The demo's workspace (or its skill with ``tasks`` and a scripted ``model``), local sandbox;
    ``cfg_updates``: a section name and the fields to change in it, or a top-level setting's value."""
    cfg = demo_config("local")
    cfg.optimizer = cfg.optimizer.model_copy(update={"unsafe_host": True})  # its bash runs on this host
    for name, values in cfg_updates.items():
        current = getattr(cfg, name)
        setattr(cfg, name, current.model_copy(update=values) if isinstance(values, dict) else values)
    ws = tmp_path / "ws"
    init_workspace(
        ws,
        DEMO_DATA / "skill",
        tasks,
        config=cfg,
        extra_files={"scripted_model.yaml": model},
        announce=lambda _m: None,
    )
    return ws


def scripted_edits(tmp_path: Path, edits: dict[str, tuple[str, str, str]]) -> Path:
    """The demo's script with its per-round optimizer rules replaced: for each ``name: (when, old,
    new)`` a brief matching ``when`` (a regex on the first user message) makes one edit of
    skill/SKILL.md, ``old`` to ``new``, and replies "Edit of NAME"."""
    script = yaml.safe_load((DEMO_DATA / "model.yaml").read_text())
    keep = [
        r
        for r in script["rules"]
        if not (r.get("role") == "optimizer" and "Round" in str(r.get("first_user")))
    ]
    mine: list[dict[str, Any]] = []
    for name, (when, old, new) in edits.items():
        edit = {"command": "str_replace", "path": "skill/SKILL.md", "old_str": old, "new_str": new}
        mine.append({"role": "optimizer", "first_user": when, "turn": 1,
                     "tool_use": [{"name": "str_replace_based_edit_tool", "input": edit}]})  # fmt: skip
        mine.append({"role": "optimizer", "first_user": when, "turn": 2, "reply": f"Edit of {name}\n\nwhy"})
    script["rules"] = mine + keep
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(script, sort_keys=False))
    return path


MOTTO = "Every ship that enters the harbour must signal twice before sunset"


def leaky_workspace(
    tmp_path: Path,
    new_str: str,
    extra_rules: list[dict] | None = None,
    *,
    small: bool = False,
    **cfg_updates: Any,
) -> Path:
    """The demo workspace with one more train task (a long gold answer) and a round-1 optimizer
    that writes ``new_str`` into the skill (after running ``extra_rules``' tool calls first).
    ``small``: 4 train and 5 val tasks, no test split (a round in a fraction of the time)."""
    script = yaml.safe_load((DEMO_DATA / "model.yaml").read_text())
    rules = [
        r
        for r in script["rules"]
        if not (r.get("role") == "optimizer" and "Round 1" in str(r.get("first_user")))
    ]
    mine: list[dict] = list(extra_rules or [])
    n = len(mine)
    old = DEMO_LINE
    mine.append(
        {
            "role": "optimizer",
            "first_user": "# Round 1:",
            "turn": n + 1,
            "tool_use": [
                {
                    "name": "str_replace_based_edit_tool",
                    "input": {
                        "command": "str_replace",
                        "path": "skill/SKILL.md",
                        "old_str": old,
                        "new_str": new_str,
                    },
                }
            ],
        }
    )
    mine.append(
        {
            "role": "optimizer",
            "first_user": "# Round 1:",
            "turn": n + 2,
            "reply": "Answer with the city name only",
        }
    )
    script["rules"] = mine + rules
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.yaml").write_text(yaml.safe_dump(script, sort_keys=False))
    tasks = (DEMO_DATA / "tasks.jsonl").read_text()
    if small:
        rows = [json.loads(x) for x in tasks.splitlines() if x.strip()]
        keep = [r for r in rows if r["split"] == "train"][:3] + [r for r in rows if r["split"] == "val"][:5]
        tasks = "".join(json.dumps(r) + "\n" for r in keep)
    motto = {
        "id": "harbour-motto",
        "input": "Recite the harbour office motto.",
        "answer": MOTTO,
        "split": "train",
    }
    (src / "tasks.jsonl").write_text(tasks.rstrip("\n") + "\n" + json.dumps(motto) + "\n")
    return make_ws(tmp_path, tasks=src / "tasks.jsonl", model=src / "model.yaml", **cfg_updates)


def with_more_train(tmp: Path, n: int) -> Path:
    """The demo's tasks and ``n`` more train tasks the scripted target gets wrong whatever the skill."""
    lines = (DEMO_DATA / "tasks.jsonl").read_text().splitlines()
    more = [
        json.dumps(
            {
                "id": f"isle{i:02d}",
                "input": f"What is the capital of Isle {i}?",
                "answer": "Port",
                "split": "train",
            }
        )
        for i in range(n)
    ]
    path = tmp / "tasks.jsonl"
    path.write_text("\n".join([*lines, *more]) + "\n")
    return path
