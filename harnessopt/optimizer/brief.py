"""The two Markdown files an optimizer reads first: ``OPTIMIZE.md`` (its task) and ``history.md``."""

from __future__ import annotations

from collections.abc import Sequence

from harnessopt.config import OptimizerConfig
from harnessopt.ledger.store import Round

_SUMMARY_CAP = 1500  # characters of an earlier round's summary kept in history.md


def render_brief(
    round_no: int,
    mode: str,
    allowed: Sequence[str],
    opt: OptimizerConfig,
    *,
    n_trajectories: int | None = None,
    plan_md: str | None = None,
    focus_md: str | None = None,
    objective: str = "task",
) -> str:
    """OPTIMIZE.md for one round: what to read, what to change, what not to do, how to finish.

    ``plan_md``: the round-0 proposal a person approved (harness and joint mode), to implement.
    ``focus_md``: with several candidates a round, which failure cluster this one addresses
    (``render_focus``)."""
    paths = "\n".join(f"- `{g}`" for g in allowed) or "- (nothing: this round cannot change files)"
    count = f" ({n_trajectories} files)" if n_trajectories is not None else ""
    harness = (
        "You may also change the harness code under `harness/` (entry point `harness/run.py`, started as\n"
        "  `python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR`; it must keep writing\n"
        "  its final answer to `OUT_DIR/answer.txt`). Keep it importable: a harness that crashes is rejected."
        if mode in ("harness", "joint")
        else "The harness under `harness/` is shown for reference only; this round may not change it."
    )
    budgets = (
        f"- at most {opt.max_turns} model turns and {opt.max_tokens:,} tokens (built-in optimizer)\n"
        if opt.backend == "anthropic"
        else ""
    ) + f"- {opt.wall_s:.0f} s of wall-clock time; one shell command may run {opt.bash_timeout_s:.0f} s\n"
    return f"""# Round {round_no}: improve the skill from its train trajectories

You are improving an agent skill (`skill/SKILL.md` and the files next to it). The agent was run on
train tasks; `trajectories/` holds one Markdown file per task{count}: YAML front matter
(`task_id`, `score`, `passed`, `feedback`, `error_class`, ...) then the task input, the full
transcript, the answer and the scorer's feedback. `history.md` lists what earlier rounds tried and
whether it was accepted.

## What to do

1. Explore with shell tools, not by reading everything: `ls trajectories/`,
   `grep -l 'passed: false' trajectories/*`, `grep -h '^feedback:' trajectories/*`, `head -60 FILE`.
2. Find a failure pattern shared by several trajectories. Name it, and cite the task ids
   that show it (`task_id` in the front matter). One failing task is not a pattern.
3. Read `history.md`: do not repeat an edit that was already rejected; build on accepted ones.
4. Make the smallest edit that fixes the pattern in general. Prefer one clear instruction or
   example in `skill/SKILL.md` over many; remove advice that the trajectories show is harmful.
5. Check your edit: `SKILL.md` must keep valid YAML front matter with `name` and `description`.

## Rules

- Never write task-specific values, answers or ids into the skill. Your edit is validated on
  held-out tasks you cannot see; advice that only fits these train tasks will be rejected.
- {harness}
- Only these paths (globs, relative to this directory) are copied back; any other change is
  discarded and reported:
{_indent(paths)}
- `trajectories/`, `history.md` and this file are read-only inputs; edits to them are ignored.
- Files larger than 1 MiB and symbolic links are never copied back.

{_objective(objective)}{_flags(mode)}{_plan(plan_md)}{focus_md or ""}## Budget

{budgets.rstrip()}

## When you are done

Finish with a short summary. Its first line is a one-line title of the change (it becomes the commit
title). Then: the pattern, the task ids that show it, and what you changed. If you found no pattern
worth an edit, change nothing and say why.
"""


def render_focus(
    name: str,
    total: int,
    label: str,
    task_ids: Sequence[str],
    taken: Sequence[tuple[str, str]],
    *,
    merge_md: str | None = None,
) -> str:
    """The section of candidate ``name`` (one of ``total``) that says which failure cluster it
    addresses (``label``, shown by ``task_ids``), which ones the others took (``taken``: (name,
    label)), or, for ``merge``, which archived candidates to merge (``merge_md``)."""
    others = "; ".join(f"{lab} ({n})" for n, lab in taken) or "none"
    head = (
        f"## Your focus: candidate {name} of {total}\n\n"
        f"In this round {total} candidates are proposed independently, each in its own copy of these files;\n"
        "they are screened on the train tasks and only the best goes on to validation. Each is aimed at\n"
        "a different failure cluster of the train runs (failure classes as in `error_class` and the\n"
        f"feedback). Taken by the other candidates: {others}. Do not work on those.\n\n"
    )
    if label == "merge" and merge_md:
        return head + (
            "Yours: **merge**. Earlier rounds left candidates that each won on different train tasks but\n"
            "were not accepted on their own. Combine the ideas below into one edit of the current files\n"
            "(they may not apply as they are; keep what each fixed, drop what conflicts):\n\n"
            f"{merge_md.rstrip()}\n\n"
        )
    if label in ("open", "merge") or not task_ids:
        return head + (
            "Yours: **open**. No failure cluster is left for you: look for a different improvement than\n"
            "the others' (a shared weakness of the passing runs, a clearer instruction), or change nothing.\n\n"
        )
    ids = ", ".join(f"`{t}`" for t in task_ids[:20]) + (" ..." if len(task_ids) > 20 else "")
    return head + (
        f"Yours: **{label}**, the failed runs of {len(task_ids)} train task(s): {ids}. Start from their\n"
        "trajectories and fix what they share; the rules below still hold (no task-specific values).\n\n"
    )


def render_history(rounds: Sequence[Round]) -> str:
    """history.md from the ledger's earlier rounds (status, delta, dead zone, reason, summary)."""
    lines = ["# History of earlier rounds", ""]
    if not rounds:
        lines += ["No earlier rounds: this is the first proposal.", ""]
        return "\n".join(lines)
    lines += [
        "Accepted edits are part of the current skill. Rejected ones were rolled back: do not repeat them",
        "unless you can say why they failed and what is different now.",
        "",
    ]
    for r in rounds:
        m = r.manifest
        lines.append(f"## Round {r.round}: {r.status}")
        lines.append("")
        numbers = []
        if m.delta is not None:
            numbers.append(f"delta {m.delta:+.3f}")
        if m.dead_zone is not None:
            numbers.append(f"dead zone {m.dead_zone:.3f}")
        if numbers:
            lines.append("- " + ", ".join(numbers))
        if m.reason:
            lines.append(f"- reason: {_one_line(m.reason)}")
        summary = m.summary.strip()
        if summary:
            if len(summary) > _SUMMARY_CAP:
                summary = summary[:_SUMMARY_CAP].rstrip() + " [...]"
            lines += ["", summary]
        lines.append("")
    return "\n".join(lines)


def _objective(objective: str) -> str:
    """What this round is scored on (``objective`` in harnessopt.yaml) and what that lets change."""
    if objective == "task":
        return ""
    trigger = (
        ("The train tasks are" if objective == "trigger" else "Some train tasks are")
        + " trigger tasks: a user query, run with the skill installed among other\n"
        "skills, scored 1 when the agent loaded this skill exactly when it should (feedback `trigger\n"
        "missed` = it should have loaded; `false trigger` = a near-miss query that belongs elsewhere).\n"
        "The agent decides from the skill's `name` and `description` alone. Say when to use the skill\n"
        "in general terms (kinds of request, not these queries' words), and when not to."
    )
    if objective == "trigger":
        rule = (
            "This round may change ONLY the `description` (and `when_to_use`) field of `skill/SKILL.md`'s\n"
            "front matter. Any change to the body, to `name` or to another key, or to another file, is\n"
            "discarded field by field and reported."
        )
    else:
        rule = (
            "Both are gated: an edit must not lower the task score nor triggering. A description edit is\n"
            "measured on the tasks too, and a body edit on triggering too."
        )
    return f"## Objective: {objective}\n\n{trigger}\n\n{rule}\n\n"


def _plan(plan_md: str | None) -> str:
    if not plan_md:
        return ""
    return (
        "## Approved plan (round 0)\n\n"
        "A person reviewed and approved this diagnosis of the seed harness. Implement its decisions,\n"
        "smallest and most certain first; a decision you cannot implement safely in one round can wait\n"
        "for a later one. Your candidate still goes through the smoke test and validation like any other.\n\n"
        + _indent_block(plan_md.strip(), "> ")
        + "\n\n"
    )


def _indent_block(text: str, prefix: str) -> str:
    return "\n".join(prefix + line if line else prefix.rstrip() for line in text.splitlines())


def render_round0_brief(
    allowed: Sequence[str],
    opt: OptimizerConfig,
    *,
    n_trajectories: int,
    rejected: Sequence[tuple[str, str]] = (),
) -> str:
    """OPTIMIZE.md of round 0: diagnose the seed harness from a full train rollout and write
    ``proposals/round-0.md``; change nothing else (harness and joint mode, docs/optimizer.md)."""
    earlier = ""
    if rejected:
        earlier = "## Earlier proposals a person rejected\n\nDo not propose these again; read why:\n\n"
        for i, (text, reason) in enumerate(rejected, 1):
            title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), "(untitled)")
            earlier += f"{i}. {title[:200]}: rejected because: {' '.join(reason.split())[:500]}\n"
        earlier += "\n"
    paths = ", ".join(f"`{g}`" for g in allowed) or "(nothing)"
    return f"""# Round 0: diagnose the seed harness

The agent (skill under `skill/`, harness under `harness/`, entry point `harness/run.py`) was run on
every train task; `trajectories/` holds one Markdown file per task ({n_trajectories} files): YAML
front matter (`task_id`, `score`, `passed`, `feedback`, `error_class`, `steps`, ...), the task
input, the full transcript (every model request and response, tool call and result), the answer,
the harness's stderr and the scorer's feedback.

Your job this round is a diagnosis, not an edit. Find the defects of the harness that many tasks
share (a missing tool, data the model never sees, a loop that never stops after tool failures, an
answer that is never checked, a parsing mismatch), and write them down as a proposal a person will
review. No file of `skill/` or `harness/` may change this round: such edits are discarded. After the
person approves, the next rounds implement your proposal (then {paths} may change), each one
checked by a smoke test and a validation like any round.

## What to do

1. Explore with shell tools: `ls trajectories/`, `grep -l 'passed: false' trajectories/*`,
   `grep -h '^error_class:' trajectories/* | sort | uniq -c`, `head -80 FILE`; read `harness/`.
2. Write `proposals/round-0.md` (create the directory) with exactly these sections:
   - a first line `# ` and a one-line title of the proposal;
   - `## Failure taxonomy`: each failure class with its count and the task ids that show it;
   - `## Review`, with one subsection each: `### Tool inventory`, `### Prompt context`,
     `### Loop strategy`, `### Shape of generated code`, `### State and memory`: what the harness
     does today, what the trajectories show goes wrong, and what to change (or "no change");
   - `## Decisions`: numbered, explicit decisions (at least on tools, on control flow and on
     memory/state): what changes, in which file, behind which feature flag, which failure class and
     task ids it should fix, and how it could break.
3. Never write task-specific values, answers or ids into a decision's code: the changes are
   validated on held-out tasks.

{earlier}## When you are done

Finish with a short summary whose first line is the proposal's title.
"""


FLAGS_MD = """## Feature flags

Guard each major harness change with a feature flag, so that it can be measured on its own
(`harnessopt ablate WS FLAG` runs val with it on and off) and switched off without a revert:

- register it in `harness/flags.yaml`, a list of entries with `name` (lower case, digits, `_`),
  `default` (a string, "1" or "0" by habit) and `purpose` (one line), e.g.
  `- {name: self_check, default: "1", purpose: re-read the answer against the task before writing it}`;
- read it as the environment variable `HO_FLAG_<NAME>` (`HO_FLAG_SELF_CHECK`); harnessopt sets it
  to the default unless harnessopt.yaml or an ablation overrides it;
- report the flags a run read in an event of `OUT_DIR/trajectory.jsonl`:
  `{"event": "start", "flags_read": {"self_check": "1"}}`.

"""


def _flags(mode: str) -> str:
    """The flags paragraph: only where the harness may change."""
    return FLAGS_MD if mode in ("harness", "joint") else ""


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _one_line(text: str) -> str:
    return " ".join(text.split())
