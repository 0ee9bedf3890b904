"""A replay repeated on the same model makes no model call: the states' val runs and the gate's
flip reruns are both kept; its progress is not labelled as a round 0."""

from __future__ import annotations

import json
from pathlib import Path

from tests.commands.test_ablate_replay import _accept, _cli
from tests.support.workspace import leaky_workspace


def test_a_second_and_third_replay_with_flip_reruns_make_no_call(tmp_path: Path) -> None:
    ws = leaky_workspace(tmp_path, "unused", small=True)
    chatty = "Be friendly and helpful. Explain your answer so the user learns something."
    _accept(ws, 1, chatty, "Reply with only the city name: no sentence, no explanation.", 0.5)
    replay = ("replay", str(ws), "--target", "scripted-demo-target-2", "--sandbox", "local", "--json")
    first = _cli(*replay)  # gate.confirm_flips on (the default): the fixed tasks are rerun
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["tokens"]["target"]["calls"] > 10  # 2 states x 5 val tasks, and the reruns
    assert "round 0" not in first.stderr
    for _ in range(2):
        again = _cli(*replay)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["tokens"] == {}  # no upstream call at all
        assert [r["verdict"] for r in json.loads(again.stdout)["rounds"]] == [
            r["verdict"] for r in report["rounds"]
        ]
