"""Harness and joint mode end to end: round 0 (proposal, approve, reject), the approved plan
implemented through smoke and validation, writes outside the whitelist discarded, and a candidate
harness that does not import rejected before any task runs.

Real CLI, real git, the local sandbox, the scripted model (offline): the diagnosis agent and the
optimizer are the built-in anthropic backend driven by rules prepended to the demo's script.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from harnessopt.commands.demo import DEMO_DATA
from harnessopt.ledger import live_spend
from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.workspace.core import Workspace
from tests.support.cli import git, start_cli
from tests.support.workspace import make_ws

PLAN_MARK = "PLAN-extract-the-city"
PROPOSAL_MD = f"""# Extract the city from a chatty reply ({PLAN_MARK})

## Failure taxonomy

- wrong answer: every train task; the reply is a sentence, the scorer wants the city.

## Review

### Tool inventory
No tools; none needed.

### Prompt context
The skill asks for explanations.

### Loop strategy
One call; no retry.

### Shape of generated code
Not applicable.

### State and memory
None kept between tasks.

## Decisions

1. Control flow: after the call, extract the city from "... is CITY." in harness/run.py.
2. Tools: no change.
3. Memory: no change.
"""
REJECTED_REASON = "too risky without a feature flag"


def _rules(import_error: bool = False) -> list[dict[str, Any]]:
    """The diagnosis (round 0) and round 1 of the optimizer, before the demo's own rules."""
    r0 = "# Round 0: diagnose"
    round1: list[dict[str, Any]] = [
        {
            "role": "optimizer",
            "first_user": f"(?s)# Round 1:.*{PLAN_MARK}",  # only when the approved plan is in the brief
            "turn": 1,
            "tool_use": [
                {
                    "name": "str_replace_based_edit_tool",
                    "input": {
                        "command": "str_replace",
                        "path": "harness/run.py",
                        "old_str": '    (args.out / "answer.txt").write_text(answer)',
                        "new_str": (
                            "    import re\n\n"
                            '    found = re.search(r" is ([A-Z][^.]*)\\.", answer)\n'
                            "    answer = found.group(1) if found else answer\n"
                            '    (args.out / "answer.txt").write_text(answer)'
                        ),
                    },
                }
            ],
        },
        {
            "role": "optimizer",
            "first_user": f"(?s)# Round 1:.*{PLAN_MARK}",
            "turn": 2,
            "tool_use": [
                {
                    "name": "bash",
                    "input": {
                        "command": "echo '# widened' >> skill/SKILL.md; echo 'def score(*a): return 1.0' > scorer.py; "
                        "mkdir -p tasks && echo x > tasks/val.jsonl; echo 'mode: skill' > harnessopt.yaml"
                        + (
                            "; sed -i '1i import no_such_module_for_ho' harness/run.py"
                            if import_error
                            else ""
                        )
                    },
                }
            ],
        },
        {
            "role": "optimizer",
            "first_user": f"(?s)# Round 1:.*{PLAN_MARK}",
            "turn": 3,
            "reply": "Extract the city from the reply\n\nImplements decision 1 of the approved plan.",
        },
    ]
    return [
        {"role": "optimizer", "first_user": r0, "turn": 1, "tool_use": [{"name": "bash", "input": {"command": "grep -c 'passed: false' trajectories/*.md"}}]},
        {
            "role": "optimizer",
            "first_user": f"(?s){r0}.*rejected because: {REJECTED_REASON}",
            "turn": 2,
            "tool_use": [{"name": "str_replace_based_edit_tool", "input": {"command": "create", "path": "proposals/round-0.md", "file_text": "# A second, smaller proposal\n\n## Decisions\n\n1. none\n"}}],
        },
        {
            "role": "optimizer",
            "first_user": r0,
            "turn": 2,
            "tool_use": [
                {"name": "str_replace_based_edit_tool", "input": {"command": "create", "path": "proposals/round-0.md", "file_text": PROPOSAL_MD}},
                {"name": "bash", "input": {"command": "echo 'tampered' >> harness/run.py"}},  # discarded: round 0 edits nothing
            ],
        },
        {"role": "optimizer", "first_user": r0, "turn": 3, "reply": "Extract the city from a chatty reply\n\nSee proposals/round-0.md."},
        *round1,
    ]  # fmt: skip


def make_harness_ws(tmp_path: Path, mode: str = "harness", **script: Any) -> Path:
    data = yaml.safe_load((DEMO_DATA / "model.yaml").read_text())
    data["rules"] = _rules(**script) + data["rules"]
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump(data, sort_keys=False))
    return make_ws(
        tmp_path,
        model=model,
        mode=mode,
        rollout={"batch_size": 4},  # round 0 still runs all train tasks
        gate={"confirm": "none"},  # fewer runs on a shared machine
    )


def ho(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harnessopt", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


def _target_calls(m: ledger.RoundManifest) -> int:
    return m.tokens["target"].calls if "target" in m.tokens else 0


def test_round0_proposal_then_approve_then_the_plan_is_implemented_through_the_gate(tmp_path: Path) -> None:
    ws = make_harness_ws(tmp_path)
    seed_harness = (ws / "harness" / "run.py").read_text()
    r = ho("run", ws, "--rounds", "2")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"harnessopt approve {ws}" in r.stdout and "no round runs" in r.stdout
    repo = Workspace.open(ws).repo
    st = proposals.state(repo)
    assert st is not None and st.status == "pending"
    text = (ws / "proposals" / "round-0.md").read_text()
    assert text == st.text and PLAN_MARK in text
    said = ho("log", ws).stdout  # it said "start with: harnessopt run", which runs no round (QA)
    assert "round 0's proposal (proposals/round-0.md) waits for your decision: harnessopt approve" in said
    n_train = len(Workspace.open(ws).tasks("train"))
    assert f"- wrong answer: {n_train} (" in text and "australia" in text  # counted, with task ids
    assert "does not cover" not in text  # the five aspects and the decisions are there
    assert git(ws, "rev-parse", "HEAD") == st.commit == git(ws, "rev-parse", proposals.PROPOSAL_REF)
    data = ledger.manifest_data(git(ws, "log", "-1", "--format=%B"))
    assert data["status"] == "proposal" and data["train_tasks"] == n_train
    assert len(list((ws / "trajectories").glob("*.md"))) == n_train  # the full train rollout it read
    assert (ws / "harness" / "run.py").read_text() == seed_harness  # round 0 edits nothing
    assert ledger.past_rounds(repo) == []
    assert data["violations"] == ["harness/run.py"]  # the diagnosis's own edit, discarded

    r = ho("approve", ws)
    assert r.returncode == 0, (r.stdout, r.stderr)
    st = proposals.state(repo)
    assert st is not None and st.status == "approved" and proposals.plan_to_implement(repo) == st.text
    assert "decision: approved" in (ws / "proposals" / "round-0.decision.md").read_text()
    assert ho("approve", ws).returncode == 2  # decided once

    r = ho("run", ws, "--rounds", "1")
    assert r.returncode == 0, (r.stdout, r.stderr)
    (one,) = ledger.past_rounds(Workspace.open(ws).repo)
    m = one.manifest
    assert one.status == "accepted", m.reason
    assert m.changed == ["harness/run.py"]
    assert {"harnessopt.yaml", "scorer.py", "skill/SKILL.md", "tasks/val.jsonl"} <= set(m.violations)
    assert m.phases["smoke"].runs > 0 and m.phases["validation"].runs > 0  # gated like any round
    assert "re.search" in (ws / "harness" / "run.py").read_text()
    assert proposals.plan_to_implement(Workspace.open(ws).repo) is None  # implemented
    log = json.loads(ho("log", ws, "--json").stdout)
    assert {"scorer.py", "tasks/val.jsonl"} <= set(log[-1]["violations"])


def test_reject_records_the_reason_and_the_next_run_diagnoses_again(tmp_path: Path) -> None:
    ws = make_harness_ws(tmp_path, mode="joint")
    assert ho("run", ws).returncode == 0
    assert ho("reject", ws).returncode == 2  # a reason is required
    r = ho("reject", ws, "--reason", REJECTED_REASON)
    assert r.returncode == 0, (r.stdout, r.stderr)
    repo = Workspace.open(ws).repo
    st = proposals.state(repo)
    assert st is not None and st.status == "rejected" and st.reason == REJECTED_REASON
    assert proposals.plan_to_implement(repo) is None
    decision = ledger.manifest_data(git(ws, "log", "-1", "--format=%B", proposals.DECISION_REF))
    assert decision["status"] == "rejected" and decision["reason"] == REJECTED_REASON
    first = st.commit

    r = ho("run", ws, "--rounds", "1")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "was rejected" in r.stdout and "no round runs" in r.stdout
    repo = Workspace.open(ws).repo
    again = proposals.state(repo)
    assert again is not None and again.status == "pending" and again.commit != first
    assert "A second, smaller proposal" in again.text  # the diagnosis read why the first was rejected
    assert ledger.past_rounds(repo) == []  # the rejected plan was never implemented
    assert [reason for _, reason in proposals.rejected(repo)] == [REJECTED_REASON]
    assert vcs_is_ancestor(ws, first, "HEAD")  # the rejected proposal stays in main's history


def vcs_is_ancestor(ws: Path, a: str, b: str) -> bool:
    return subprocess.run(["git", "-C", str(ws), "merge-base", "--is-ancestor", a, b]).returncode == 0


def test_a_harness_that_does_not_import_is_rejected_before_any_task_runs(tmp_path: Path) -> None:
    ws = make_harness_ws(tmp_path, import_error=True)
    r = ho("run", ws, "--rounds", "1", "--yes")  # --yes approves the proposal in a script
    assert r.returncode == 0, (r.stdout, r.stderr)
    repo = Workspace.open(ws).repo
    st = proposals.state(repo)
    assert st is not None and st.status == "approved" and st.by == "--yes"
    (one,) = ledger.past_rounds(repo)
    m = one.manifest
    assert one.status == "rejected" and "fails to import" in m.reason and "no_such_module_for_ho" in m.reason
    # no smoke, no validation, no incumbent val run; the incumbent's smoke rerun made ahead while
    # the optimizer worked (the probe, loop.probe_jobs) was spent all the same, and is counted
    assert set(m.phases) == {"rollout", "probe"} and m.phases["probe"].runs == 1
    assert _target_calls(m) == m.train_tasks + 1 == m.phases["rollout"].runs + 1
    assert "no_such_module_for_ho" not in (ws / "harness" / "run.py").read_text()


def test_run_on_a_terminal_asks_and_yes_approves(monkeypatch: Any) -> None:
    from harnessopt import cli

    st = proposals.Round0("a" * 40, "# Round 0 proposal: x\n\n## Decisions\n", "pending")
    asked: list[str] = []

    def answering(*typed: str) -> Any:
        answers = iter(typed)
        return lambda prompt: asked.append(prompt) or next(answers)

    assert cli._round0_decider(True, answering())(st) == ("approve", "--yes")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    assert (
        cli._round0_decider(False, answering())(st) is None
    )  # a script without --yes: the run stops and says why
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert cli._round0_decider(False, answering("n", "the loop change is too broad"))(st) == (
        "reject", "the loop change is too broad",
    )  # fmt: skip
    assert cli._round0_decider(False, answering("l"))(st) is None
    assert cli._round0_decider(False, answering(""))(st) is None  # an empty line: later
    asked.clear()
    # an answer it does not know asks again: "x" was taken as "later", unsaid (QA)
    assert cli._round0_decider(False, answering("x", "Y"))(st) == ("approve", "prompt")
    assert asked[0].endswith("[y]es / [n]o (reject) / [l]ater: ") and asked[1].startswith(
        "Answer y (approve)"
    )

    def closed(prompt: str) -> str:
        raise EOFError

    assert cli._round0_decider(False, closed)(st) is None  # stdin ended at the prompt: later

    def no_reason(prompt: str) -> str:
        if prompt.startswith("Why"):
            raise EOFError
        return "n"

    # stdin ended at "Why?" after an "n": the rejection stands (QA: it was taken as "later")
    assert cli._round0_decider(False, no_reason)(st) == ("reject", "rejected at the prompt")


def test_the_prompt_is_asked_with_the_live_bars_stopped(monkeypatch: Any) -> None:
    """With the bars drawing, input()'s prompt went through rich's stdout proxy, which read
    "[y]es / [n]o / [l]ater" as markup: the terminal showed "es / o (reject) / ater" (QA)."""
    import io

    from rich.console import Console
    from rich.file_proxy import FileProxy

    from harnessopt.reporting.progress import LiveProgress

    progress = LiveProgress(Console(file=io.StringIO(), force_terminal=True))
    try:
        assert progress.bars.live.is_started
        seen: list[tuple[str, bool, bool]] = []

        def real_input(prompt: str) -> str:  # input() writes its prompt to sys.stdout
            seen.append((prompt, isinstance(sys.stdout, FileProxy), progress.bars.live.is_started))
            return "y"

        monkeypatch.setattr("builtins.input", real_input)
        assert progress.ask("[y]es / [n]o: ") == "y"
        assert seen == [("[y]es / [n]o: ", False, False)]
        assert progress.bars.live.is_started  # drawing again after the answer
    finally:
        progress.close()


def test_a_round0_of_a_command_line_mode_is_continued_in_that_mode(tmp_path: Path) -> None:
    """``run -c mode=harness`` on a skill-mode workspace: approve prints the command that continues
    it; a plain ``run`` says the plan is not used in skill mode; the printed command implements it."""
    ws = make_harness_ws(tmp_path, mode="skill")
    script = yaml.safe_load((ws / "scripted_model.yaml").read_text())
    plan_rules = [r for r in script["rules"] if PLAN_MARK in str(r.get("first_user"))]
    again = [{**r, "first_user": r["first_user"].replace("# Round 1:", "# Round 2:")} for r in plan_rules]
    script["rules"] = again + script["rules"]  # the plan implemented in round 2, after a skill round
    (ws / "scripted_model.yaml").write_text(yaml.safe_dump(script, sort_keys=False))
    git(ws, "commit", "-qam", "script: the plan in round 2")
    r = ho("run", ws, "--rounds", "1", "-c", "mode=harness")
    assert r.returncode == 0, (r.stdout, r.stderr)
    st = proposals.state(Workspace.open(ws).repo)
    assert st is not None and st.status == "pending" and st.mode == "harness"
    r = ho("approve", ws)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert f"next: harnessopt run {ws} -c mode=harness" in r.stdout
    assert f"next: harnessopt run {ws} -c mode=harness" in ho("status", ws).stdout
    # The plain command says the plan is unused (a skill-mode round, no plan in its brief) ...
    r = ho("run", ws, "--rounds", "1")
    assert "the approved round-0 plan (written in harness mode) is not used in skill mode" in r.stdout
    assert "run with -c mode=harness to implement it" in r.stdout
    # ... and the printed one implements it.
    r = ho("run", ws, "--rounds", "1", "-c", "mode=harness")
    assert r.returncode == 0, (r.stdout, r.stderr)
    last = ledger.past_rounds(Workspace.open(ws).repo)[-1].manifest
    assert "Implements decision 1 of the approved plan" in last.summary  # the plan was in its brief
    assert "harness/run.py" in last.changed


def test_round0_spend_is_counted_by_status_log_and_the_report(tmp_path: Path) -> None:
    from harnessopt.reporting.data import report_data

    ws = make_harness_ws(tmp_path)
    r = ho("run", ws, "--rounds", "1")
    assert r.returncode == 0, (r.stdout, r.stderr)
    spent = proposals.spend(Workspace.open(ws).repo)
    assert spent["diagnoses"] == 1 and spent["calls"] > len(Workspace.open(ws).tasks("train"))
    line = f"round 0 (diagnosis, 1): {spent['calls']} model call(s)"
    status = ho("status", ws).stdout
    assert line in status
    # the run wrote only the diagnosis: what it spent is that, not "0 calls ... no round recorded yet"
    said = f"last run spent:     {spent['calls']} calls, {spent['tokens']} tokens, $0.0000 in 0 round(s) and 1 round-0"
    assert said in status and "no round of it recorded yet" not in status, status
    log = ho("log", ws).stdout
    assert line in log and "no rounds yet" in log
    assert any(x.startswith(line) for x in report_data(Workspace.open(ws))["spend"])


def _crash(i: int, stderr: str, exit_code: int | None) -> Any:
    from harnessopt.protocols import TaskResult

    return TaskResult(
        task_id=f"t{i}", split="train", round=1, epoch=0, score=0.0, passed=False, soft=None, feedback="",
        answer="", exit_code=exit_code, error_class="crash", wall_s=0.1, input_tokens=0, output_tokens=0,
        steps=0, stderr_tail=stderr, notes=["local sandbox (bwrap): host files read-only, ..."],
    )  # fmt: skip


def test_a_broken_incumbent_is_named_by_its_stderr_and_exit_code_not_the_sandbox_banner() -> None:
    from harnessopt.round.round0 import incumbent_broken

    said = incumbent_broken([_crash(i, "", 7) for i in range(4)])
    assert said is not None
    assert "(exit code 7)" in said and "(nothing on stderr)" in said and "bwrap" not in said
    said = incumbent_broken([_crash(0, "", None), _crash(1, "Traceback\nImportError: no x\n", 1)])
    assert said is not None and "the harness said: Traceback | ImportError: no x" in said
    # A traceback's error is its last line, which its first three never held
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/ho/harness/run.py", line 14, in <module>\n    sys.exit(main())\n             ^^^^^^\n'
        '  File "/ho/harness/run.py", line 6, in main\n    open("/nonexistent/agent.toml")\n'
        "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/agent.toml'\n"
    )
    said = incumbent_broken([_crash(i, trace, 1) for i in range(2)])
    assert said is not None and said.endswith(
        'the harness said: File "/ho/harness/run.py", line 6, in main | open("/nonexistent/agent.toml")'
        " | FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/agent.toml'"
    )
    syntax = '  File "/ho/harness/run.py", line 10\n    (out / "a").write_text(x\n    ^\nSyntaxError: \'(\' was never closed\n'
    said = incumbent_broken([_crash(i, syntax, 1) for i in range(2)])
    assert said is not None and said.endswith(
        'File "/ho/harness/run.py", line 10 | (out / "a").write_text(x | SyntaxError: \'(\' was never closed'
    )


def test_a_diagnosis_that_records_no_proposal_still_shows_what_it_spent(tmp_path: Path) -> None:
    """A seed harness that calls the model and then exits non-zero on every task: the rollout spent
    a call a task, round 0 ends with a UserError and no proposal, and status shows that spend."""
    ws = make_harness_ws(tmp_path)
    run_py = ws / "harness" / "run.py"
    run_py.write_text(run_py.read_text().replace("    sys.exit(main())", "    main()\n    sys.exit(3)"))
    git(ws, "commit", "-qam", "a seed that exits 3 after its answer")
    r = ho("run", ws, "--rounds", "1")
    assert r.returncode == 2 and "before any optimizer call" in r.stderr, (r.stdout, r.stderr)
    repo = Workspace.open(ws).repo
    assert proposals.spend(repo)["diagnoses"] == 0  # no proposal: its spend is in no commit
    n = len(Workspace.open(ws).tasks("train"))
    status = ho("status", ws).stdout
    line = next(x for x in status.splitlines() if x.startswith("interrupted round 0 (diagnosis) spent"))
    assert f", {n} model call(s)," in line, status
    from harnessopt.reporting.data import report_data

    assert line in report_data(Workspace.open(ws))["spend"]  # and the report
    assert not (ws / ".harnessopt" / "spend-live.json").exists()  # the journal holds it, once
    r = ho("run", ws, "--rounds", "1")  # again: the first's finished runs are reused, not paid twice
    assert r.returncode == 2
    line = next(x for x in ho("status", ws).stdout.splitlines() if x.startswith("interrupted round 0"))
    assert f", {n} model call(s)," in line


def test_a_diagnosis_killed_outright_shows_its_last_count(tmp_path: Path) -> None:
    """SIGKILL while the diagnosis agent works (the manual backend waits for a person): the train
    rollout's calls are in no commit and no spend line; the run's live file has them, status shows
    them, and the next run moves them into the journal once."""
    ws = make_ws(tmp_path, mode="harness", optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 60})
    n = len(Workspace.open(ws).tasks("train"))
    proc = start_cli("run", ws, "--rounds", "1")
    try:
        deadline = time.monotonic() + 120
        while live_spend.left(ws).get(0, {}).get("tokens", {}).get("target", {}).get("calls") != n:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    status = ho("status", ws).stdout
    assert f"interrupted round 0 (diagnosis) spent $0.0000, {n} model call(s)" in status, status
    assert "at least: the run was killed" in status
    r = ho("run", ws, "--rounds", "1", "-c", "optimizer.wall_s=1")  # folds it, then diagnoses again
    assert "a run killed in round 0 had spent" in r.stdout + r.stderr, (r.stdout, r.stderr)
    spends = [e for e in Workspace.open(ws).journal.read()[0] if e.get("phase") == "spend"]
    assert [e.get("killed") for e in spends if e["round"] == 0][:1] == [True]


def test_stop_during_a_persons_diagnosis_records_no_proposal(tmp_path: Path) -> None:
    """STOP while the manual backend waits for a person's round-0 proposal: the turn ends, no half-
    written proposal is committed, the run ends at once and says so; the next run diagnoses again."""
    ws = make_ws(tmp_path, mode="harness", optimizer={"backend": "manual", "settle_s": 60, "wall_s": 120})
    head = git(ws, "rev-parse", "HEAD")
    proc = start_cli("run", ws, "--rounds", "1")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any("Round 0: edit the files in" in line for line in list(lines)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        (ws / ".harnessopt" / "STOP").touch()
        proc.wait(timeout=60)  # not communicate(): the reader owns stdout, and would lose lines to it
        reader.join(timeout=10)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, (out, err)
    assert "round 0: stopped at your request" in out and "no proposal recorded" in out
    assert git(ws, "rev-parse", "HEAD") == head and proposals.state(Workspace.open(ws).repo) is None
    assert not (ws / ".harnessopt" / "STOP").exists()
