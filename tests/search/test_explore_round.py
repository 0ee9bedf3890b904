"""Explore (``search.explore``), end to end on the demo workspace with the scripted model: three
chained steps; s1 fixes the answers' form, s2 (on s1's files) fixes the capitals, s3 (on s2's)
changes nothing the scorer sees. The chain s1 -> s2 is validated once, as one commit."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import Config
from harnessopt.ledger import store as ledger
from harnessopt.reporting import projection
from harnessopt.reporting.projection import project
from harnessopt.round import driver
from harnessopt.search.budget import one_look_bank, validation_runs
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git, start_cli, wait_for_phase
from tests.support.workspace import DEMO_LINE, FORM, SEAT, make_ws, scripted_edits, with_more_train

OLD = DEMO_LINE
TAIL = "Keep it short."
STEPS = {  # step -> (old, new): each applies only to the files of the chain before it
    "s1": (OLD, FORM),
    "s2": (FORM, f"{FORM}\n\n{SEAT}"),
    "s3": (SEAT, f"{SEAT} {TAIL}"),
}


def _script(tmp_path: Path) -> Path:
    """The demo's script with round 1's optimizer rules replaced by one edit per step."""
    return scripted_edits(
        tmp_path,
        {name: (f"# Round 1:[\\s\\S]*Your step: {name},", old, new) for name, (old, new) in STEPS.items()},
    )


@pytest.fixture(scope="module")
def explored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, float]:
    tmp = tmp_path_factory.mktemp("explore")
    ws = Workspace.open(make_ws(tmp, model=_script(tmp), search={"explore": 3}))
    plain = ws.cfg.model_copy(update={"search": ws.cfg.search.model_copy(update={"explore": 0})})
    added = project(ws, 1).rounds[0].target_runs - project(ws, 1, plain).rounds[0].target_runs
    assert "; each round chains 3 proposals, an optimizer conversation each" in project(ws, 1).line()
    assert "chains" not in project(ws, 1, plain).line()
    [result] = driver.run(ws, 1, lambda _m: None)
    return ws.root, result, added


def test_the_chain_of_steps_that_beat_their_base_is_validated_once(explored: tuple[Path, Any, float]) -> None:
    root, result, _ = explored
    m = result.manifest
    assert result.status == "accepted" and m.search is not None, m.reason
    by_name = {c.name: c for c in m.search.candidates}
    assert sorted(by_name) == ["s1", "s2", "s3"]
    assert m.search.winners == ["s2"] and m.search.validated == ["s2"] and m.search.alpha_split == 1
    assert by_name["s1"].mean_delta > 0 and not by_name["s1"].chosen
    assert (
        "beat the incumbent on train" in by_name["s1"].reason
        and "a later step built on it" in by_name["s1"].reason
    )
    assert by_name["s2"].chosen and by_name["s2"].mean_delta > 0
    assert by_name["s2"].reason.startswith("validated: the chain's end (s1 -> s2); beat s1 on train")
    # s3 was built on s2's files (its edit finds SEAT), changed nothing the scorer sees, and was dropped
    assert (
        by_name["s3"].outcome == "screened" and by_name["s3"].mean_delta == 0.0 and not by_name["s3"].chosen
    )
    assert "did not beat s2 on train" in by_name["s3"].reason
    # one commit with the whole chain: both steps' lines, the first line names the chain
    skill = (root / "skill" / "SKILL.md").read_text()
    assert FORM in skill and SEAT in skill and TAIL not in skill and OLD not in skill
    assert m.summary.startswith("s1 -> s2: Edit of s1; Edit of s2") and m.changed == ["skill/SKILL.md"]
    # each step ran its batch; s2 and s3 each read their base's runs on a fresh batch
    assert m.phases["screening"].runs == 3 * 8 and m.phases["rollout"].runs == 3 * 8
    assert m.phases["smoke"].runs == 5  # the chain's end alone went on to smoke and validation


def test_each_step_is_a_diff_against_main_on_its_own_ref(explored: tuple[Path, Any, float]) -> None:
    root, _, _ = explored
    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/harnessopt/candidates/").split()
    assert refs == [f"refs/harnessopt/candidates/round-1/s{i}" for i in (1, 2, 3)]
    out = subprocess.run(
        [sys.executable, "-m", "harnessopt", "diff", str(root), "1", "--candidate", "3"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "# round 1 candidate s3: not validated" in out
    assert f"-{OLD}" in out and f"+{FORM}" in out and f"+{SEAT} {TAIL}" in out  # cumulative from main


def test_the_projection_counts_the_steps_runs(explored: tuple[Path, Any, float]) -> None:
    """What explore adds to a round's projection is what it ran on train beyond the round's batch."""
    _, result, added = explored
    phases = result.manifest.phases
    assert added == phases["screening"].runs + phases["rollout"].runs - 8 == 3 * 8 + 2 * 8


def test_checkpoints_score_the_chain_on_fixed_train_tasks_and_validate_its_pick(tmp_path: Path) -> None:
    """``search.checkpoints: 2``: after s2 the head (s2) runs once on the fixed train tasks (the
    demo's 8), and so does the end (s3 was dropped: s2 again, which the run cache has); no earlier
    state scored above the end, so the end is validated. The projection counts a checkpoint's runs
    at most (every checkpoint a new state), the manifest and journal carry the scores."""
    ws = Workspace.open(make_ws(tmp_path, model=_script(tmp_path), search={"explore": 3, "checkpoints": 2}))
    plain = ws.cfg.model_copy(
        update={"search": ws.cfg.search.model_copy(update={"explore": 0, "checkpoints": 0})}
    )
    added = project(ws, 1).rounds[0].target_runs - project(ws, 1, plain).rounds[0].target_runs
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    m = result.manifest
    assert result.status == "accepted" and m.search is not None and m.search.winners == ["s2"], m.reason
    by_name = {c.name: c for c in m.search.candidates}
    assert by_name["s2"].checkpoint == 1.0 and by_name["s1"].checkpoint is None
    assert by_name["s2"].reason.startswith(
        "validated: the chain's end (s1 -> s2), scored 1.000 on the fixed train tasks; beat s1 on train"
    )
    assert m.phases["screening"].runs == 3 * 8 + 8  # the steps' screens, one checkpoint of s2
    assert added == pytest.approx(
        3 * 8 + 2 * 8 + 2 * 8
    )  # and at most two checkpoints' runs: after s2, the end
    assert "round 1: checkpoint after s2: s2 scored 1.000 on 8 fixed train tasks" in said
    assert "round 1: checkpoint after the end: s2 scored 1.000 on 8 fixed train tasks" in said
    [chain] = [e for e in ws.journal.read()[0] if e.get("phase") == "explore"]
    assert chain["checkpoints"] == [["s2", 1.0], ["s2", 1.0]] and chain["pick"] == "s2"
    shown = cli("log", ws.root)
    assert shown.returncode == 0, shown.stderr
    assert "checkpoint 1.000: validated: the chain's end" in " ".join(shown.stdout.split())


def test_checkpoint_tasks_set_how_many_fixed_train_tasks_each_checkpoint_runs(tmp_path: Path) -> None:
    """``search.checkpoint_tasks: 12`` of 16 train tasks: each checkpoint that runs scores its state
    on 12 of them (the run says so), the manifest's screening runs count 12 a checkpoint run, and
    the projection reserves 12 a checkpoint. ``search.checkpoint_margin: 1`` keeps the end, whatever
    scored above it."""
    ws = Workspace.open(
        make_ws(
            tmp_path,
            tasks=with_more_train(tmp_path, 8),
            model=_script(tmp_path),
            search={"explore": 3, "checkpoints": 2, "checkpoint_tasks": 12, "checkpoint_margin": 1.0},
        )
    )
    plain = ws.cfg.model_copy(
        update={
            "search": ws.cfg.search.model_copy(
                update={"explore": 0, "checkpoints": 0, "checkpoint_tasks": None, "checkpoint_margin": None}
            )
        }
    )
    added = project(ws, 1).rounds[0].target_runs - project(ws, 1, plain).rounds[0].target_runs
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    m = result.manifest
    assert m.search is not None and m.search.checkpoints == 2, m.reason
    scored = [line for line in said if ": checkpoint after " in line]
    assert len(scored) == 2 and all(line.endswith(" on 12 fixed train tasks") for line in scored), scored
    assert m.phases["screening"].runs == 3 * 8 + 12 * m.search.checkpoints_run
    assert added == pytest.approx(3 * 8 + 2 * 8 + 2 * 12)
    assert not any("the chain's pick is" in line for line in said)  # a margin of 1: the end, always


def test_screening_only_tasks_widen_each_steps_screen_but_not_what_the_optimizer_reads(
    tmp_path: Path,
) -> None:
    """``search.screen_tasks: 4`` with a chain: each step screens on its batch of 8 and 4 more train
    tasks its base runs too; the optimizer reads the 8 (the brief's trajectories), and the
    projection counts every one of those runs."""
    ws = Workspace.open(
        make_ws(
            tmp_path,
            tasks=with_more_train(tmp_path, 8),
            model=_script(tmp_path),
            search={"explore": 3, "screen_tasks": 4},
        )
    )
    assert len(ws.tasks("train")) == 16
    plain = ws.cfg.model_copy(update={"search": ws.cfg.search.model_copy(update={"explore": 0})})
    added = project(ws, 1).rounds[0].target_runs - project(ws, 1, plain).rounds[0].target_runs
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    m = result.manifest
    assert result.status == "accepted" and m.search is not None, m.reason
    assert [c.name for c in m.search.candidates if c.chosen] == ["s2"]
    # three steps, each on 8 + 4 tasks; the bases: step 1's 4 extra, then a fresh 8 + 4 for s2 and s3
    assert m.phases["screening"].runs == 3 * 12
    assert m.phases["rollout"].runs == 8 + 4 + 2 * 12
    assert added == pytest.approx(m.phases["screening"].runs + m.phases["rollout"].runs - 8)
    assert sum("beat the incumbent on 12 train tasks" in line for line in said) == 1
    reading = [line for line in said if "is reading" in line and "trajectories" in line]
    assert len(reading) == 3 and all("is reading 8 trajectories" in line for line in reading), reading
    # steps 2 and 3 draw their batches from 16 train tasks, so their bases meet tasks the round ran
    # already (a kept step's base, s2's, has s1's content): each of those is a fresh run, never the
    # earlier run of that content on that task (the one s1 was kept on), and none is "resumed"
    assert m.tokens["target"].calls == sum(p.runs for p in m.phases.values())
    assert not any("interrupted run" in line for line in said), said


@pytest.mark.parametrize(
    ("search", "objective", "words"),
    [
        ({"explore": 1}, "task", "search.explore: 1 chains nothing"),
        ({"explore": 3, "candidates": 2}, "task", "use one of them"),
        ({"explore": 3}, "trigger", "objective trigger is not supported"),
    ],
)
def test_a_config_explore_cannot_run_says_why(search: dict[str, int], objective: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Config.model_validate({"search": search, "objective": objective})


@pytest.mark.parametrize("checkpoints", [0, 2])
def test_a_rerun_after_ctrl_c_pays_for_no_step_again(tmp_path: Path, checkpoints: int) -> None:
    """With ``search.checkpoints`` too: a checkpoint's runs are the run cache's like a step's."""
    ws = make_ws(tmp_path, model=_script(tmp_path), search={"explore": 3, "checkpoints": checkpoints})
    proc = start_cli("run", ws, "--rounds", "1")
    try:
        wait_for_phase(ws, proc, "explore")  # every step proposed, checked and screened
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err
    assert git(ws, "rev-list", "--count", "main") == "1"  # main did not move
    again = cli("run", ws, "--rounds", "1", timeout=600)
    assert again.returncode == 0, again.stderr
    out = again.stdout + again.stderr
    for name in STEPS:
        assert f"round 1 candidate {name}: reusing the optimizer's proposal" in out
    reused = int(out.split("round 1: reused ")[1].split()[0])
    # the round's batch, each later base's batch, every step's runs, and s2's checkpoint on 8 tasks
    assert reused >= 8 + 2 * 8 + 3 * 8 + (8 if checkpoints else 0)
    m = ledger.find(Workspace.open(ws).repo, 1).manifest
    assert m.status == "accepted" and m.search is not None and m.search.winners == ["s2"]


BANKED = {"policy": "banked", "incumbent_epochs": None, "second_look": 10, "first_look_share": 0.05}


def test_a_budgets_last_chain_ends_where_its_validation_fits_and_is_judged_on_one_look(
    tmp_path: Path,
) -> None:
    """``budget.max_calls: 185`` with the default gate on the demo's 14 val tasks: after s2 is kept
    (37 calls in), one more step (16 runs and a turn) and then the one-look validation (a bank of
    3 runs a task, 42 runs, and 14 x (1 + 3 confirmation + 2 memorised check), 10% over: 139)
    would not fit, so the chain ends at s2 and s3 is never asked for; the two-look validation (the
    whole bank, 154 runs, and 14 x 10 more) would not fit either, so the gate judges its first look
    at the whole alpha, against the bank of 3. (With the whole bank's reserve of 262, the code
    of before ended the chain at s1 and then ran out of budget topping the bank up to 11: the
    round failed.) Unbudgeted, the same round asks for s3 (``explored``) and plans two
    looks. Round 2 is not started: what is left does not pay for its batch, a turn and a first
    look, so the run ends without a failed round."""
    ws = Workspace.open(
        make_ws(
            tmp_path, model=_script(tmp_path), search={"explore": 3}, gate=BANKED, budget={"max_calls": 185}
        )
    )
    said: list[str] = []
    [result] = driver.run(ws, 2, said.append)
    assert any(line.startswith("not starting round 2: the budget left (about ") for line in said), said
    m = result.manifest
    assert result.status == "accepted" and m.search is not None, m.reason
    assert sorted(c.name for c in m.search.candidates) == ["s1", "s2"] and m.search.winners == ["s2"]
    assert any("and not for step s3 too: the chain ends at s2" in line for line in said), said
    assert any(
        "judged on one look at the whole alpha, against the incumbent's bank topped up to 3 runs a val "
        "task, not 11" in line
        for line in said
    ), said
    assert m.gate.model_extra is not None and m.gate.model_extra["looks_planned"] == 1
    assert m.gate.model_extra["incumbent_runs"] == 3  # the bank the one look was judged against
    assert m.reason.endswith("(n=14); one look at the whole alpha: the budget left paid for no second"), (
        m.reason
    )
    assert m.gate.model_extra["look_levels"] == [pytest.approx(0.95)]  # one look at all of alpha (confidence)
    assert sum(u.calls for u in m.tokens.values()) <= 185  # validated, confirmed, inside the budget
    events = [e for e in ws.journal.read()[0] if e.get("phase") == "explore_budget_end"]
    assert [e["before"] for e in events] == ["s3"]


def test_a_chain_that_has_not_moved_takes_no_step_it_could_not_validate_and_the_run_ends_clean(
    tmp_path: Path,
) -> None:
    """``budget.max_calls: 190``: s1 and s2 change nothing the scorer sees and are dropped; s3
    (the answers' form) would beat the incumbent, but after it the one-look validation would no
    longer fit. The chain has not moved, and yet no step it could not validate is asked for: it
    ends before s3, the round is rejected (screened out), and round 2 is not started, since what is
    left pays for no batch, step and validation. (The code of before held only a chain that had
    moved to the budget: it asked for s3, kept it, and the gateway stopped its validation at 190
    calls: round 1 failed, and the run with it.)"""
    edits = {"s1": (OLD, f"{OLD} {TAIL}"), "s2": (OLD, f"{OLD} Be brief."), "s3": (OLD, FORM)}
    script = scripted_edits(
        tmp_path,
        {name: (f"# Round 1:[\\s\\S]*Your step: {name},", old, new) for name, (old, new) in edits.items()},
    )
    ws = Workspace.open(
        make_ws(tmp_path, model=script, search={"explore": 3}, gate=BANKED, budget={"max_calls": 190})
    )
    said: list[str] = []
    [result] = driver.run(ws, 2, said.append)
    assert result.status == "rejected" and result.reason.startswith("screened out on train"), result.reason
    assert any(
        "pays for no step s3 that could still be validated: the chain ends with no step kept" in line
        for line in said
    ), said
    assert not any("step s3" in line and "kept" in line and "no step kept" not in line for line in said)
    assert any(
        line.startswith("not starting round 2: the budget left (about ")
        and line.endswith("(its batch, a step and the chain's validation with one look)")
        for line in said
    ), said
    m = result.manifest
    assert m.search is not None and sorted(c.name for c in m.search.candidates) == ["s1", "s2"]
    assert sum(u.calls for u in m.tokens.values()) < 190  # what a step it could not validate would spend
    events = [e for e in ws.journal.read()[0] if e.get("phase") == "explore_budget_end"]
    assert [e["before"] for e in events] == ["s3"]


def test_the_hours_left_end_a_chain_where_its_validation_fits_as_a_budget_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``budget.max_hours`` is planned as a limit in seconds, at the projection's times (a run,
    concurrency runs at a time; an optimizer turn): set between the one-look validation and it plus
    one more step, the chain ends at s1 (s2 is never asked for) and the gate judges one look. The
    scripted model is planned at a hosted model's 15 s a run and a call, so that the plan, not the
    clock, ends the chain (a scripted model's own prior is half a second)."""
    monkeypatch.setattr(projection, "SCRIPTED_SECONDS", projection.PRIORS["seconds_per_run"])
    probe = Workspace.open(
        make_ws(tmp_path / "probe", model=_script(tmp_path), search={"explore": 3}, gate=BANKED)
    )
    rates, cfg, n_val = project(probe, 1).rates, probe.cfg, len(probe.tasks("val"))
    run_s = rates["seconds_per_run"] / cfg.rollout.concurrency
    step_s = (
        2 * cfg.rollout.batch_size * run_s + rates["optimizer_calls"] * rates["seconds_per_optimizer_call"]
    )
    one_s, two_s = (
        validation_runs(cfg, n_val, n_val * bank, n) * run_s
        for n, bank in ((1, one_look_bank(cfg.gate)), (2, cfg.gate.banked_epochs))
    )
    seconds = one_s + step_s / 2  # real time the round takes (seconds) leaves it inside both bounds
    assert step_s / 2 > 60 and seconds < two_s, (one_s, two_s, step_s)  # a margin for slow machines
    ws = Workspace.open(
        make_ws(
            tmp_path,
            model=_script(tmp_path),
            search={"explore": 3},
            gate=BANKED,
            budget={"max_hours": seconds / 3600},
        )
    )
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    m = result.manifest
    assert result.status == "accepted" and m.search is not None, m.reason  # a chain of one step too
    assert [c.name for c in m.search.candidates] == ["s1"] and m.search.winners == ["s1"]
    assert m.search.candidates[0].ref == "refs/harnessopt/candidates/round-1/s1"
    [chain] = [e for e in ws.journal.read()[0] if e.get("phase") == "explore"]
    assert chain["chain"] == ["s1"] and list(chain["steps"]) == ["s1"]
    assert any("and not for step s2 too: the chain ends at s1" in line for line in said), said
    assert m.gate.model_extra is not None and m.gate.model_extra["looks_planned"] == 1
    assert m.gate.model_extra["look_levels"] == [pytest.approx(0.95)]
    events = [e for e in ws.journal.read()[0] if e.get("phase") == "explore_budget_end"]
    assert [e["before"] for e in events] == ["s2"]


def test_with_ties_move_a_step_level_with_its_base_moves_the_chain(tmp_path: Path) -> None:
    """search.ties_move: s3, level with s2 on its batch (it changes nothing the scorer sees), is kept,
    and the chain's end validated is s3: one commit with all three steps."""
    ws = Workspace.open(make_ws(tmp_path, model=_script(tmp_path), search={"explore": 3, "ties_move": True}))
    [result] = driver.run(ws, 1, lambda _m: None)
    m = result.manifest
    assert result.status == "accepted" and m.search is not None, m.reason
    by_name = {c.name: c for c in m.search.candidates}
    assert m.search.winners == ["s3"] and by_name["s3"].mean_delta == 0.0
    assert by_name["s3"].reason.startswith(
        "validated: the chain's end (s1 -> s2 -> s3); matched (search.ties_move) s2 on train (+0.000 on 8"
    )
    assert "beat s1 on train" in by_name["s2"].reason and "a later step built on it" in by_name["s2"].reason
    skill = (ws.root / "skill" / "SKILL.md").read_text()
    assert FORM in skill and SEAT in skill and TAIL in skill


def test_a_step_that_changes_nothing_or_fails_the_checks_is_said(tmp_path: Path) -> None:
    """A step the chain drops before any run (no edit, a broken skill) is said as it happens, as a
    screened step is; a person at --optimizer manual otherwise saw the run move on in silence."""
    broken = "---\nname: world-capitals\n---\n"  # the front matter without its description
    script = scripted_edits(
        tmp_path,
        {
            "s1": ("# Round 1:[\\s\\S]*Your step: s1,", "no such line", "anything"),
            "s2": ("# Round 1:[\\s\\S]*Your step: s2,", "---\nname: world-capitals\n", broken),
        },
    )
    ws = Workspace.open(make_ws(tmp_path, model=script, search={"explore": 2}))
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    assert "round 1: step s1 made no change (no whitelisted edit): dropped" in said
    [s2] = [line for line in said if line.startswith("round 1: step s2 ")]
    assert s2.startswith("round 1: step s2 was rejected at the checks (") and s2.endswith("): dropped")
    assert "description" in s2 and result.status != "accepted"
