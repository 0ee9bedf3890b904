"""Scorer loading and the scorer contract: bad scores are errors of the scorer, never wins."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.workspace.scoring import ScoreResult, load_scorer, run_scorer

TASK = {"id": "t1", "input": "2+2?", "answer": "4", "split": "train", "metadata": {}}


def scorer_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "scorer.py"
    path.write_text(textwrap.dedent(body))
    return path


def score_with(tmp_path: Path, returns: str, answer: str = "4") -> ScoreResult:
    path = scorer_file(tmp_path, f"def score(task, answer, out_dir):\n    return {returns}\n")
    return run_scorer(load_scorer(path), TASK, answer, tmp_path)


def test_float_and_bool_scores(tmp_path: Path) -> None:
    assert score_with(tmp_path, "1.0") == ScoreResult(score=1.0, feedback="", soft=None, error=None)
    assert score_with(tmp_path, "1.0").passed
    half = score_with(tmp_path, "0.5")
    assert half.score == 0.5 and not half.passed and half.error is None
    assert score_with(tmp_path, "answer == task['answer']").score == 1.0
    assert score_with(tmp_path, "answer == task['answer']", answer="5").score == 0.0
    assert score_with(tmp_path, "1").score == 1.0


def test_dict_result(tmp_path: Path) -> None:
    result = score_with(tmp_path, '{"score": 0.25, "feedback": "close: expected 4", "soft": 0.9}')
    assert result == ScoreResult(score=0.25, feedback="close: expected 4", soft=0.9, error=None)
    assert score_with(tmp_path, '{"score": 1}').feedback == ""


def test_float_rounding_is_tolerated(tmp_path: Path) -> None:
    assert score_with(tmp_path, "1 + 1e-12").score == 1.0
    assert score_with(tmp_path, "-1e-12").score == 0.0


@pytest.mark.parametrize(
    ("returns", "needle"),
    [
        ("1.5", "outside [0, 1]"),
        ("-0.1", "outside [0, 1]"),
        ("float('nan')", "finite"),
        ("float('inf')", "finite"),
        ("'1.0'", "of type str"),
        ("None", "of type NoneType"),
        ("[1.0]", "of type list"),
        ('{"feedback": "no score"}', "without 'score'"),
        ('{"score": 2}', "outside [0, 1]"),
        ('{"score": 1, "feedback": 3}', "feedback of type int"),
        ('{"score": 1, "soft": "high"}', "soft of type str"),
        ('{"score": 1, "soft": float("nan")}', "soft nan"),
        ('{"score": 1, "feeback": "typo"}', "unknown key 'feeback'"),
    ],
)
def test_bad_results_score_zero_with_error(tmp_path: Path, returns: str, needle: str) -> None:
    result = score_with(tmp_path, returns)
    assert result.score == 0.0
    assert not result.passed
    assert result.error is not None and needle in result.error
    assert result.feedback.startswith("scorer error: ")


def test_exception_is_an_error_with_location(tmp_path: Path) -> None:
    path = scorer_file(
        tmp_path,
        """
        def helper(x):
            return 1 / x

        def score(task, answer, out_dir):
            return helper(0)
        """,
    )
    result = run_scorer(load_scorer(path), TASK, "4", tmp_path)
    assert result.score == 0.0 and not result.passed
    assert result.error == "scorer raised ZeroDivisionError: division by zero (scorer.py:3 in helper)"


def test_sys_exit_in_scorer_is_caught(tmp_path: Path) -> None:
    result = score_with(tmp_path, "__import__('sys').exit(3)")
    assert result.error is not None and "SystemExit" in result.error


def test_scorer_gets_a_copy_of_the_task_and_out_dir(tmp_path: Path) -> None:
    path = scorer_file(
        tmp_path,
        """
        def score(task, answer, out_dir):
            task["answer"] = "mutated"
            return {"score": 1.0, "feedback": (out_dir / "answer.txt").read_text()}
        """,
    )
    (tmp_path / "answer.txt").write_text("from out dir")
    task = dict(TASK)
    result = run_scorer(load_scorer(path), task, "4", tmp_path)
    assert result.feedback == "from out dir"
    assert task["answer"] == "4"


def test_load_scorer_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_scorer(tmp_path / "missing.py")
    with pytest.raises(UserError, match=r"does not compile: SyntaxError: .* \(line 1\)"):
        load_scorer(scorer_file(tmp_path, "def score(:\n"))
    with pytest.raises(
        UserError, match=r"does not compile: SyntaxError: source code string cannot contain null bytes; fix"
    ):
        load_scorer(scorer_file(tmp_path, "def score(t, a, o):\n    return 1\x00\n"))
    with pytest.raises(UserError, match=r"failed to import: RuntimeError: boom \(scorer.py:1 in <module>\)"):
        load_scorer(scorer_file(tmp_path, "raise RuntimeError('boom')\n"))
    with pytest.raises(UserError, match="has no score"):
        load_scorer(scorer_file(tmp_path, "SCORE = 1\n"))
    with pytest.raises(
        UserError, match=r"score\(task, answer\) cannot be called as score\(task, answer, out_dir\)"
    ):
        load_scorer(scorer_file(tmp_path, "def score(task, answer):\n    return 1.0\n"))
    for fine in ("def score(task, answer, out_dir=None, *, extra=1):", "def score(*args):"):
        assert callable(load_scorer(scorer_file(tmp_path, f"{fine}\n    return 1.0\n")))


def test_reload_picks_up_edits_and_writes_no_bytecode(tmp_path: Path) -> None:
    path = scorer_file(tmp_path, "def score(task, answer, out_dir):\n    return 0.0\n")
    first = load_scorer(path)
    path.write_text(
        "from dataclasses import dataclass\n@dataclass\nclass R:\n    v: float\n"
        "def score(task, answer, out_dir):\n    return R(1.0).v\n"
    )
    second = load_scorer(path)
    assert run_scorer(first, TASK, "4", tmp_path).score == 0.0
    assert run_scorer(second, TASK, "4", tmp_path).score == 1.0
    assert not (tmp_path / "__pycache__").exists()


def test_a_hanging_scorer_times_out_as_a_scorer_error(tmp_path: Path) -> None:
    import threading
    import time

    release = threading.Event()

    def hangs(task, answer, out_dir):
        release.wait(30)
        return 1.0

    t0 = time.monotonic()
    result = run_scorer(hangs, {"id": "t", "answer": "a"}, "a", tmp_path, timeout_s=0.2)
    release.set()
    assert time.monotonic() - t0 < 5
    assert result.score == 0.0 and result.error and "did not return within 0.2 s" in result.error


def test_a_scorer_within_its_time_scores_normally(tmp_path: Path) -> None:
    result = run_scorer(
        lambda task, answer, out_dir: 0.5, {"id": "t", "answer": "a"}, "a", tmp_path, timeout_s=5
    )
    assert result.score == 0.5 and result.error is None


def test_feedback_mode_no_expected_cuts_the_gold_answer_whatever_the_scorer_says(tmp_path: Path) -> None:
    """Train gold answers reach the optimizer through feedback unless optimizer.feedback says not."""
    from harnessopt.rollout.runner import _without_answer
    from harnessopt.util.text import HIDDEN

    scorer = load_scorer(Path(__file__).resolve().parents[2] / "workspace_templates" / "scorer.py")
    task = {"id": "t", "input": "capital of Australia?", "answer": "Canberra"}
    fb = run_scorer(scorer, task, "Sydney", tmp_path).feedback
    assert "canberra" in fb.lower()  # the default: the expected value is quoted
    hidden = _without_answer(fb, "Canberra")
    assert "canberra" not in hidden.lower() and HIDDEN in hidden and "sydney" in hidden
    assert "new york" not in _without_answer("expected 'NEW   York'", "New York").lower()
    assert "banana" in _without_answer("expected 'a', got 'banana'", "a")
    assert '"k": 1' not in _without_answer('expected {"k": 1}', {"k": 1})
