"""End to end through the real CLI, the real anthropic SDK (harness and optimizer) against a local
fake Messages API upstream behind the real gateway, and real git."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.ledger import store as ledger
from harnessopt.reporting.data import report_data
from harnessopt.workspace.core import Workspace
from tests.support.cli import (
    REAL_KEY,
    ROUND1_EDIT,
    ROUND2_EDIT,
    SKILL_MD,
    cli,
    git,
    upstream_script,
    write_example,
)
from tests.support.fake_anthropic import FakeAnthropicServer


@pytest.fixture
def upstream():
    with FakeAnthropicServer(ScriptedModel.from_dict(upstream_script())) as fake:
        yield fake


def _run(ws: Path, env: dict[str, str], *, rounds: int, batch: int) -> subprocess.CompletedProcess[str]:
    """`harnessopt run` in the local sandbox (its optimizer's bash on this host)."""
    return cli(
        "run", ws, "--rounds", str(rounds), "--sandbox", "local", "--unsafe-host-optimizer",
        "--batch-size", str(batch), env=env,
    )  # fmt: skip


def _init(tmp_path: Path, env: dict[str, str]) -> Path:
    skill, tasks = write_example(tmp_path)
    ws = tmp_path / "ws"
    r = cli("init", ws, "--skill", skill, "--tasks", tasks, env=env)
    assert r.returncode == 0, r.stderr
    # The target streams its answers (SSE through the SDK and the gateway); committed like any user edit.
    cfg = yaml.safe_load((ws / "harnessopt.yaml").read_text())
    cfg["flags"] = {"stream": "1"}
    cfg["rollout"]["concurrency"] = 2
    cfg["search"]["explore"] = 0  # one proposal a round, as the upstream's script plays them
    (ws / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
    git(ws, "commit", "-qam", "stream the target")
    return ws


def test_two_rounds_accept_then_reject_then_log_diff_rollback(tmp_path: Path, upstream) -> None:
    env = {"ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
    ws = _init(tmp_path, env)
    assert git(ws, "rev-parse", "ho/round-0") == git(ws, "rev-parse", "ho/best")

    r = _run(ws, env, rounds=2, batch=4)
    assert r.returncode == 0, r.stdout + r.stderr

    # Round 1 accepted: a commit on main, tagged, best; round 2 rejected: on its ref, main reset.
    head = git(ws, "rev-parse", "HEAD")
    assert head == git(ws, "rev-parse", "ho/round-1") == git(ws, "rev-parse", "ho/best")
    rejected = git(ws, "rev-parse", "refs/harnessopt/rejected/round-2")
    assert git(ws, "status", "--porcelain") == ""
    skill_now = (ws / "skill" / "SKILL.md").read_text()
    assert ROUND1_EDIT in skill_now and ROUND2_EDIT not in skill_now
    assert (ws / "best_skill.md").read_text() == skill_now
    assert ROUND2_EDIT in git(ws, "show", f"{rejected}:skill/SKILL.md")
    # At rest, trajectories/ holds the rollouts that led to the incumbent (round 1's, of round 0's skill).
    traj = sorted((ws / "trajectories").glob("*.md"))
    assert len(traj) == 4
    text = traj[0].read_text()
    assert "round: 1" in text and "passed: false" in text and "streamed: true" in text
    assert "Sure! The word you asked for is" in text  # the transcript recorded by the gateway

    rows = json.loads(cli("log", ws, "--json", env=env).stdout)
    assert [(row["round"], row["status"]) for row in rows] == [(1, "accepted"), (2, "rejected")]
    for key in ("val_score", "incumbent_score", "delta", "dead_zone", "commit", "summary", "reason"):
        assert key in rows[0]
    assert rows[0]["val_score"] == 1.0 and rows[0]["incumbent_score"] == 0.0
    assert rows[1]["delta"] < 0 and rows[1]["commit"] == rejected
    assert len(rows[0]["fixed"]) == 8
    # Round 2 breaks every task it ran (validation may stop early for futility: n can be < 8).
    assert rows[1]["n"] >= 5 and len(rows[1]["broken"]) == rows[1]["n"]
    assert rows[0]["tokens"]["target"]["calls"] > 0 and rows[0]["tokens"]["optimizer"]["calls"] == 3

    d1 = cli("diff", ws, "1", env=env).stdout
    assert f"+{ROUND1_EDIT}" in d1 and "-Respond politely to the user." in d1
    d2 = cli("diff", ws, "2", env=env).stdout
    assert f"+{ROUND2_EDIT}" in d2 and "rejected" in d2

    rb = cli("rollback", ws, "0", env=env)
    assert rb.returncode == 0, rb.stderr
    assert (ws / "skill" / "SKILL.md").read_text() == SKILL_MD
    assert git(ws, "rev-parse", "HEAD~1") == head  # a new commit; history kept
    assert git(ws, "rev-parse", "ho/round-1") == head
    # The diff is a patch git applies: round 1's change applies again onto round 0's skill.
    (tmp_path / "round1.patch").write_text(d1)
    assert git(ws, "apply", "--check", str(tmp_path / "round1.patch")) == ""

    # The real key went upstream only; no harness or optimizer request carried it to the gateway.
    # (the anthropic SDK sends a key as x-api-key in older releases, as a bearer token in newer ones)
    sent = [
        req["headers"].get("x-api-key") or req["headers"].get("authorization", "")
        for req in upstream.requests
    ]
    assert sent and all(key in (REAL_KEY, f"Bearer {REAL_KEY}") for key in sent)
    assert REAL_KEY not in "".join(p.read_text() for p in traj)

    st = cli("status", ws, env=env)
    assert st.returncode == 0 and "rounds: 2 (1 accepted, 1 rejected)" in st.stdout
    # Each round's raw task outputs go when the next round starts: a long run holds one round's.
    scratch = ws / ".harnessopt" / "scratch"
    assert sorted(p.name for p in scratch.iterdir()) == ["round-2"]
    assert any((scratch / "round-2" / "task-out").iterdir())

    # A second run continues after the last completed round.
    r3 = _run(ws, env, rounds=1, batch=4)
    assert r3.returncode == 0, r3.stderr
    assert [row["round"] for row in json.loads(cli("log", ws, "--json", env=env).stdout)] == [1, 2, 3]
    assert sorted(p.name for p in scratch.iterdir()) == ["round-3"]


def test_audit_reports_held_out_gain_once(tmp_path: Path, upstream) -> None:
    env = {"ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
    ws = _init(tmp_path, env)
    assert cli("audit", ws, "--sandbox", "local", env=env).returncode == 2  # nothing accepted yet
    assert _run(ws, env, rounds=1, batch=2).returncode == 0
    r = cli("audit", ws, "--sandbox", "local", "--json", env=env)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["n"] == 4 and report["gain"] == 1.0 and report["claimed_val_gain"] == 1.0
    again = cli("audit", ws, "--sandbox", "local", env=env)
    assert again.returncode == 2 and "--force" in again.stderr
    status = cli("status", ws, env=env).stdout  # a finished audit is not a run that stopped
    assert "last run stopped" not in status and "next: harnessopt run" in status, status
    # where docs/workspace.md says an audit is kept; and where the versions from the layout change
    # until its fix kept it: a pair audited there is still refused and still reported
    ref = git(ws, "for-each-ref", "--format=%(refname)", "refs/harnessopt/audit/")
    assert ref.startswith("refs/harnessopt/audit/") and len(ref.splitlines()) == 1
    moved = ref.replace("refs/harnessopt/audit/", "refs/harnessopt/commands/audit/")
    git(ws, "update-ref", moved, ref)
    git(ws, "update-ref", "-d", ref)
    again = cli("audit", ws, "--sandbox", "local", env=env)
    assert again.returncode == 2 and f"see {moved})" in again.stderr
    (audit,) = report_data(Workspace.open(ws))["audits"]
    assert audit["gain"] == 1.0 and audit["ref"] == moved
    # the count runs to the total it was announced with: both sides', not round 0's and then more
    forced = cli("audit", ws, "--sandbox", "local", "--force", env=env).stdout
    counts = re.findall(r"^audit: (\d+)/(\d+) tasks", forced, re.M)
    assert counts and {total for _, total in counts} == {"8"} and counts[-1] == ("8", "8"), forced
    # a forced audit keeps the look before it (QA: it replaced it): a parent of its commit, and
    # its gain in the new record; a second forced audit keeps both before it
    first, second = git(ws, "rev-parse", moved), git(ws, "rev-parse", ref)
    assert f"this pair's earlier audit ({first[:10]}) gave +1.000; it is kept" in forced
    assert git(ws, "log", "-1", "--format=%P", second).split() == [git(ws, "rev-parse", "ho/best"), first]
    again = cli("audit", ws, "--sandbox", "local", "--force", env=env)
    assert again.returncode == 0, again.stderr
    assert git(ws, "log", "-1", "--format=%P", ref).split()[1:] == [second, first]
    (latest,) = [a for a in report_data(Workspace.open(ws))["audits"] if a["ref"] == ref]
    assert [e["commit"] for e in latest["earlier"]] == [first, second] and latest["forced"]  # oldest first
    # a fourth look finds all three before it, the ones its ref's record keeps as parents too (QA:
    # a third forced audit on one ref listed only the look before it)
    third = git(ws, "rev-parse", ref)
    assert cli("audit", ws, "--sandbox", "local", "--force", env=env).returncode == 0
    (latest,) = [a for a in report_data(Workspace.open(ws))["audits"] if a["ref"] == ref]
    assert [e["commit"] for e in latest["earlier"]] == [first, second, third]
    assert cli("report", ws, "--out", tmp_path / "rep").returncode == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    assert (
        "was forced: the test split was looked at 3 time(s) before, which gave +1.000, +1.000, +1.000" in page
    )
    # status counts what the audits spent beside the rounds' cost (QA: only their records held it),
    # each of the four looks once, the ones kept as parents too
    said = next(
        x for x in cli("status", ws, env=env).stdout.splitlines() if x.startswith("measuring commands")
    )
    assert said.startswith("measuring commands recorded (not in the cost above): audit x4 $"), said
    assert f"({4 * 8} calls," in said and said in page  # 2 sides x 4 test tasks a look


def test_a_refused_api_key_stops_the_run_at_once(tmp_path: Path) -> None:
    """A 401 from upstream (a revoked key): one line that says so, exit 3, no second round."""
    from tests.support.counting_upstream import CountingUpstream, api_error

    with CountingUpstream([api_error(401, "authentication_error", "invalid x-api-key")]) as up:
        env = {"ANTHROPIC_BASE_URL": up.base_url, "ANTHROPIC_API_KEY": REAL_KEY}
        ws = _init(tmp_path, env)
        r = cli("run", ws, "--rounds", "3", "--sandbox", "local", "--unsafe-host-optimizer", env=env)
        calls = len(up.attempts)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "the API key was refused" in r.stdout and "Traceback" not in r.stderr
    assert [x.round for x in ledger.past_rounds(Workspace.open(ws).repo)] == [1]
    assert calls <= 8  # the train batch's calls at most: no optimizer, no validation, no retries


def test_a_reader_that_goes_away_is_not_a_failure(tmp_path: Path) -> None:
    """``harnessopt init ... | head -1`` exited 1 with no word (rich's own broken-pipe exit) after
    the workspace was made; ``log | head`` likewise (QA). The command's work stands: exit 0."""
    import os
    import sys

    skill, tasks = write_example(tmp_path)
    for args in (("init", tmp_path / "ws", "--skill", skill, "--tasks", tasks), ("log", tmp_path / "ws")):
        read, write = os.pipe()
        os.close(read)  # the reader has gone before the first line
        try:
            r = subprocess.run(
                [sys.executable, "-m", "harnessopt", *map(str, args)],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
        finally:
            os.close(write)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args[0], r.returncode, r.stderr)
    assert git(tmp_path / "ws", "rev-parse", "ho/round-0")  # init's work stands
