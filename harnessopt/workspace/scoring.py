"""Load the workspace scorer and run it safely on the host (trusted side).

Contract: ``scorer.py`` defines ``score(task: dict, answer: str, out_dir: Path)`` returning a
number in [0, 1] or ``{"score": float, "feedback": str, "soft": float | None}``. A bool counts
as 1.0/0.0. Anything else (a score outside [0, 1], NaN, a wrong type, an unknown dict key, an
exception) is an error *of the scorer*: the task scores 0 with the error recorded, so a broken
scorer can never look like a win.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import math
import numbers
import sys
import threading
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.util.text import elide

ScoreFn = Callable[[dict[str, Any], str, Path], Any]
RESULT_KEYS = ("score", "feedback", "soft")
MAX_FEEDBACK_CHARS = 20_000
# Float arithmetic such as 1/3 + 2/3 can land a hair outside [0, 1]; that is not a scorer bug.
TOLERANCE = 1e-9
PASS_SCORE = 1.0

_load_counter = itertools.count(1)


@dataclass(frozen=True)
class ScoreResult:
    """What the scorer said about one answer. ``error`` is set when the scorer itself failed."""

    score: float
    feedback: str
    soft: float | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Full credit from a scorer that worked (partial credit is not a pass)."""
        return self.error is None and self.score >= PASS_SCORE - TOLERANCE


def compile_scorer(path: Path) -> types.CodeType:
    """``path`` read and compiled, not run (what ``run --dry-run`` checks of the scorer): a missing
    file, one that cannot be read, or a syntax error is a UserError that says what to fix."""
    path = Path(path)
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(
            f"scorer {path} does not exist; create it with a score(task, answer, out_dir) function"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read scorer {path}: {e}") from e
    try:
        return compile(source, str(path), "exec")
    except (SyntaxError, ValueError) as e:  # compiled, not imported: the dry run said "failed to import" (QA)
        # a NUL byte has no line of the scorer's to name (it named ours, scoring.py: QA)
        why = describe(e, str(path)) if getattr(e, "lineno", None) else f"{type(e).__name__}: {e}"
        raise UserError(f"scorer {path} does not compile: {why}; fix scorer.py") from None


def load_scorer(path: Path) -> ScoreFn:
    """Import ``path`` as a fresh module (a new name each call, so edits are picked up) and
    return its ``score`` function. No bytecode is written next to the workspace file."""
    path = Path(path)
    code = compile_scorer(path)
    name = f"harnessopt_scorer_{next(_load_counter)}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    # Registered before exec so dataclasses and pickling inside the scorer find their module.
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except Exception as e:
        del sys.modules[name]
        raise UserError(f"scorer {path} failed to import: {describe(e, str(path))}; fix scorer.py") from e
    fn = getattr(module, "score", None)
    if not callable(fn):
        raise UserError(f"scorer {path} has no score(task, answer, out_dir) function; define one")
    try:  # a wrong signature fails here, before any rollout is paid for, not on every answer after
        inspect.signature(fn).bind(None, None, None)
    except TypeError:
        raise UserError(
            f"scorer {path}: score{inspect.signature(fn)} cannot be called as score(task, answer, out_dir); "
            "give it those three parameters"
        ) from None
    except ValueError:  # no signature to read (a builtin): its first call says
        pass
    return fn


def run_scorer(
    fn: ScoreFn, task: dict[str, Any], answer: str, out_dir: Path, *, timeout_s: float | None = None
) -> ScoreResult:
    """Score one answer. Never raises for a scorer bug: that becomes score 0 with ``error`` set.

    With ``timeout_s``, a scorer still running after that long scores 0 ("timed out"); its thread
    is abandoned (Python cannot kill it), so a hanging scorer costs a thread, not the run.
    """
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            # A copy, so a scorer that mutates its task cannot change the next task's gold data.
            box["raw"] = fn(copy.deepcopy(task), answer, Path(out_dir))
        except (Exception, SystemExit) as e:  # sys.exit() in a scorer is a scorer bug too
            box["error"] = e

    if timeout_s is None:
        call()
    else:
        worker = threading.Thread(target=call, name="harnessopt-scorer", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            return failed(f"scorer did not return within {timeout_s:g} s")
    if "error" in box:
        filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
        return failed(f"scorer raised {describe(box['error'], filename)}")
    raw = box.get("raw")
    try:
        return interpret(raw)
    except ValueError as e:
        return failed(str(e))


def interpret(raw: Any) -> ScoreResult:
    if isinstance(raw, dict):
        unknown = sorted(str(k) for k in raw if k not in RESULT_KEYS)
        if unknown:
            raise ValueError(
                f"scorer returned unknown key {unknown[0]!r}; allowed keys are {', '.join(RESULT_KEYS)}"
            )
        if "score" not in raw:
            raise ValueError("scorer returned a dict without 'score'")
        score = _unit_number(raw["score"], "score")
        feedback = raw.get("feedback")
        if feedback is None:
            feedback = ""
        if not isinstance(feedback, str):
            raise ValueError(
                f"scorer returned feedback of type {type(feedback).__name__}; it must be a string"
            )
        soft = raw.get("soft")
        if soft is not None:
            soft = _finite(soft, "soft")
        return ScoreResult(score=score, feedback=elide(feedback, MAX_FEEDBACK_CHARS), soft=soft)
    return ScoreResult(score=_unit_number(raw, "score"), feedback="")


def _finite(value: Any, what: str) -> float:
    if not isinstance(value, numbers.Real):
        raise ValueError(f"scorer returned {what} of type {type(value).__name__}; it must be a number")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"scorer returned {what} {number}; it must be a finite number")
    return number


def _unit_number(value: Any, what: str) -> float:
    number = _finite(value, what)
    if not -TOLERANCE <= number <= 1 + TOLERANCE:
        raise ValueError(f"scorer returned {what} {number!r}, outside [0, 1]")
    return min(1.0, max(0.0, number))


def failed(error: str) -> ScoreResult:
    error = elide(error, 2000)
    return ScoreResult(score=0.0, feedback=f"scorer error: {error}", soft=None, error=error)


def describe(e: BaseException, filename: str | None) -> str:
    """``ValueError: msg (scorer.py:12 in score)``: the innermost frame in the scorer's file."""
    text = f"{type(e).__name__}: {e}".strip().rstrip(":").splitlines()[0]
    if isinstance(e, SyntaxError) and e.lineno:
        return f"{type(e).__name__}: {e.msg} (line {e.lineno})"
    frames = traceback.extract_tb(e.__traceback__)
    inner = [f for f in frames if f.filename == filename] or frames[-1:]
    if inner:
        frame = inner[-1]
        text += f" ({Path(frame.filename).name}:{frame.lineno} in {frame.name})"
    return text
