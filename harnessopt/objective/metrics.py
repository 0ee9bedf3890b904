"""The numbers users ask of triggering: precision and recall, the pass rate of task runs by
whether the skill loaded, and the description's length (the manifest's ``trigger`` field).

A trigger run is correct (score 1) when the skill loaded exactly when it should, so with the gold
answer a run's score says whether the skill loaded: should and correct is a true positive,
should and wrong a miss, should-not and wrong a false trigger. Precision is TP / (TP + FP) over
runs, recall TP / (TP + FN); each is None when its denominator is 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harnessopt.ledger.store import TriggerSide, TriggerStats
from harnessopt.objective.trigger import is_trigger_task, loaded, should_load, skill_name
from harnessopt.protocols import Outcome, Task, TaskResult
from harnessopt.util.text import FrontMatterError, read_front_matter


def confusion(tasks: Sequence[Task], got: Mapping[str, Sequence[Outcome]]) -> dict[str, int]:
    """True/false positives and negatives over the runs of the trigger tasks in ``got``."""
    c = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for t in tasks:
        if not is_trigger_task(t):
            continue
        for o in got.get(t.id, ()):
            if o.crashed:
                continue
            right = o.score >= 1.0
            c[("tp" if right else "fn") if should_load(t) else ("tn" if right else "fp")] += 1
    return c


def precision_recall(c: Mapping[str, int]) -> tuple[float | None, float | None]:
    p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else None
    r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else None
    return (None if p is None else round(p, 4)), (None if r is None else round(r, 4))


def side(tasks: Sequence[Task], got: Mapping[str, Sequence[Outcome]]) -> dict[str, Any]:
    """Precision, recall and the confusion counts of one side (candidate or incumbent)."""
    c = confusion(tasks, got)
    p, r = precision_recall(c)
    return {"precision": p, "recall": r, **c}


def pass_by_loading(tasks: Sequence[Task], results: Sequence[TaskResult], skill: str) -> dict[str, Any]:
    """Task runs (not trigger runs) split by whether the skill loaded: their pass rates."""
    kinds = {t.id: is_trigger_task(t) for t in tasks}
    split: dict[str, list[bool]] = {"loaded": [], "not_loaded": []}
    for r in results:
        if kinds.get(r.task_id, True) or r.crashed:
            continue
        did = loaded(r.exchanges, skill)
        if did is not None:
            split["loaded" if did else "not_loaded"].append(r.passed)
    out: dict[str, Any] = {}
    for k, runs in split.items():
        out[f"pass_when_{k}"] = round(sum(runs) / len(runs), 4) if runs else None
        out[f"runs_{k}"] = len(runs)
    return out


def description_chars(skill_dir: Path) -> int | None:
    """Characters of the description fields of SKILL.md's front matter."""
    try:
        meta, _ = read_front_matter((skill_dir / "SKILL.md").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, FrontMatterError):
        return None
    return sum(len(str(meta[k])) for k in ("description", "when_to_use") if k in meta)


def round_stats(
    objective: str,
    val: Sequence[Task],
    cand_results: Sequence[TaskResult],
    cand_out: Mapping[str, Sequence[Outcome]],
    inc_out: Mapping[str, Sequence[Outcome]],
    cand_skill: Path | None,
    inc_skill: Path,
) -> TriggerStats | None:
    """The manifest's ``trigger`` field of a round (None in a task round)."""
    if objective == "task":
        return None
    skill = cand_skill or inc_skill
    # on the tasks the candidate ran: a smoke test, or a validation stopped for futility, ran some
    # of val, and precision 1.00 -> 0.00 compared all 10 tasks with the 5 negatives it ran (QA)
    paired = {t: runs for t, runs in inc_out.items() if t in cand_out} if cand_out else inc_out
    return TriggerStats(
        objective=objective,
        candidate=TriggerSide(**side(val, cand_out)),
        incumbent=TriggerSide(**side(val, paired)),
        description_chars=description_chars(skill),
        incumbent_description_chars=description_chars(inc_skill),
        **pass_by_loading(val, cand_results, skill_name(skill)),
    )
