"""`harnessopt status` and `log` (harnessopt.reporting.log) as a workspace's git state changes."""

from __future__ import annotations

from pathlib import Path

from harnessopt.reporting.log import status_lines
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git
from tests.support.workspace import make_ws


def test_status_names_mains_commit_as_the_incumbent_wherever_head_is(tmp_path: Path) -> None:
    """With another commit checked out, status called HEAD the incumbent, while a run starts from
    main (and refuses to start off it)."""
    ws = make_ws(tmp_path)
    main = git(ws, "rev-parse", "main")
    git(ws, "checkout", "-q", "--detach")
    (ws / "NOTES.md").write_text("trying something\n")
    git(ws, "add", "NOTES.md")
    git(ws, "commit", "-qm", "an experiment off main")
    head = git(ws, "rev-parse", "HEAD")
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("incumbent:")]
    assert line.startswith(f"incumbent: {main[:10]} = round 0 (main; HEAD is at {head[:10]}")
    git(ws, "checkout", "-q", "main")
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("incumbent:")]
    assert line == f"incumbent: {main[:10]} = round 0"


def test_status_names_the_run_command_that_starts_on_a_local_sandbox(tmp_path: Path) -> None:
    """``rollout.sandbox: local`` runs the optimizer's tools on this host, which the run refuses
    without ``--unsafe-host-optimizer``: status said "next: harnessopt run WS", a command that
    refused. The command it names now starts, and one is not added where the config accepts it."""
    ws = make_ws(tmp_path, optimizer={"unsafe_host": False})
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("next: ")]
    command = line.removeprefix("next: ").split("   |")[0]
    assert command == f"harnessopt run {ws} --unsafe-host-optimizer"
    r = cli(*command.split()[1:], "--rounds", "1", "--dry-run")
    assert r.returncode == 0 and "start it with" in r.stdout, (r.stdout, r.stderr)
    refused = cli("run", ws, "--rounds", "1", "--dry-run")
    assert refused.returncode == 2 and "--unsafe-host-optimizer" in refused.stderr
    accepted = make_ws(tmp_path / "accepted")  # optimizer.unsafe_host: true
    (line,) = [x for x in status_lines(Workspace.open(accepted)) if x.startswith("next: ")]
    assert line.startswith(f"next: harnessopt run {accepted}   |")


def test_status_next_is_a_command_that_starts_as_printed(tmp_path: Path) -> None:
    """status said "next: harnessopt run WS" where that run refuses: uncommitted changes, HEAD off
    main, a round-0 diagnosis of a -c mode=joint run stopped before its proposal (the plain command
    starts a skill round instead); and a path with a space broke it in two (QA)."""
    ws = make_ws(tmp_path / "my ws")
    q = f"'{ws}'"

    def next_line() -> str:
        (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("next: ")]
        return line.removeprefix("next: ").split("   |")[0]

    assert next_line() == f"harnessopt run {q}"
    (ws / "skill" / "SKILL.md").write_text((ws / "skill" / "SKILL.md").read_text() + "\nmore\n")
    assert next_line() == f"commit or stash the changes, then harnessopt run {q}"
    git(ws, "checkout", "-q", "--", "skill")
    git(ws, "checkout", "-q", "--detach")
    assert next_line() == f"git -C {q} checkout main (HEAD is detached), then harnessopt run {q}"
    git(ws, "checkout", "-q", "main")
    journal = Workspace.open(ws).journal
    journal.write(0, "run_start", rounds=1, settings={"mode": "joint"})
    journal.write(0, "round0_rollout", parent="x", tasks=8)
    assert next_line() == f"harnessopt run {q} -c mode=joint"


def test_status_off_main_names_the_run_mains_config_asks_for(tmp_path: Path) -> None:
    """HEAD detached at round 0, whose harnessopt.yaml accepted the optimizer on this host while
    main's no longer does: the run after the checkout reads main's, which needs
    --unsafe-host-optimizer; status built the command from the checked-out one (QA)."""
    import yaml

    ws = make_ws(tmp_path)  # local sandbox, optimizer.unsafe_host: true
    raw = yaml.safe_load((ws / "harnessopt.yaml").read_text())
    raw["optimizer"]["unsafe_host"] = False
    (ws / "harnessopt.yaml").write_text(yaml.safe_dump(raw))
    git(ws, "commit", "-qam", "no longer on this host")
    git(ws, "checkout", "-q", "ho/round-0")
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("next: ")]
    assert line.startswith(
        f"next: git -C {ws} checkout main (HEAD is detached), then harnessopt run {ws} --unsafe-host-optimizer"
    )


def test_a_deleted_best_tag_is_the_ledgers_best_and_status_says_how_to_restore_it(tmp_path: Path) -> None:
    """`git tag -d ho/best`: status and audit were a traceback (BadName), and every accepted round
    after it failed, its is_new_best asking for the tag (QA). The ledger's best stands in for it,
    status prints the command that restores it, and the next accepted round tags it again."""
    from harnessopt.ledger import store as ledger
    from harnessopt.round import driver

    ws = make_ws(tmp_path)
    [first] = driver.run(Workspace.open(ws), 1, lambda _m: None)
    assert first.status == "accepted"
    git(ws, "tag", "-d", "ho/best")
    assert ledger.best(Workspace.open(ws).repo).round == 1
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("best: ")]
    assert (
        line.startswith("best: round 1 (")
        and f"git -C {ws} tag ho/best {first.commit[:10]} restores it" in line
    )
    [second] = driver.run(Workspace.open(ws), 1, lambda _m: None)
    assert second.status != "failed", second.reason


def test_log_prints_its_start_command_as_written_brackets_and_all(tmp_path: Path) -> None:
    """log printed its "start with" line through rich markup: a path with ``[old]`` in it lost it
    (a command for a folder that does not exist), and an interrupted run's ``-c`` holding ``[/]``
    was a traceback (QA)."""
    ws = make_ws(tmp_path / "exp[old]")
    out = cli("log", ws)
    assert out.returncode == 0 and f"start with: harnessopt run '{ws}'" in out.stdout, out
    journal = Workspace.open(ws).journal
    journal.write(1, "run_start", rounds=1, settings={}, overrides=["model.target=demo[/]x"])
    journal.write(1, "rollout", parent="x", tasks=8)  # stopped mid-round: the resume repeats its -c
    out = cli("log", ws)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert f"start with: harnessopt run '{ws}' -c 'model.target=demo[/]x'" in out.stdout, out.stdout


def test_status_after_a_kill_before_main_moved_says_the_next_run_finishes_the_round(tmp_path: Path) -> None:
    """A run SIGKILLed in its apply before main moved: status said "its journal's last step
    'applying' (nothing applied)", though the next run applies the accepted round (QA): it compared
    the round's commit, not HEAD, with the parent."""
    ws = make_ws(tmp_path)
    head = git(ws, "rev-parse", "HEAD")
    commit = git(ws, "commit-tree", "HEAD^{tree}", "-p", head, "-m", "harnessopt round 1: accepted: x")
    Workspace.open(ws).journal.write(1, "applying", commit=commit, parent=head, new_best=True)
    lines = status_lines(Workspace.open(ws))
    said = "\n".join(lines)
    assert "last run stopped applying round 1, accepted, before main moved: the next run finishes it" in said
    assert "uncommitted" not in said and "stash" not in said
    # an edit made since is the user's, not an unfinished checkout's: status said "do not commit or
    # stash what git status shows", while the run refused until it was stashed (QA)
    (ws / "skill" / "SKILL.md").write_text((ws / "skill" / "SKILL.md").read_text() + "\nmine\n")
    said = "\n".join(status_lines(Workspace.open(ws)))
    assert "git stash the edits made since first, and git stash pop them after" in said, said
    assert "uncommitted changes: 1 path(s) (yours: stash them before 'run', pop them after)" in said
    assert "next: git stash, then harnessopt run" in said and "do not commit or stash" not in said
    refused = cli("run", ws, "--sandbox", "local")
    assert refused.returncode == 2 and "git stash them, run again to finish the round" in refused.stderr


def test_status_gives_round_0s_val_score_as_a_later_round_measured_it(tmp_path: Path) -> None:
    """ho/best is round 0, which has no val score of its own; a config commit after init made the
    next round's parent another commit with the same skill and harness. status said "val score not
    measured yet" while log and the report showed the incumbent's measured score (QA)."""
    from harnessopt.ledger import store as ledger

    ws = make_ws(tmp_path)
    assert "val score not measured yet" in "\n".join(status_lines(Workspace.open(ws)))
    cfg = ws / "harnessopt.yaml"
    cfg.write_text(cfg.read_text() + "\n# my edit after init\n")
    git(ws, "commit", "-qam", "my config")
    w = Workspace.open(ws)
    parent = git(ws, "rev-parse", "HEAD")
    m = ledger.RoundManifest(round=1, status="rejected", parent=parent, incumbent_score=0.6)
    ledger.record_other(w.repo, parent, w.root, ["skill"], m)
    said = "\n".join(status_lines(Workspace.open(ws)))
    assert "val score 0.600 (measured as round 1's incumbent)" in said, said
    # a round whose incumbent had another skill is not round 0's score
    skill = ws / "skill" / "SKILL.md"
    skill.write_text(skill.read_text() + "\nmine\n")
    git(ws, "commit", "-qam", "my skill edit")
    other = git(ws, "rev-parse", "HEAD")
    m = ledger.RoundManifest(round=2, status="rejected", parent=other, incumbent_score=0.9)
    ledger.record_other(w.repo, other, w.root, ["skill"], m)
    said = "\n".join(status_lines(Workspace.open(ws)))
    assert "val score 0.600 (measured as round 1's incumbent)" in said, said


def test_the_command_that_resumes_a_stopped_run_asks_for_the_rounds_it_had_left(tmp_path: Path) -> None:
    """A run of 3 rounds stopped in its second: the command status and log print ran one (QA)."""
    from harnessopt.ledger import round0 as proposals

    ws = make_ws(tmp_path)
    w = Workspace.open(ws)
    w.journal.write(1, "run_start", rounds=3, settings={}, overrides=[])
    w.journal.write(2, "rollout", parent="x", tasks=8)  # stopped in round 2: it and round 3 are left
    assert proposals.run_command(w.repo, w.root, w.cfg).startswith(f"harnessopt run {ws} --rounds 2")
    w.journal.write(3, "rollout", parent="x", tasks=8)  # in its last round: the plain command
    assert " --rounds" not in proposals.run_command(w.repo, w.root, w.cfg)
    # a harness-mode run of 3 stopped in its round-0 diagnosis: all 3 are left, not 4 (QA)
    w.journal.write(1, "run_start", rounds=3, settings={}, overrides=[])
    w.journal.write(0, "round0_rollout", parent="x", tasks=8)
    assert proposals.run_command(w.repo, w.root, w.cfg).startswith(f"harnessopt run {ws} --rounds 3")


def test_a_run_that_recorded_fewer_rounds_than_projected_says_so_beside_its_shares(tmp_path: Path) -> None:
    """A budget stopped the run after 1 of 3 rounds: "(-87% calls)" read as a projection miss."""
    from harnessopt.ledger import store as ledger
    from harnessopt.ledger.store import RoleUsage
    from harnessopt.reporting.log import projected_vs_spent

    ws = make_ws(tmp_path)
    w = Workspace.open(ws)
    projected = {"rounds": 3, "calls": 300, "tokens": 30000, "cost_usd": 0.0, "wall_s": 600, "basis": "x"}
    w.journal.write(1, "run_start", rounds=3, projected=projected, settings={}, overrides=[])
    head = git(ws, "rev-parse", "HEAD")
    usage = RoleUsage(calls=100, input=9000, output=1000)
    m = ledger.RoundManifest(round=1, status="rejected", parent=head, tokens={"target": usage}, wall_s=200.0)
    ledger.record_other(w.repo, head, w.root, ["skill"], m)
    w.journal.write(1, "recorded", status="rejected")
    proj, spent = projected_vs_spent(Workspace.open(ws))
    assert proj.startswith("last run projected: 300 calls, 30000 tokens, $0.0000, ~10min for 3 round(s)")
    assert spent.endswith(
        "$0.0000, 3min in 1 round(s) (-67% calls, -67% tokens, -67% time, 1 of the 3 projected round(s) recorded)"
    ), spent
