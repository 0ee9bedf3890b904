"""Trajectory files: front matter reads back, transcripts keep order, long text is elided."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harnessopt.rollout.trajectory import (
    FIELDS,
    front_matter,
    parse,
    render,
    safe_filename,
    trajectory_filenames,
    write_trajectories,
)
from harnessopt.util.text import elide, parse_front_matter
from tests.support.results import SYSTEM, exchange, make_result, tool_loop


def render_one(**kw: Any) -> str:
    return render(make_result(**kw), harness_commit="0123456", target_model="claude-test")


def test_front_matter_fields_parse_back() -> None:
    text = render_one()
    fm = parse_front_matter(text)
    assert tuple(fm) == FIELDS
    assert fm == {
        "task_id": "math/1",
        "split": "train",
        "round": 3,
        "score": 0.5,
        "passed": False,
        "soft": 0.75,
        "feedback": 'expected "42" but the answer had extra text: yes',
        "harness_commit": "0123456",
        "target_model": "claude-test",
        "steps": 2,
        "input_tokens": 130,
        "output_tokens": 25,
        "tokens_estimated": False,
        "truncated": 0,
        "wall_s": 1.235,
        "exit_code": 0,
        "error_class": None,
    }
    head = text.split("\n")[: len(FIELDS) + 2]
    assert head[0] == head[-1] == "---"
    assert "passed: false" in head and 'harness_commit: "0123456"' in head and "split: train" in head


@pytest.mark.parametrize(
    "task_id",
    ["yes", "null", "12", "a: b", "#x", "- item", 'it\'s "quoted"', "ünï  code", "a\u2028b", "x\x85y"],
)
def test_awkward_values_stay_one_line_and_read_back(task_id: str) -> None:
    text = render_one(task_id=task_id, feedback="line1\r\nline2\u2028line3", exit_code=None, soft=None)
    fm = parse_front_matter(text)
    expected = task_id.replace("\u2028", " ").replace("\x85", " ")
    assert fm["task_id"] == expected
    assert fm["feedback"] == "line1 line2 line3"
    assert fm["exit_code"] is None and fm["soft"] is None
    assert text.split("\n").index("---", 1) == len(FIELDS) + 1


def test_feedback_truncated_in_front_matter_but_full_below() -> None:
    long = "word " * 200
    text = render_one(feedback=long)
    fm = parse_front_matter(text)
    assert len(fm["feedback"]) <= 200 and fm["feedback"].endswith("...")
    section = text.split("# Scorer feedback\n", 1)[1]
    assert long.strip() in section


def test_sections_in_order() -> None:
    text = render_one()
    headings = [line for line in text.split("\n") if line.startswith("# ")]
    assert headings == [
        "# Task",
        "# Transcript",
        "# Harness events",
        "# Answer",
        "# Harness stderr (tail)",
        "# Scorer feedback",
        "# Notes",
    ]
    assert "- network: none" in text and "- memory limit: 1024 MB" in text
    assert '- {"event": "done", "steps": 2}' in text


def test_transcript_order_with_tool_use() -> None:
    text = render_one()
    transcript = text.split("# Transcript\n", 1)[1].split("# Harness events", 1)[0]
    order = [
        "## Call 1",
        "### system",
        "### message 1 (user)",
        "What is 6*7?",
        "### response",
        "Let me compute.",
        "#### assistant tool_use bash (id toolu_1)",
        '"command": "echo $((6*7))"',
        "## Call 2",
        "(system prompt unchanged)",
        "### message 3 (user)",
        "#### user tool_result (tool_use_id toolu_1)",
        "42",
        "FINAL: 42",
    ]
    positions = [transcript.index(item) for item in order]
    assert positions == sorted(positions)
    # Message 1 and the echoed assistant turn are not repeated in call 2; the system prompt once.
    assert transcript.count("What is 6*7?") == 1
    assert transcript.count("Let me compute.") == 1
    assert transcript.count(SYSTEM) == 1
    assert transcript.count("- tools: bash") == 1
    assert "- stop_reason: end_turn" in transcript and "- input_tokens: 80" in transcript
    assert "history rewritten" not in transcript


def test_failed_call_then_retry_and_rewritten_history() -> None:
    failed = exchange([{"role": "user", "content": "first"}], [], 1.0)
    failed.response, failed.error = None, "overloaded_error: try later"
    retry = exchange([{"role": "user", "content": "first"}], [{"type": "text", "text": "one"}], 2.0)
    text = render_one(exchanges=[failed, retry])
    assert "- error: overloaded_error: try later" in text
    assert text.count("first") == 1  # the retry repeats message 1: shown once
    assert "history rewritten" not in text
    long = exchange([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], [], 0.5)
    summary = exchange([{"role": "user", "content": "summary of before"}], [], 0.7)
    text = render_one(exchanges=[long, summary])
    assert "(history rewritten by the harness: showing from message 1)" in text
    assert "summary of before" in text


def test_long_texts_are_elided_in_the_middle() -> None:
    assert elide("abcdef", 10) == "abcdef"
    assert elide("a" * 50 + "b" * 50, 20) == "a" * 10 + "\n[... 80 chars elided ...]\n" + "b" * 10
    huge = "HEAD" + "x" * 100_000 + "TAIL"
    text = render_one(answer=huge, task_input={"q": huge}, stderr_tail="S" * 10_000 + "LAST")
    assert "HEAD" in text and "TAIL" in text
    assert re.search(r"\[\.\.\. \d+ chars elided \.\.\.\]", text)
    assert len(text) < 40_000
    assert text.split("# Harness stderr (tail)", 1)[1].split("# Scorer", 1)[0].count("LAST") == 1


def test_fences_cannot_be_closed_by_content() -> None:
    text = render_one(answer="```\n# Answer\n````")
    answer = text.split("# Answer\n", 1)[1]
    assert answer.startswith("\n`````text\n")


def test_no_exchanges_no_events_no_notes() -> None:
    text = render_one(exchanges=[], harness_events=[], notes=[], stderr_tail="")
    assert "(no model calls recorded)" in text
    assert text.split("# Harness stderr (tail)\n", 1)[1].startswith("\n(empty)\n")
    assert "# Harness events" not in text
    assert text.rstrip().endswith("# Notes\n\n(none)")


def test_deterministic() -> None:
    assert render_one() == render_one()


def test_safe_filename_rules() -> None:
    assert safe_filename("task-1_a.b") == "task-1_a.b"
    assert safe_filename("math/1") == "math%2F1"
    assert safe_filename("100%") == "100%25"
    assert safe_filename("..") == "%2E."
    assert safe_filename("a b") == "a%20b"
    assert safe_filename("ü") == "%C3%BC"
    ids = ["a/b", "a%2Fb", "a_b", "A/B", ".x", "%2Ex", "x" * 300, "x" * 299 + "y"]
    stems = [safe_filename(i) for i in ids]
    assert len(set(stems)) == len(stems)
    assert all(len(s) <= 180 and "/" not in s for s in stems)


def test_write_trajectories_replaces_old_files(tmp_path: Path) -> None:
    out = tmp_path / "trajectories"
    out.mkdir()
    (out / "stale.md").write_text("old")
    (out / "keep.txt").write_text("not markdown")
    results = [make_result(task_id="a/1"), make_result(task_id="b")]
    paths = write_trajectories(out, results, harness_commit="abc", target_model="m")
    assert sorted(p.name for p in out.iterdir()) == ["a%2F1.md", "b.md", "keep.txt"]
    assert parse_front_matter(paths[0].read_text())["task_id"] == "a/1"


def test_epochs_get_distinct_names() -> None:
    results = [make_result(task_id="a", epoch=0), make_result(task_id="a", epoch=1), make_result(task_id="b")]
    assert trajectory_filenames(results) == ["a~e0.md", "a~e1.md", "b.md"]
    with pytest.raises(ValueError):
        trajectory_filenames([make_result(task_id="a"), make_result(task_id="a")])


def test_parse_front_matter_errors() -> None:
    with pytest.raises(ValueError):
        parse_front_matter("# no front matter")
    with pytest.raises(ValueError):
        parse_front_matter("---\na: 1\n")


def test_other_block_types() -> None:
    content = [
        {"type": "thinking", "thinking": "hmm, multiply", "signature": "sig"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 5000}},
        {"type": "server_thing", "value": 1},
    ]
    ex = exchange([{"role": "user", "content": [{"type": "text", "text": "q"}]}], content, 1.0)
    text = render_one(exchanges=[ex])
    assert "#### assistant thinking" in text and "hmm, multiply" in text
    assert "[image image/png, 5000 chars of base64 data]" in text and "AAAA" not in text
    assert "#### assistant server_thing" in text


def test_harness_stdout_is_shown_when_there_is_any() -> None:
    text = render_one(stdout_tail="progress: 3/3 tools ok\n")
    assert text.index("# Answer") < text.index("# Harness stdout (tail)") < text.index("# Harness stderr")
    assert "progress: 3/3 tools ok" in text
    assert "# Harness stdout" not in render_one(stdout_tail="")


def test_a_rendered_trajectory_parses_back_to_its_fields() -> None:
    """render and parse side by side: the front matter, the answer, the flags the harness read,
    what the model received (system prompt, user turns, tool results) and what it produced."""
    events = [{"event": "request", "flags_read": {"stream": "1", "tools": None}}]
    result = make_result(exchanges=tool_loop(), harness_events=events, answer="FINAL: 42\n# Answer faked")
    text = render(result, harness_commit="0123456", target_model="claude-test")
    back = parse(text)
    assert back.fields == front_matter(result, harness_commit="0123456", target_model="claude-test")
    assert back.round == result.round and back.answer == result.answer
    assert back.flags == {"stream": "1", "tools": None}
    assert SYSTEM in back.received and "What is 6*7?" in back.received and "42" in back.received
    assert "Let me compute." in back.produced and "echo $((6*7))" in back.produced
    assert "FINAL: 42" in back.produced and "What is 6*7?" not in back.produced
    assert parse(text, 7).round == 7  # filed under the round that kept it


def test_the_fields_the_optimizers_brief_names_are_the_ones_rendered() -> None:
    from harnessopt.config import OptimizerConfig
    from harnessopt.optimizer.brief import render_brief, render_round0_brief

    for brief in (
        render_brief(1, "skill", ["skill/**"], OptimizerConfig(), n_trajectories=3),
        render_round0_brief(["proposals/round-0.md"], OptimizerConfig(), n_trajectories=3),
    ):
        lists = re.findall(r"front matter\s*\(([^)]*)\)", brief)
        named = {n for part in lists for n in re.findall(r"`(\w+)`", part)}
        named |= set(re.findall(r"'\^?(\w+):", brief))  # grep patterns such as '^feedback:'
        assert named and named <= set(FIELDS), named - set(FIELDS)
