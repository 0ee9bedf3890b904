"""Scores one answer against the task's gold ``answer`` (runs on the host, never in the sandbox).

score(task, answer, out_dir) -> {"score", "feedback", "soft"}:
  score     1.0 when the answer equals the gold answer, ignoring case and runs of whitespace
  feedback  expected vs got (shortened), which the optimizer reads in the trajectory files
  soft      difflib similarity of the normalized strings in [0, 1], for partial credit
Edit this file to score your tasks differently; it must keep the same signature.
"""

import difflib
import json
from pathlib import Path

_SHOW = 200  # characters of expected/got quoted in feedback


def normalize(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return " ".join(text.split()).casefold()


def _short(text: str) -> str:
    return text if len(text) <= _SHOW else text[: _SHOW - 20] + " [...] " + text[-14:]


def score(task: dict, answer: str, out_dir: Path) -> dict:
    expected, got = normalize(task["answer"]), normalize(answer)
    soft = difflib.SequenceMatcher(None, expected, got, autojunk=False).ratio() if expected or got else 1.0
    if expected == got:
        return {"score": 1.0, "feedback": f"correct: {_short(got)!r}", "soft": 1.0}
    if not got:
        feedback = f"wrong: expected {_short(expected)!r}, got an empty answer"
    else:
        feedback = f"wrong: expected {_short(expected)!r}, got {_short(got)!r}"
    return {"score": 0.0, "feedback": feedback, "soft": round(soft, 4)}
