"""Live progress: plain lines with an ETA off a terminal, rich bars on one, the optimizer's turns."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

from rich.console import Console

from harnessopt.ledger.store import RoleUsage, RoundManifest
from harnessopt.protocols import Task, TaskResult, Usage
from harnessopt.reporting.progress import (
    LiveProgress,
    RunProgress,
    TranscriptWatcher,
    progress_for,
    round_lines,
)


def _result(task: Task, passed: bool) -> TaskResult:
    return TaskResult(
        task.id, task.split, 1, 0, float(passed), passed, None, "", "", 0, None, 0.1, 100, 20, 1
    )


def _drive(p: RunProgress, phase: str, n: int = 8) -> None:
    tasks = [Task(f"t{i}", "q", "a", "val") for i in range(n)]
    p.bind(lambda: Usage(3, 1200, 300, 0.0123))
    p.started("candidate", tasks, 1, [0], phase)
    for i, t in enumerate(tasks, 1):
        p.finished("candidate", _result(t, i % 2 == 0), i, n)
    p.unbind()


def test_plain_progress_prints_quarters_with_pass_rate_tokens_dollars() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200)
    with progress_for(console) as p:
        assert type(p) is RunProgress  # not a terminal: plain lines
        _drive(p, "smoke")
    lines = [re.sub(r"ETA \d+s", "ETA <s>", line) for line in buf.getvalue().splitlines()]
    assert lines == [
        f"round 1 smoke: {d}/8 tasks, pass 50%, {k} tokens, run: 1.5k tokens, $0.01"
        + (", ETA <s>" if d < 8 else "")
        for d, k in ((2, 240), (4, 480), (6, 720), (8, 960))
    ]


def test_live_progress_draws_bars_on_a_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True)
    with progress_for(console) as p:
        assert isinstance(p, LiveProgress)
        _drive(p, "validation")
        p.say("a line above the bars")
        (task,) = p.bars.tasks
        assert (task.completed, task.total, task.description) == (8, 8, "round 1 validation")
        assert "pass 50%" in task.fields["stats"] and "$0.01" in task.fields["stats"]
    assert "a line above the bars" in buf.getvalue()


def test_optimizer_turns_are_printed_as_the_transcript_grows(tmp_path: Path) -> None:
    said: list[str] = []
    watcher = TranscriptWatcher(tmp_path, said.append)
    watcher.start()
    path = tmp_path / "optimizer-round-3.jsonl"
    events = [
        {"event": "start", "user": "..."},
        {"event": "response", "turn": 1, "content": [{"type": "tool_use", "name": "bash", "input": {"command": "grep -c 'passed: false' trajectories/*.md"}}]},
        {"event": "response", "turn": 2, "content": [{"type": "tool_use", "name": "str_replace_based_edit_tool", "input": {"command": "view", "path": "skill/SKILL.md"}}]},
    ]  # fmt: skip
    with path.open("w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
            f.flush()
            time.sleep(0.6)
        f.write('{"event": "response", "turn": 3')  # a line still being written is not read yet
    watcher.stop()
    assert said == [
        "round 3 optimizer turn 1: bash: grep -c 'passed: false' trajectories/*.md",
        "round 3 optimizer turn 2: str_replace_based_edit_tool: view skill/SKILL.md",
    ]


def test_transcripts_from_before_the_run_are_not_printed_whatever_their_mtime(tmp_path: Path) -> None:
    """A copied or restored workspace has transcripts with new mtimes: what they held when the run
    started is an earlier run's; a line written to one during the run is this run's, and so is all of
    one written anew."""

    def response(turn: int, command: str) -> str:
        return json.dumps({"event": "response", "turn": turn, "content": [
            {"type": "tool_use", "name": "bash", "input": {"command": command}}]}) + "\n"  # fmt: skip

    old = tmp_path / "optimizer-round-1.jsonl"
    old.write_text(response(1, "ls"))  # written just now, as `cp -r` would
    resumed = tmp_path / "optimizer-round-2.jsonl"
    resumed.write_text(response(1, "cat skill/SKILL.md"))
    said: list[str] = []
    watcher = TranscriptWatcher(tmp_path, said.append)  # polled by hand here: no thread to race it
    with resumed.open("a") as f:
        f.write(response(2, "wc -l trajectories/*.md"))
    watcher.poll()
    old.write_text("")  # round 1 run again after a crash: its transcript written anew
    watcher.poll()
    with old.open("a") as f:
        f.write(response(1, "head -3 skill/SKILL.md"))
    watcher.poll()
    assert said == [
        "round 2 optimizer turn 2: bash: wc -l trajectories/*.md",
        "round 1 optimizer turn 1: bash: head -3 skill/SKILL.md",
    ]


def test_round_line_and_discarded_writes() -> None:
    m = RoundManifest(
        round=2, status="rejected", reason="rejected: +0.000 inside dead zone", val_score=0.5, delta=0.0,
        dead_zone=0.226, n=14, fixed=[], broken=["x"], cost_usd=0.0123, violations=["scorer.py"],
        tokens={"target": RoleUsage(calls=22, input=1000, output=40), "optimizer": RoleUsage(calls=4, input=3000, output=100)},
    )  # fmt: skip
    assert round_lines(m) == [
        "round 2 rejected | val 0.500 (Δ +0.000 vs dead zone 0.226) | fixed 0 / broken 1 | 26 calls, 4.1k tokens, $0.0123",
        "round 2: discarded 1 write(s) outside the whitelist: scorer.py",
    ]


def test_a_rounds_optimizer_turns_are_printed_where_they_happened(tmp_path: Path, monkeypatch) -> None:
    """The transcripts were polled every half second, so a round that ended within that of its
    last turn printed the turn after the round's result. Every line said now prints the turns
    written before it first. (The poll interval is made an hour here, so no turn line comes from
    the polling thread.)"""
    from harnessopt.reporting import progress
    from harnessopt.round import driver
    from harnessopt.workspace.core import Workspace
    from tests.support.workspace import make_ws

    monkeypatch.setattr(progress, "POLL_S", 3600.0)
    ws = Workspace.open(make_ws(tmp_path, search={"explore": 0}))
    buf = io.StringIO()
    p = RunProgress(Console(file=buf, width=300))
    driver.run(ws, 1, p.say, progress=p)
    p.close()
    lines = buf.getvalue().splitlines()
    turns = [i for i, line in enumerate(lines) if line.startswith("round 1 optimizer turn")]
    (reading,) = [i for i, line in enumerate(lines) if "is reading 8 trajectories" in line]
    (smoke,) = [i for i, line in enumerate(lines) if line.startswith("round 1: smoke test")]
    assert turns and reading < min(turns) and max(turns) < smoke, "\n".join(lines)
    # the backend's name alone read as the Anthropic API being called
    assert any(
        line.endswith("optimizer anthropic:scripted-demo-optimizer (a scripted model)") for line in lines
    )


def test_a_long_reason_is_cut_at_a_word_not_inside_a_number() -> None:
    """ "only $0.0100 of budget.max_cost=0.01 remain" was cut to "...max_cost=0": a budget of 0."""
    reason = "budget: this call may use up to $0.3316 (its largest reply at list price) but only $0.0100 of budget.max_cost=0.01 remain"
    m = RoundManifest(round=5, status="failed", reason=reason)
    (line,) = round_lines(m)
    assert "budget.max_cost=0.01 ... | 0 calls" in line


def test_a_screening_line_names_the_candidate_whose_runs_it_counts() -> None:
    """Several candidates screened on train share one phase: its lines named none of them (QA)."""
    buf = io.StringIO()
    with progress_for(Console(file=buf, width=200)) as p:
        tasks = [Task(f"t{i}", "q", "a", "train") for i in range(4)]
        for name, passes in (("c1", True), ("c2", False)):
            p.started(name, tasks, 2, [0], "screening")
            for i, t in enumerate(tasks, 1):
                p.finished(name, _result(t, passes), i, len(tasks))
    said = buf.getvalue().splitlines()
    # each candidate's own runs, not the phase's so far (QA: "of c2: 8/8, pass 50%" summed c1's)
    assert said[3] == "round 2 screening of c1: 4/4 tasks, pass 100%, 480 tokens", said
    assert said[-1] == "round 2 screening of c2: 4/4 tasks, pass 0%, 480 tokens", said
    live = LiveProgress(Console(file=io.StringIO(), width=120, force_terminal=True))
    live.started("c3", [Task("t", "q", "a", "train")], 2, [0], "screening")
    assert [t.description for t in live.bars.tasks] == ["round 2 screening of c3"]
    live.close()
