"""Failure classes, loops and per-phase counts from scored runs (harnessopt.rollout.taxonomy, roundstats)."""

from __future__ import annotations

from typing import Any

from harnessopt.objective import trigger
from harnessopt.protocols import Exchange, Task, TaskResult
from harnessopt.rollout.phase_stats import RoundRuns
from harnessopt.rollout.run_cache import PROBE_EPOCH
from harnessopt.rollout.taxonomy import (
    FAILURE_CLASSES,
    SCORER_ERROR,
    classify,
    describe,
    merged,
    most_repeated,
    phase_stats,
)

YES = Task("yes-00", "Turn this spreadsheet export into JSON records", {"trigger": True}, "train")
NO = Task("near-00", "Convert this JSON file to YAML", {"trigger": False}, "train")
LOAD = {"content": [{"type": "tool_use", "id": "x", "name": "load_skill", "input": {"name": "csv-to-json"}}]}
MISSED = trigger.score(YES, "csv-to-json", [])[1]  # the built-in trigger score's feedback
FALSE = trigger.score(NO, "csv-to-json", [Exchange({"messages": []}, LOAD, None, 0.0, 0.1, 10, 5)])[1]


def ex(
    response: dict[str, Any] | None = None, error: str | None = None, messages: list[Any] | None = None
) -> Exchange:
    return Exchange({"messages": messages or []}, response, error, 0.0, 0.1, 10, 5)


def result(passed: bool = False, **kw: Any) -> TaskResult:
    base: dict[str, Any] = dict(
        task_id="t1", split="val", round=1, epoch=0, score=1.0 if passed else 0.0, passed=passed, soft=None,
        feedback="wrong: expected 'a', got 'b'", answer="b", exit_code=0, error_class=None, wall_s=1.0,
        input_tokens=10, output_tokens=5, steps=1,
    )  # fmt: skip
    base.update(kw)
    return TaskResult(**base)


def tool_use(name: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": "x", "name": name, "input": {"command": command}}


def test_each_failure_class_in_its_order() -> None:
    refused = ex(error="harnessopt budget spent: 10 of 10 model calls used (budget.max_calls)")
    cases = {
        "budget refusal": result(exchanges=[refused], error_class="crash"),
        "API error": result(
            exchanges=[ex(error="529 overloaded_error: busy")], exit_code=1, error_class="crash"
        ),
        "timeout": result(error_class="timeout", exit_code=None),
        "harness crash": result(error_class="crash", exit_code=1),
        "scorer error": result(answer="Paris", notes=[f"{SCORER_ERROR}: scorer raised ValueError: boom"]),
        "trigger missed": result(feedback=MISSED, harness_events=[{"event": "max_turns", "turns": 1}]),
        "false trigger": result(feedback=FALSE, answer=""),
        "turn limit": result(harness_events=[{"event": "max_steps", "steps": 20}]),
        "tool error": result(
            exchanges=[
                ex(
                    {"content": []},
                    messages=[{"role": "user", "content": [{"type": "tool_result", "is_error": True}]}],
                )
            ]
        ),
        "format error": result(answer="", feedback="wrong: expected 'a', got an empty answer"),
        "wrong answer": result(),
    }
    for expected, r in cases.items():
        assert classify(r) == expected, expected
    assert classify(result(feedback="could not parse the JSON answer")) == "format error"
    assert classify(result(exchanges=[ex({"stop_reason": "max_tokens", "content": []})])) == "turn limit"
    assert classify(result(passed=True)) is None
    assert list(cases) == list(FAILURE_CLASSES)


def test_a_wrong_trigger_run_is_counted_as_what_the_trigger_score_says() -> None:
    # the scorer's words for a skill named csv-to-json ("json") once made every miss a format error
    assert classify(result(feedback=MISSED, answer="")) == "trigger missed"
    assert classify(result(feedback=FALSE, answer="loaded skill csv-to-json")) == "false trigger"
    assert classify(result(feedback=MISSED, harness_events=[{"event": "max_turns"}])) == "trigger missed"
    assert (
        classify(result(feedback="wrong: expected a trigger missed (should load) verdict")) == "wrong answer"
    )


def test_phase_counts_shares_and_loops() -> None:
    looping = result(exchanges=[ex({"content": [tool_use("bash", "ls")] * 3})], steps=3)
    runs = [result(passed=True, steps=2), result(), result(error_class="timeout", exit_code=None), looping]
    s = phase_stats(runs)
    assert (s.runs, s.passed, s.calls, s.looping) == (4, 1, 1, 1)
    assert s.failures == {"timeout": 1, "wrong answer": 2}
    assert s.turns == [1, 1, 2, 3] and s.input_tokens == 40
    d = describe(s)
    assert d["shares"]["wrong answer"] == {"of_failures": 2 / 3, "of_runs": 0.5}
    assert d["pass_rate"] == 0.25 and d["turns_max"] == 3
    assert most_repeated(looping) == 3 and most_repeated(result()) == 0
    both = merged([s, s])
    assert both.runs == 8 and both.failures == {"timeout": 2, "wrong answer": 4}


def test_phases_of_a_round_and_identical_rerun_groups() -> None:
    train = [Task("a", "q", "x", "train")]
    val = [Task("v1", "q", "x", "val"), Task("v2", "q", "x", "val")]
    runs = RoundRuns()
    batches = [
        ("incumbent", train, [0], "rollout", [result(task_id="a", split="train")]),
        ("incumbent", val, [0], "incumbent", [result(task_id="v1"), result(task_id="v2", passed=True)]),
        ("incumbent", val[:1], [PROBE_EPOCH], "probe", [result(task_id="v1")]),  # made ahead: not the smoke
        ("candidate", val[:1], [0], "smoke", [result(task_id="v1", passed=True)]),
        ("candidate", val[1:], [0], "validation", [result(task_id="v2", passed=True)]),
        ("candidate", val, [1000], "reruns", [result(task_id="v1"), result(task_id="v2", passed=True)]),
        ("incumbent", val, [1000], "reruns", [result(task_id="v1"), result(task_id="v2", passed=True)]),
    ]
    for label, tasks, epochs, phase, results in batches:
        runs.started(label, tasks, 1, epochs, phase)
        for i, r in enumerate(results, 1):
            r.phase = phase  # as Runner.run stamps each result of the batch
            runs.finished(label, r, i, len(results))
    phases = runs.phases()
    assert list(phases) == ["rollout", "incumbent", "probe", "smoke", "validation", "reruns"]
    assert phases["smoke"].runs == 1 and phases["reruns"].runs == 4 and phases["probe"].runs == 1
    # v1: the candidate passed once and failed on its rerun (disagreed); the incumbent failed twice.
    assert runs.repeats() == {"v1": [2, 1], "v2": [2, 0]}
