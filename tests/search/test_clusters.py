from harnessopt.config import OptimizerConfig
from harnessopt.optimizer.brief import render_brief, render_focus
from harnessopt.protocols import TaskResult
from harnessopt.search.clusters import MERGE, OPEN, Focus, assign, clusters


def run(
    tid: str, *, passed: bool = False, answer: str = "x", exit_code: int = 0, error: str | None = None
) -> TaskResult:
    return TaskResult(
        task_id=tid, split="train", round=1, epoch=0, score=float(passed), passed=passed, soft=None,
        feedback="", answer=answer, exit_code=exit_code, error_class=error, wall_s=0.1,
        input_tokens=1, output_tokens=1, steps=1,
    )  # fmt: skip


TRAIN = [
    run("a"), run("b"), run("c"),  # wrong answer
    run("d", answer=""),  # format error
    run("e", exit_code=1, error="crash"),  # harness crash
    run("f", passed=True),
]  # fmt: skip


def test_clusters_are_failure_classes_largest_first() -> None:
    assert clusters(TRAIN) == [
        Focus("wrong answer", ("a", "b", "c")),
        Focus("harness crash", ("e",)),  # ties go in the taxonomy's order: the cause before symptoms
        Focus("format error", ("d",)),
    ]


def test_each_candidate_gets_a_different_cluster_and_the_largest_is_split_when_too_few() -> None:
    assert [f.label for f in assign(TRAIN, 3)] == ["wrong answer", "harness crash", "format error"]
    five = assign(TRAIN, 5)
    assert [f.label for f in five] == [
        "wrong answer (part 1 of 3)", "wrong answer (part 2 of 3)", "wrong answer (part 3 of 3)",
        "harness crash", "format error",
    ]  # fmt: skip
    assert {t for f in five[:3] for t in f.task_ids} == {"a", "b", "c"}  # no failing task read twice
    # Nothing left to split: the rest get an open brief; with an archive to merge, the last merges.
    assert [f.label for f in assign(TRAIN[3:], 3)] == ["harness crash", "format error", OPEN]
    assert [f.label for f in assign(TRAIN, 3, merge=True)] == ["wrong answer", "harness crash", MERGE]
    assert [f.label for f in assign([run("f", passed=True)], 2)] == [OPEN, OPEN]


def test_the_brief_says_which_cluster_is_yours_and_which_are_taken() -> None:
    focus = render_focus("c2", 3, "format error", ["d"], [("c1", "wrong answer"), ("c3", "harness crash")])
    brief = render_brief(1, "skill", ["skill/**"], OptimizerConfig(), n_trajectories=6, focus_md=focus)
    assert brief.startswith("# Round 1:")  # scripts that match on the title still match
    assert "## Your focus: candidate c2 of 3" in brief
    assert "Yours: **format error**, the failed runs of 1 train task(s): `d`" in brief
    assert "Taken by the other candidates: wrong answer (c1); harness crash (c3)" in brief
    merge = render_focus("c3", 3, MERGE, [], [("c1", "x")], merge_md="### round-1/c1\n```diff\n+A\n```")
    assert "Yours: **merge**" in merge and "+A" in merge
    assert "Yours: **open**" in render_focus("c3", 3, OPEN, [], [])


def test_the_live_optimizer_lines_name_the_candidate() -> None:
    from harnessopt.reporting.progress import _TRANSCRIPT, turn_lines

    m = _TRANSCRIPT.search("optimizer-round-4-c2.jsonl")
    assert m is not None and m.group(1) == "4" and m.group(2) == "-c2"
    raw = b'{"event": "api_error", "turn": 3, "error": "overloaded"}'
    assert turn_lines(4, raw, "c2") == ["round 4 candidate c2 optimizer turn 3: API error: overloaded"]
    m = _TRANSCRIPT.search("optimizer-round-4-s7.jsonl")  # a chain's step: it read "round 0" (QA)
    assert m is not None and m.group(1) == "4" and m.group(2) == "-s7"
