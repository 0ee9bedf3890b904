"""Why runs failed: one failure class per failed run, counted per phase of a round.

A run that did not pass gets exactly one class, the first that applies in this order (the
cause before its symptoms: a harness that exits after an API error is an API error):

1. ``budget refusal``  a model call was refused because the run's budget was spent
2. ``API error``       a model call came back with an error
3. ``timeout``         the sandbox killed the run at its wall-clock limit
4. ``harness crash``   the harness exited non-zero, ran out of memory or output, or the sandbox failed
5. ``scorer error``    scorer.py raised, timed out or returned no score: the run scored 0 whatever
                       it answered
6. ``trigger missed``  a trigger run (objective trigger or both) in which the skill should have
                       loaded and did not (the trigger score's feedback ``trigger missed``)
7. ``false trigger``   a trigger run in which the skill loaded for a query that does not need it
                       (feedback ``trigger false trigger``); a trigger run ends at its decision,
                       so these come before the turn limit it stops at and its answer's format
8. ``turn limit``      the harness logged that it stopped at its step limit (an event named
                       ``max_steps``, ``max_turns`` or ``turn_limit``), or the last reply was cut
                       at ``max_tokens``
9. ``tool error``      a tool result the harness sent back to the model was marked ``is_error``
10. ``format error``    the answer is empty, or the scorer's feedback speaks of parsing or format
11. ``wrong answer``   anything else: the harness ran and answered, and the answer was wrong

Shares are reported both of failures and of all runs: a share of failures alone misleads when
the failure rate itself moves. A run *loops* when the model made one identical tool call (same
name, same input) three times or more, a classic regression after a harness change.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from harnessopt.ledger.store import PhaseStats
from harnessopt.objective import trigger
from harnessopt.protocols import Exchange, TaskResult

SCORER_ERROR = "scorer error (scored 0, not a win)"  # a run's note when scorer.py failed on it
FAILURE_CLASSES = (
    "budget refusal",
    "API error",
    "timeout",
    "harness crash",
    "scorer error",
    "trigger missed",
    "false trigger",
    "turn limit",
    "tool error",
    "format error",
    "wrong answer",
)
LOOP_REPEATS = 3  # identical tool calls in one run that count as a loop
TURN_LIMIT_EVENTS = ("max_steps", "max_turns", "turn_limit")
_FORMAT = re.compile(
    r"\b(pars(e|ing|er)|format(ted|ting)?|json|malformed|unparse?able|invalid (answer|output|syntax))\b",
    re.IGNORECASE,
)
BUDGET_MARK = "harnessopt budget"  # how the gateway's refusals begin (gateway.server._budget_message)


def refused(ex: Exchange) -> bool:
    """A call the gateway refused for the budget: it reached no model."""
    return ex.response is None and BUDGET_MARK in (ex.error or "")


def classify(r: TaskResult) -> str | None:
    """The failure class of one run (module docstring), or None when it passed."""
    if r.passed:
        return None
    if any(refused(x) for x in r.exchanges):
        return "budget refusal"
    if any(x.error for x in r.exchanges):
        return "API error"
    if r.error_class == "timeout":
        return "timeout"
    if r.error_class is not None or (r.exit_code not in (0, None)):
        return "harness crash"
    if any(n.startswith(SCORER_ERROR) for n in r.notes):
        return "scorer error"
    if (missed := trigger.failure_class(r.feedback or "")) is not None:
        return missed
    if _hit_turn_limit(r):
        return "turn limit"
    if any(_tool_error(x) for x in r.exchanges):
        return "tool error"
    if not (r.answer or "").strip() or _FORMAT.search(r.feedback or ""):
        return "format error"
    return "wrong answer"


def _hit_turn_limit(r: TaskResult) -> bool:
    if any(str(e.get("event")) in TURN_LIMIT_EVENTS for e in r.harness_events):
        return True
    answered = [x for x in r.exchanges if x.response]
    return bool(answered) and (answered[-1].response or {}).get("stop_reason") == "max_tokens"


def _tool_error(ex: Exchange) -> bool:
    for message in (ex.request or {}).get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" and b.get("is_error") for b in content
        ):
            return True
    return False


def tool_calls(r: TaskResult) -> list[tuple[str, str]]:
    """(name, canonical input) of every tool call the model made in a run, in order."""
    calls = []
    for ex in sorted(r.exchanges, key=lambda e: e.started):
        for block in (ex.response or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                calls.append((str(block.get("name")), json.dumps(block.get("input"), sort_keys=True)))
    return calls


def most_repeated(r: TaskResult) -> int:
    """How often the run's most repeated identical tool call was made (0 without tool calls)."""
    counts = Counter(tool_calls(r))
    return max(counts.values(), default=0)


def model_calls(r: TaskResult) -> int:
    """Calls that reached a model (budget refusals did not)."""
    return sum(not refused(x) for x in r.exchanges)


def phase_stats(results: Iterable[TaskResult]) -> PhaseStats:
    """The counts one phase of a round keeps in its manifest."""
    s = PhaseStats()
    turns = []
    failures: Counter[str] = Counter()
    for r in results:
        s.runs += 1
        s.passed += bool(r.passed)
        s.calls += model_calls(r)
        s.input_tokens += r.input_tokens
        s.output_tokens += r.output_tokens
        s.wall_s = round(s.wall_s + float(r.wall_s), 3)
        turns.append(r.steps)
        s.looping += most_repeated(r) >= LOOP_REPEATS
        if (kind := classify(r)) is not None:
            failures[kind] += 1
    s.turns = sorted(turns)
    s.failures = {k: failures[k] for k in FAILURE_CLASSES if failures[k]}
    return s


def merged(stats: Sequence[PhaseStats]) -> PhaseStats:
    """Several phases (or rounds) counted as one."""
    out = PhaseStats()
    failures: Counter[str] = Counter()
    for s in stats:
        out.runs += s.runs
        out.passed += s.passed
        out.calls += s.calls
        out.input_tokens += s.input_tokens
        out.output_tokens += s.output_tokens
        out.wall_s = round(out.wall_s + s.wall_s, 3)
        out.turns = sorted(out.turns + s.turns)
        out.looping += s.looping
        failures.update(s.failures)
    out.failures = {k: failures[k] for k in FAILURE_CLASSES if failures[k]}
    return out


def shares(s: PhaseStats) -> dict[str, dict[str, float]]:
    """Per failure class: its share of the failed runs and its share of all runs."""
    failed = sum(s.failures.values())
    return {
        k: {"of_failures": n / failed if failed else 0.0, "of_runs": n / s.runs if s.runs else 0.0}
        for k, n in s.failures.items()
    }


def describe(s: PhaseStats) -> dict[str, Any]:
    """A phase's counts as a reader wants them: pass rate, failure shares, turns, loops."""
    turns = s.turns
    return {
        "runs": s.runs,
        "passed": s.passed,
        "pass_rate": s.passed / s.runs if s.runs else None,
        "failures": dict(s.failures),
        "shares": shares(s),
        "turns_mean": sum(turns) / len(turns) if turns else None,
        "turns_max": max(turns) if turns else None,
        "looping": s.looping,
    }
