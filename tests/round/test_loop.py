"""The loop under interruption and recovery: main never holds a half-applied round."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from harnessopt.commands.demo import demo_config
from harnessopt.errors import UserError
from harnessopt.ledger import live_spend, vcs
from harnessopt.ledger import store as ledger
from harnessopt.optimizer.manual import DONE_NAME
from harnessopt.protocols import Task
from harnessopt.reporting.data import report_data
from harnessopt.rollout.run_cache import RESUME_DIR
from harnessopt.round import steps
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git, start_cli, wait_for_phase
from tests.support.workspace import make_ws


@pytest.mark.parametrize("phase", ["propose", "smoke"])
def test_ctrl_c_mid_round_leaves_main_untouched(tmp_path: Path, phase: str) -> None:
    _interrupt_mid_round(tmp_path, phase, "local")


def test_sigterm_mid_round_leaves_main_untouched_and_says_so(tmp_path: Path) -> None:
    # systemd, `kill`, `timeout`, a CI job's end: the run stops as a Ctrl-C stops it, with a line
    _interrupt_mid_round(tmp_path, "smoke", "local", signal.SIGTERM)


@pytest.mark.docker
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_while_containers_run_leaves_none_behind(
    tmp_path: Path, docker_client: Any, signum: signal.Signals
) -> None:
    pid = _interrupt_mid_round(tmp_path, "smoke", "docker", signum)
    assert docker_client.containers.list(all=True, filters={"label": f"harnessopt.pid={pid}"}) == []


def _interrupt_mid_round(
    tmp_path: Path, phase: str, sandbox: str, signum: signal.Signals = signal.SIGINT
) -> int:
    # manual optimizer: waits for a person, so the run is reliably inside the round when interrupted
    ws = make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 60})
    head = git(ws, "rev-parse", "HEAD")
    # the run's own temporary folders (short: the gateway's socket path is capped at 108 bytes)
    tmpdir = Path(tempfile.mkdtemp(prefix="ho-tt-"))
    proc = start_cli("run", ws, "--rounds", "1", "--sandbox", sandbox, tmpdir=tmpdir)
    try:
        view = Path(wait_for_phase(ws, proc, "propose")["view"])
        assert ws.resolve() not in view.resolve().parents  # no tasks/ or scorer.py up the view's tree
        skill = view / "skill" / "SKILL.md"
        skill.write_text(skill.read_text().replace("Explain your answer", "Reply with only the city name"))
        if phase == "smoke":
            (view / DONE_NAME).touch()  # gating starts now: an edit made before the optimizer's first look
            wait_for_phase(ws, proc, "check")  # would otherwise wait for its wall clock
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        left = sorted(p.name for p in tmpdir.iterdir())
    finally:
        proc.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert proc.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err
    said = "interrupted" if signum == signal.SIGINT else f"stopped by {signum.name}"
    assert f"harnessopt: {said}; main is unchanged" in err, err
    assert left == []  # views, the gateway's socket folder, candidate copies, container slots: removed
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "status", "--porcelain") == ""
    assert git(ws, "tag", "--list", "ho/round-*") == "ho/round-0"
    assert "Reply with only the city name" not in (ws / "skill" / "SKILL.md").read_text()
    assert not view.exists()  # the view is not left in /tmp
    # Nothing was recorded, so the next run starts round 1 again; what it spent is still shown.
    assert ledger.next_round(Workspace.open(ws).repo) == 1
    status = subprocess.run(
        [sys.executable, "-m", "harnessopt", "status", str(ws)], capture_output=True, text=True
    )
    assert "interrupted round 1 spent $" in status.stdout, status.stdout
    assert "in 0 round(s) (no round of it recorded yet)" in status.stdout and "-100%" not in status.stdout
    said = next(x for x in status.stdout.splitlines() if x.startswith("interrupted round 1"))
    assert said in report_data(Workspace.open(ws))["spend"]  # the report a user shares says it too
    # where it stopped: the step it was in, not the spend line its way out wrote
    assert "last run stopped in round 1, its journal's last step '" in status.stdout, status.stdout
    assert "last step 'spend'" not in status.stdout
    assert phase != "propose" or "last step 'propose'" in status.stdout
    return proc.pid


def _round_one_commit(tmp_path: Path, recorded: bool = False) -> tuple[Path, Workspace, str, str]:
    """A workspace and a round-1 commit (one more line in SKILL.md) not yet on main: (path, ws,
    parent, sha); ``recorded``: with an accepted round's message, as ``record_accepted`` writes it."""
    from harnessopt.ledger.store import RoundManifest, _round_message

    ws_path = make_ws(tmp_path)
    ws = Workspace.open(ws_path)
    parent = vcs.head_sha(ws.repo)
    overlay = tmp_path / "overlay"
    (overlay / "skill").mkdir(parents=True)
    (overlay / "skill" / "SKILL.md").write_text((ws_path / "skill" / "SKILL.md").read_text() + "\nnew line\n")
    m = RoundManifest(round=1, status="accepted", reason="accepted: +0.5", parent=parent, val_score=0.5)
    sha = vcs.build_commit(
        ws.repo, parent, overlay, ["skill"], _round_message(m) if recorded else "round 1\n"
    )
    return ws_path, ws, parent, sha


def test_a_run_killed_outright_leaves_its_temporary_folder_to_the_next_command(tmp_path: Path) -> None:
    # SIGKILL (the OOM killer, kill -9) runs no way out: the views, sockets and task folders stay,
    # all in the run's own folder, which the next harnessopt command removes once it is unlocked
    ws = make_ws(tmp_path, optimizer={"backend": "manual", "settle_s": 0.5, "wall_s": 60})
    tmpdir = Path(tempfile.mkdtemp(prefix="ho-tt-"))
    try:
        proc = start_cli("run", ws, "--rounds", "1", tmpdir=tmpdir)
        view = Path(wait_for_phase(ws, proc, "propose")["view"])
        (run_dir,) = tmpdir.iterdir()
        assert run_dir in view.parents
        deadline = time.monotonic() + 30  # the round's train runs, counted by the run's keeper
        while 1 not in live_spend.left(ws) and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.kill()
        proc.communicate(timeout=30)
        assert view.is_dir()  # left behind
        old = time.time() - 3600
        os.utime(run_dir, (old, old))
        status = subprocess.run(
            [sys.executable, "-m", "harnessopt", "status", str(ws)],
            capture_output=True,
            text=True,
            env={**os.environ, "TMPDIR": str(tmpdir)},
        )
        assert status.returncode == 0, status.stderr
        assert list(tmpdir.iterdir()) == []  # the killed run's folder, and status's own
        # and what the round spent before the kill, which no spend line recorded
        assert not any(
            e.get("phase") == "spend"
            for e in map(json.loads, (ws / ".harnessopt" / "journal.jsonl").read_text().splitlines())
        )
        spent = r"interrupted round 1 spent \$0\.0000, [1-9][0-9]* model call\(s\), [1-9][0-9,]* tokens \(.*killed"
        assert re.search(spent, status.stdout), status.stdout  # the scripted model is free; its calls count
    finally:
        proc.kill()
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_recover_finishes_an_interrupted_checkout(tmp_path: Path) -> None:
    ws_path, ws, parent, sha = _round_one_commit(tmp_path)
    ws.journal.write(1, "applying", commit=sha)
    ws.repo.git.update_ref("refs/heads/main", sha, parent)  # the crash came after update-ref, before checkout
    assert vcs.dirty_paths(ws.repo)
    said: list[str] = []
    ledger.recover(ws.repo, ws.journal, said.append)
    assert not vcs.dirty_paths(ws.repo)
    assert (ws_path / "skill" / "SKILL.md").read_text().endswith("new line\n")
    assert ws.repo.commit("ho/round-1").hexsha == sha and said


def test_recover_refuses_a_users_uncommitted_edit(tmp_path: Path) -> None:
    ws_path = make_ws(tmp_path)
    (ws_path / "skill" / "notes.md").write_text("mine")
    with pytest.raises(UserError, match="commit or stash"):
        opened = Workspace.open(ws_path)
        ledger.recover(opened.repo, opened.journal, print)
    assert (ws_path / "skill" / "notes.md").read_text() == "mine"


def test_train_batches_rotate_through_the_split() -> None:
    train = [Task(id=f"t{i}", input=str(i), answer=i, split="train") for i in range(10)]
    seen = [t.id for k in (1, 2, 3, 4, 5) for t in steps.train_batch(train, k, 4)]
    assert set(seen) == {t.id for t in train}
    assert steps.train_batch(train, 1, 4) == steps.train_batch(train, 1, 4)
    assert len(steps.train_batch(train, 7, 50)) == 10


def test_budget_spent_mid_round_is_a_failed_round_and_stops_the_run(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    r = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "3", "--max-calls", "3"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 3, r.stderr  # a run whose rounds failed is not a success
    assert "budget" in r.stdout and "stopping after round 1" in r.stdout
    assert "round(s) 1 failed" in r.stderr
    records = ledger.rounds(Workspace.open(ws).repo)
    assert [(x.round, x.status) for x in records] == [(0, "initial"), (1, "failed")]
    assert "max_calls" in records[1].manifest.reason
    assert records[1].manifest.reason.startswith("harnessopt budget spent")  # no "BudgetExceeded: " (QA)
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "status", "--porcelain") == ""


def test_a_first_round_the_measured_rates_say_cannot_commit_is_not_started(tmp_path: Path) -> None:
    """On priors a first round starts (they may be several-fold off) and the gateway stops it (the
    test above). With rounds measured, a run whose budget the projection says pays for no round
    that could commit started one anyway and failed it after paying for its rollouts (QA): now it
    says so and starts none; nothing is spent, main does not move."""
    ws = make_ws(tmp_path)
    assert cli("run", ws, "--rounds", "1").returncode == 0  # a measured round
    head = git(ws, "rev-parse", "HEAD")
    r = cli("run", ws, "--rounds", "2", "--max-calls", "3")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    assert (
        "budget.max_calls pays for no round that could commit at these rates: the run would start none"
        in (r.stdout)
    )
    assert re.search(r"^not starting round 2: the budget left \(about ", r.stdout, re.M), r.stdout[-2000:]
    assert "round 2: rollout" not in r.stdout
    records = ledger.rounds(Workspace.open(ws).repo)
    assert [x.round for x in records] == [0, 1] and git(ws, "rev-parse", "HEAD") == head
    # a budget the projected round fits but a round that could commit does not (its worst case:
    # a whole validation): the projection said "would end it before round 2", the run started none
    from harnessopt.reporting.projection import RoundCost, project

    opened = Workspace.open(ws)
    expected = project(opened, 2).rounds[0].calls

    def at(calls: int) -> Any:
        budget = opened.cfg.budget.model_copy(update={"max_calls": calls})
        return project(opened, 2, opened.cfg.model_copy(update={"budget": budget}))

    first_fit = next(c for c in range(1, 10 * int(expected)) if at(c).plans.fits(RoundCost()))
    assert first_fit - 1 > expected, (first_fit, expected)  # the gap the QA fell into
    note = at(first_fit - 1).budget_note()
    assert (
        note
        == "; budget.max_calls pays for no round that could commit at these rates: the run would start none"
    )


def test_a_round_whose_calls_the_budget_left_would_refuse_is_not_started(tmp_path: Path) -> None:
    """Round 1 spends 11k of 25k tokens; the plan (measured rounds of about 7k) has room for round 2,
    but the gateway reserves an optimizer call's max_tokens plus its input, about 16k here: round 2's
    first call was refused, the round failed and the run exited 3. Now the run does not start a round
    the budget left cannot hold this run's largest call in, and says why."""
    ws = make_ws(tmp_path)
    r = cli(
        "run",
        ws,
        "--rounds",
        "3",
        "--max-tokens",
        "25000",
        "--sandbox",
        "local",
        "-c",
        "optimizer.unsafe_host=true",
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr)
    said = re.search(r"^not starting round 2: after the round's rollout and optimizer turns at the measured rates "
                     r"\(about \d+ calls, [\d,]+ tokens, \$[\d.]+\), one optimizer call as large as this run's largest would be "
                     r"refused \(harnessopt budget: this call may use up to (\d+) tokens .* but only (\d+) "
                     r"tokens of budget.max_tokens=25000 remain", r.stdout, re.M)  # fmt: skip
    assert said and int(said.group(1)) > int(said.group(2)), r.stdout[-2000:]
    records = ledger.rounds(Workspace.open(ws).repo)
    assert [(x.round, x.status) for x in records] == [(0, "initial"), (1, "accepted")]


@pytest.mark.parametrize("sandbox", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_ctrl_c_does_not_wait_for_long_running_tasks(tmp_path: Path, sandbox: str, request) -> None:
    if sandbox == "docker":
        request.getfixturevalue("docker_client")  # skips locally / fails in CI without an engine
    ws = make_ws(tmp_path, rollout={"timeout_s": 300})
    run_py = ws / "harness" / "run.py"
    marker = f"ho-slow-{uuid.uuid4().hex}"  # this test's processes only: other runs may share the machine
    run_py.write_text(
        f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(120)', {marker!r}])\n"
        + run_py.read_text()
    )
    git(ws, "commit", "-qam", "a slow harness")
    proc = start_cli("run", ws, "--sandbox", sandbox)
    try:
        wait_for_phase(ws, proc, "start")
        time.sleep(2)  # the first tasks are running (sleeping) now
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
        stopped_in = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert stopped_in < 20, stopped_in
    # Every task was asleep when Ctrl-C came: what the stop ended (an exit -9 "crash") is no run a
    # rerun of the round may reuse, so none is kept.
    kept = list((ws / ".harnessopt" / RESUME_DIR).glob("round-1/rollouts/**/*.json"))
    assert kept == [], [json.loads(p.read_text()).get("error_class") for p in kept]
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
    if sandbox == "docker":
        client = request.getfixturevalue("docker_client")
        assert client.containers.list(all=True, filters={"label": f"harnessopt.pid={proc.pid}"}) == []


_HARNESS_CRASHES = "import sys\nprint(\"the 'claude' CLI is not on PATH\", file=sys.stderr)\nsys.exit(3)\n"
_SCORER_RAISES = "\n\ndef score(task, answer, out_dir):\n    raise ValueError('boom')\n"


@pytest.mark.parametrize(
    ("path", "code", "said", "failures"),
    [
        ("harness/run.py", _HARNESS_CRASHES, ("8/8 train runs", "the 'claude' CLI is not on PATH"), "harness crash"),
        # every run scored 0: the run paid the optimizer to read failures the answers never had, said
        # the scorer failed "on some tasks", classed the runs "wrong answer" and exited 0
        ("scorer.py", _SCORER_RAISES, ("8/8 train runs of the incumbent could not be scored",
                                       "ValueError: boom", "fix scorer.py"), "scorer error"),
    ],
    ids=["harness-crashes", "scorer-raises"],
)  # fmt: skip
def test_an_incumbent_that_fails_everywhere_fails_the_round_before_any_optimizer_call(
    tmp_path: Path, path: str, code: str, said: tuple[str, ...], failures: str
) -> None:
    """A harness whose CLI is missing, or a scorer that raises on every run: round 1 fails before
    any optimizer call, saying why, and the run stops (exit 3)."""
    ws = make_ws(tmp_path)
    with (ws / path).open("w" if path.startswith("harness") else "a") as f:
        f.write(code)
    git(ws, "commit", "-qam", f"a broken {path}")
    head = git(ws, "rev-parse", "HEAD")
    r = cli("run", ws, "--rounds", "2", "--sandbox", "local")
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "some tasks" not in r.stdout
    (only,) = ledger.past_rounds(Workspace.open(ws).repo)  # the run stopped after round 1
    assert only.status == "failed" and all(s in only.manifest.reason for s in said), only.manifest.reason
    assert said[-1] in r.stdout
    assert "optimizer" not in only.manifest.tokens and only.manifest.optimizer is None
    assert only.manifest.phases["rollout"].failures == {failures: 8}
    assert git(ws, "rev-parse", "HEAD") == head


def test_max_hours_ends_the_run_at_a_phase_boundary(tmp_path: Path) -> None:
    ws = make_ws(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    r = subprocess.run(
        [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "3", "--sandbox", "local"]
        + ["--max-hours", "0.00001", "-c", "optimizer.unsafe_host=true"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 3, (r.stdout, r.stderr)
    (only,) = ledger.past_rounds(Workspace.open(ws).repo)
    assert only.status == "failed" and "budget.max_hours" in only.manifest.reason
    assert git(ws, "rev-parse", "HEAD") == head and git(ws, "status", "--porcelain") == ""


def test_recover_finishes_an_apply_killed_between_the_tag_and_the_swap(tmp_path: Path) -> None:
    ws_path, ws, parent, sha = _round_one_commit(tmp_path)
    ws.journal.write(1, "applying", commit=sha, parent=parent, new_best=True)
    vcs.tag(ws.repo, "ho/round-1", sha)  # record_accepted tags first; the kill came before main moved
    assert vcs.head_sha(ws.repo) == parent
    ledger.recover(ws.repo, ws.journal, lambda _m: None)
    assert vcs.head_sha(ws.repo) == sha and not vcs.dirty_paths(ws.repo)
    assert ws.repo.commit("ho/best").hexsha == sha
    assert (ws_path / "skill" / "SKILL.md").read_text().endswith("new line\n")
    ledger.recover(ws.repo, ws.journal, lambda _m: None)  # nothing left to finish: a no-op
    assert vcs.head_sha(ws.repo) == sha


def test_recover_leaves_an_unfinished_apply_until_edits_made_since_are_stashed(tmp_path: Path) -> None:
    ws_path, ws, parent, sha = _round_one_commit(tmp_path)
    ws.journal.write(1, "applying", commit=sha, parent=parent, new_best=True)
    vcs.tag(ws.repo, "ho/round-1", sha)  # killed before main moved; then the user edited the skill
    with (ws_path / "skill" / "SKILL.md").open("a") as f:
        f.write("MY EDIT\n")
    with pytest.raises(UserError, match="git stash them, run again to finish the round"):
        ledger.recover(ws.repo, ws.journal, lambda _m: None)
    assert vcs.head_sha(ws.repo) == parent and "MY EDIT" in (ws_path / "skill" / "SKILL.md").read_text()
    git(ws_path, "stash", "-q")
    ledger.recover(ws.repo, ws.journal, lambda _m: None)
    assert vcs.head_sha(ws.repo) == sha


def test_a_swap_refused_in_the_last_moment_leaves_no_round_tag(tmp_path: Path, monkeypatch) -> None:
    """main moves between the last check and the compare-and-swap: the swap refuses, and the round's
    tag, set just before it, goes again (log read it as an accepted round main never held)."""
    from harnessopt.ledger.journal import Journal
    from harnessopt.ledger.store import RoundManifest

    ws_path, ws, parent, sha = _round_one_commit(tmp_path)
    git(ws_path, "commit", "-q", "--allow-empty", "-m", "the user's commit")
    monkeypatch.setattr(vcs, "main_unmovable", lambda _repo, _parent: None)  # the check saw nothing yet
    m = RoundManifest(round=1, status="accepted", reason="accepted", parent=parent)
    with pytest.raises(ledger.MainMoved, match="round 1 was not applied: main moved during the round"):
        ledger.record_accepted(
            ws.repo, Journal(ws_path), parent, tmp_path / "overlay", ["skill"], m, new_best=True
        )
    assert git(ws_path, "tag", "--list", "ho/round-1", "ho/best") == "ho/best"
    assert git(ws_path, "rev-parse", "ho/best^{commit}") == parent
    assert git(ws_path, "log", "-1", "--format=%s") == "the user's commit"


@pytest.mark.parametrize("change", ["edit", "branch", "commit", "skill commit"])
def test_an_accept_is_not_applied_over_what_the_user_changed_during_the_round(
    tmp_path: Path, change: str
) -> None:
    """The demo's round 1 is accepted; mid-round the user edits the skill without committing, checks
    out a branch of their own, or commits on main. The checkout that applies an accept would wipe
    the edit (git reset --hard), reset their branch to the round's commit, or fail with a raw git
    error after tagging a round main never held: the round is recorded failed instead, saying why
    and where its candidate is, and the user's work is as they left it. (A commit that changed the
    skill made the round's own commit fail on git rm's check against HEAD: a traceback, and the
    accepted candidate was lost (QA).)"""
    ws = make_ws(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    # on another branch, a second round would start from it and never be applied (QA): it stops;
    # with the edit still there, a second round is refused: the run still says what round 1 did
    rounds = "2" if change in ("branch", "edit") else "1"
    proc = start_cli("run", ws, "--rounds", rounds, "--sandbox", "local")
    try:
        wait_for_phase(ws, proc, "check")  # the candidate is made; smoke, validation and the gate follow
        if change == "edit":
            with (ws / "skill" / "SKILL.md").open("a") as f:
                f.write("\nMY EDIT, not committed yet\n")
        elif change == "branch":
            git(ws, "checkout", "-q", "-b", "mine")
        elif change == "skill commit":
            skill = ws / "skill" / "SKILL.md"
            skill.write_text(skill.read_text() + "\nmine\n")
            git(ws, "commit", "-qam", "my edit of the skill during the run")
        else:
            (ws / "NOTES.md").write_text("my notes\n")
            git(ws, "add", "NOTES.md")
            git(ws, "commit", "-qm", "my commit during the run")
        mine = git(ws, "rev-parse", "HEAD")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    # a run whose round failed, also when a second round was then refused (it was 2, "bad input ...
    # nothing changed", and the run's summary was never printed (QA))
    assert proc.returncode == 3, (out, err)
    assert "Traceback" not in err and "round 1: failed (" in out and "review: harnessopt log" in out
    assert "harnessopt: round(s) 1 failed: accepted by the gate, not applied" in err
    if change == "branch":
        assert "HEAD moved during the run (on mine); the run stops before round 2" in err
    if change == "edit":
        assert "changed during the run; commit or stash your edits, then run again" in err
    rows = json.loads(subprocess.run(
        [sys.executable, "-m", "harnessopt", "log", str(ws), "--json"], capture_output=True, text=True, check=True
    ).stdout)  # fmt: skip
    assert [r["status"] for r in rows] == ["failed"]
    assert rows[0]["reason"].startswith("accepted by the gate, not applied: ")
    assert "refs/harnessopt/failed/round-1" in rows[0]["reason"] and "\n" not in rows[0]["reason"]
    assert f"(harnessopt diff {ws.resolve()} 1 shows it)" in rows[0]["reason"]  # not "diff WS K"
    assert git(ws, "rev-parse", "refs/harnessopt/failed/round-1")
    assert git(ws, "tag", "--list", "ho/round-1") == ""  # no tag on a commit main never held
    assert git(ws, "rev-parse", "HEAD") == mine and git(ws, "rev-parse", "main") == (
        mine if change.endswith("commit") else head
    )
    if change == "edit":
        assert "MY EDIT, not committed yet" in (ws / "skill" / "SKILL.md").read_text()
        assert "had uncommitted edits" in rows[0]["reason"]
    if change == "branch":
        assert git(ws, "rev-parse", "mine") == head and "HEAD moved to mine" in rows[0]["reason"]
    if change.endswith("commit"):
        assert "main moved to" in rows[0]["reason"] and git(ws, "status", "--porcelain") == ""


def test_a_per_call_token_cap_under_the_harness_ask_is_named_not_called_a_spent_budget(
    tmp_path: Path,
) -> None:
    """budget.target_max_output_tokens below the 1,024 the chat harness asks for: the gateway
    refuses each call (400, naming that setting), and the round said "the model budget is spent"
    with no budget set (QA): a refusal naming a budget setting was read as the budget's 429. The
    harness's own error is the reason now, and a rerun with a larger cap runs."""
    ws = make_ws(tmp_path, budget={"target_max_output_tokens": 500})
    r = cli("run", ws, "--rounds", "1")
    assert r.returncode == 3, r.stderr
    assert "budget is spent" not in r.stdout + r.stderr
    assert "max_tokens: 1024 is over the 500 a target call may ask for" in r.stderr
    assert "raise budget.target_max_output_tokens" in r.stdout


def test_the_built_in_optimizer_asks_no_more_than_the_optimizer_cap_allows(tmp_path: Path) -> None:
    """budget.optimizer_max_output_tokens under the 8,192 the built-in optimizer asked for each
    call: the gateway refused its first call, after the round's rollouts were paid (QA). Its calls
    ask for the cap now, and the round runs."""
    ws = make_ws(tmp_path, budget={"optimizer_max_output_tokens": 1000})
    r = cli("run", ws, "--rounds", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    m = ledger.find(Workspace.open(ws).repo, 1).manifest
    assert m.status == "accepted" and m.optimizer is not None and m.optimizer.stopped_by == "done"


QUOTA_AGENT = """
import json, os, sys, urllib.error, urllib.request
body = json.dumps({"model": sys.argv[1], "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
req = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", body.encode(), method="POST",
    headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"], "anthropic-version": "2023-06-01",
             "content-type": "application/json"},
)
try:
    urllib.request.urlopen(req, timeout=30)
except urllib.error.HTTPError:
    print("Quota exceeded. Check your plan and billing details.")
    sys.exit(1)
"""


def test_an_agent_that_tells_the_budgets_refusal_in_its_own_words_is_not_believed(tmp_path: Path) -> None:
    """Codex reports the gateway's budget 429 as "Quota exceeded. Check your plan and billing
    details": that was the round's recorded reason, sending the user to their provider's billing
    (QA). The round names the budget that refused, and what the agent said."""
    model = demo_config("local").optimizer.model
    agent = {"backend": "command", "command": [sys.executable, "-c", QUOTA_AGENT, model], "unsafe_host": True}
    ws = make_ws(tmp_path, optimizer=agent)
    r = cli("run", ws, "--rounds", "1", "--max-calls", "8")
    assert r.returncode == 3, r.stdout + r.stderr
    reason = ledger.find(Workspace.open(ws).repo, 1).manifest.reason
    assert reason.startswith("optimizer stopped: harnessopt budget spent: 8 of 8 model calls"), reason
    assert "(it said: agent exited with code 1: Quota exceeded" in reason


def test_a_model_endpoint_that_stops_answering_mid_round_fails_the_round(tmp_path: Path) -> None:
    """The target's server died after the train rollout: every later run scored 0 on an API error,
    and the round printed a gate verdict ("rejected: +0.000 inside dead zone") and exited 0 (QA,
    a llama.cpp server killed mid-round). The round fails, saying the endpoint stopped answering,
    main stays, and the run stops with a failure's exit code."""
    from harnessopt.commands.demo import DEMO_DATA
    from harnessopt.gateway.models import ScriptedModel
    from harnessopt.protocols import ModelError
    from tests.support.fake_anthropic import FakeAnthropicServer

    script = ScriptedModel.from_yaml(DEMO_DATA / "model.yaml")
    served = []

    def upstream(request: dict[str, Any]) -> dict[str, Any]:
        served.append(1)
        if len(served) > 8:  # the round's train rollout answered; then the server is gone
            raise ModelError(503, "api_error", "upstream connect error")
        return script.create(request["body"], "target")

    with FakeAnthropicServer(upstream) as fake:
        ws = make_ws(tmp_path)
        cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
        cfg["optimizer"]["provider"] = "scripted"  # its script is the target's: model.script
        cfg["model"] |= {"provider": "anthropic", "base_url": fake.base_url}
        (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
        git(ws, "commit", "-qam", "the target behind a real endpoint")
        main = git(ws, "rev-parse", "main")
        r = cli("run", ws, "--rounds", "2", env={"ANTHROPIC_API_KEY": "x"}, timeout=600)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "the target model's endpoint stopped answering" in r.stderr
    m = ledger.find(Workspace.open(ws).repo, 1).manifest
    assert m.status == "failed" and "stopped answering" in m.reason and m.delta is None
    assert git(ws, "rev-parse", "main") == main
    assert [r.round for r in ledger.past_rounds(Workspace.open(ws).repo)] == [1]  # the run stopped


def test_log_says_an_accepted_round_main_does_not_hold_yet(tmp_path: Path) -> None:
    """SIGKILL between the round's tag and main's move: log's row read accepted with no hint that
    main does not hold it (status said the next run finishes it; QA). Log says so under its table."""
    ws_path, ws, parent, sha = _round_one_commit(tmp_path, recorded=True)
    ws.journal.write(1, "applying", commit=sha, parent=parent, new_best=True)
    vcs.tag(ws.repo, "ho/round-1", sha)  # record_accepted tags first; the kill came before main moved
    out = cli("log", ws_path)
    assert out.returncode == 0, out.stderr
    said = " ".join(out.stdout.split())
    assert (
        "round 1 was accepted, but the run stopped before main moved to it: the next run applies it" in said
    )
    ledger.recover(ws.repo, ws.journal, lambda _m: None)
    assert "stopped before main moved" not in cli("log", ws_path).stdout
