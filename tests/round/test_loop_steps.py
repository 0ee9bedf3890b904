"""The loop's gate steps (smoke, incumbent_outcomes, ...) on a real workspace with a scripted runner.

The runner is the one part replaced: it returns scripted results (score, crash) per side, task and
attempt, so that flaky and reproducible crashes can be staged exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harnessopt.gate.banked import BankedGate
from harnessopt.gate.policy import PairedGate
from harnessopt.ledger import store as ledger
from harnessopt.ledger.manifest import gate_alphas
from harnessopt.protocols import Outcome, Sandbox, Task, TaskResult
from harnessopt.rollout.runner import Candidate
from harnessopt.round import context, evaluate
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import make_ws

Script = Callable[[str, str, int], tuple[float, bool]]  # (label, task id, attempt) -> (score, crashed)


class ScriptedRunner:
    """``Runner.run`` with scripted outcomes; remembers every batch it was asked to run."""

    def __init__(self, script: Script):
        self.script = script
        self.batches: list[tuple[str, list[str], list[int]]] = []
        self.rounds: list[int] = []  # the round each batch was run for
        self.attempts: dict[tuple[str, str], int] = {}
        self.prefetched: list[list[tuple[str, str, int]]] = []  # each prefetch() call's jobs
        self.dropped = 0
        self.expected: list[tuple[str, int]] = []  # each expect() call: (phase, runs)
        self.observers: list[Any] = []  # told of each batch and result, as Runner.run tells them

    def prefetch(
        self, cand: Candidate, jobs: Sequence[tuple[Task, int]], round_no: int, *, phase: str
    ) -> None:
        """Runs started ahead only save time: the scripted outcomes come when ``run`` asks."""
        self.prefetched.append([(cand.label, t.id, e) for t, e in jobs])

    def drop_prefetched(self, wait: bool = True) -> list[tuple[str, TaskResult]]:
        self.dropped += 1
        return []

    def expect(self, round_no: int, phase: str, runs: int) -> None:
        """``Runner.expect``: what the progress display is told a phase will run."""
        self.expected.append((phase, runs))

    def run(
        self,
        cand: Candidate,
        tasks: Sequence[Task],
        round_no: int,
        epochs: Sequence[int] = (0,),
        *,
        phase: str,
    ) -> list[TaskResult]:
        self.batches.append((cand.label, [t.id for t in tasks], list(epochs)))
        self.rounds.append(round_no)
        for o in list(self.observers):
            o.started(cand.label, tasks, round_no, epochs, phase)
        out = []
        for e in epochs:
            for t in tasks:
                n = self.attempts.get((cand.label, t.id), 0)
                self.attempts[(cand.label, t.id)] = n + 1
                score, crashed = self.script(cand.label, t.id, n)
                out.append(_result(t, round_no, e, score, crashed))
                out[-1].phase = phase  # as Runner.run stamps it
                for o in list(self.observers):
                    o.finished(cand.label, out[-1], len(out), len(tasks) * len(epochs))
        return out


class LocalByName(Sandbox):
    """The sandbox as the steps see it here: only its name (the runner is scripted)."""

    name = "local"


def _result(t: Task, k: int, epoch: int, score: float, crashed: bool) -> TaskResult:
    return TaskResult(
        task_id=t.id, split="val", round=k, epoch=epoch, score=score, passed=score == 1.0,
        soft=None if crashed else score, feedback="", answer="", exit_code=1 if crashed else 0,
        error_class="crash" if crashed else None, wall_s=0.1, input_tokens=10, output_tokens=5, steps=1,
    )  # fmt: skip


def _setup(tmp_path: Path, script: Script, **gate: Any) -> tuple[Workspace, Any, context.RoundContext]:
    ws = Workspace.open(make_ws(tmp_path, gate=gate) if gate else make_ws(tmp_path))
    runner = ScriptedRunner(script)
    svc = SimpleNamespace(
        cfg=ws.cfg,
        runner=runner,
        sandbox=LocalByName(),
        state_dir=tmp_path / "st",
        gate=PairedGate(ws.cfg.gate),
    )
    inc = Candidate(ws.root, "incumbent", "HEAD")
    rc = context.RoundContext(1, tmp_path / "scratch", inc, "HEAD", ws.tasks("val"))
    return ws, svc, rc


CAND = Candidate(Path("."), "candidate", "cand")


def _smoke(
    tmp_path: Path, script: Script, inc_crashed: Sequence[str] = (), probe: bool = False
) -> tuple[Any, str | None]:
    ws, svc, rc = _setup(tmp_path, script)
    first = sorted(t.id for t in rc.val)
    inc = {t: [Outcome(score=0.0 if t in inc_crashed else 1.0, crashed=t in inc_crashed)] for t in first}
    made = evaluate.probe(svc, rc) if probe else []  # as _steps makes it, while the optimizer works
    svc.runner.batches.clear()
    results, crash = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None, made)
    assert [r.task_id for r in results] == first[:5]  # the first runs are the ones validation keeps
    return svc.runner, crash


def test_a_flaky_crash_is_rerun_and_does_not_reject(tmp_path: Path) -> None:
    """The candidate's rerun ran clean: nothing to check on the incumbent's side."""
    flaky = sorted(t.id for t in Workspace.open(make_ws(tmp_path / "a")).tasks("val"))[1]
    runner, crash = _smoke(tmp_path, lambda side, t, n: (1.0, side == "candidate" and t == flaky and n == 0))
    assert crash is None
    reruns = [b for b in runner.batches if b[2] == [evaluate.SMOKE_RERUN_EPOCH]]
    assert reruns == [("candidate", [flaky], [evaluate.SMOKE_RERUN_EPOCH])]


def test_a_reproduced_crash_is_rerun_on_the_incumbent(tmp_path: Path) -> None:
    ids = sorted(t.id for t in Workspace.open(make_ws(tmp_path / "a")).tasks("val"))
    runner, crash = _smoke(tmp_path, lambda side, t, n: (1.0, side == "candidate" and t == ids[2]))
    assert crash is not None and "1/5 crashed twice" in crash
    reruns = [b for b in runner.batches if b[2] == [evaluate.SMOKE_RERUN_EPOCH]]
    assert reruns == [
        ("candidate", [ids[2]], [evaluate.SMOKE_RERUN_EPOCH]),
        ("incumbent", [ids[2]], [evaluate.SMOKE_RERUN_EPOCH]),
    ]


def test_the_probe_made_ahead_settles_a_broken_candidate_without_another_incumbent_run(
    tmp_path: Path,
) -> None:
    """A candidate crashing everywhere: the incumbent's rerun of the first smoke task was made while
    the optimizer worked and ran clean, so the rejection needs no incumbent run now (issue 15, P3)."""
    runner, crash = _smoke(tmp_path, lambda side, t, n: (1.0, side == "candidate"), probe=True)
    assert crash is not None and "5/5 crashed twice" in crash
    assert [b[0] for b in runner.batches] == ["candidate", "candidate"]  # smoke, its reruns
    # each crash's rerun was started as it came; no validation run was started for it
    ahead = [job for call in runner.prefetched for job in call]
    assert all(e == evaluate.SMOKE_RERUN_EPOCH for _label, _t, e in ahead) and len(ahead) == 5
    assert runner.dropped == 1  # whatever was started ahead goes with the candidate


def test_a_probe_that_crashed_leaves_the_incumbent_reruns_to_be_made(tmp_path: Path) -> None:
    ids = sorted(t.id for t in Workspace.open(make_ws(tmp_path / "a")).tasks("val"))
    # the incumbent crashes on the first task on its reruns only: shared there, reproduced elsewhere
    script = lambda side, t, n: (1.0, side == "candidate" or (t == ids[0] and n >= 0 and side == "incumbent"))  # noqa: E731
    runner, crash = _smoke(tmp_path, script, probe=True)
    assert crash is not None and "4/5 crashed twice" in crash
    assert ("incumbent", ids[1:5], [evaluate.SMOKE_RERUN_EPOCH]) in runner.batches


def test_validation_runs_start_ahead_at_most_concurrency_at_a_time(tmp_path: Path) -> None:
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (float(side == "candidate"), False))
    inc = {t.id: [Outcome(score=0.0)] for t in rc.val}
    smoked, _ = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None)
    evaluate.validate(ws, svc, rc, CAND, smoked, inc, lambda _m: None)
    conc = ws.cfg.rollout.concurrency
    started_ahead = [job for call in svc.runner.prefetched for job in call]
    assert all(0 < len(call) <= conc for call in svc.runner.prefetched[:-1])
    # every run started ahead is one validation then asked for, in the order it asked
    asked = [(label, t, e) for label, ts, es in svc.runner.batches for e in es for t in ts]
    assert all(job in asked for job in started_ahead)
    assert started_ahead[0] == asked[len(smoked)]  # the smoke test's free slots start validation
    # the progress display was told, before the first chunk, every validation run to come
    assert svc.runner.expected == [("validation", len(asked) - len(smoked))]


def test_a_crash_that_reproduces_where_the_incumbent_runs_rejects(tmp_path: Path) -> None:
    runner, crash = _smoke(
        tmp_path, lambda side, t, n: (1.0, side == "candidate" and t.startswith(("b", "c")))
    )
    assert (
        crash is not None
        and crash.startswith("smoke test: ")
        and "crashed twice where the incumbent did not" in crash
    )
    assert "(crash)" in crash


def test_a_crash_the_incumbent_has_too_does_not_reject(tmp_path: Path) -> None:
    first = sorted(t.id for t in Workspace.open(make_ws(tmp_path / "a")).tasks("val"))[0]
    # both sides crash on this task every time: a broken task or environment, not the candidate
    runner, crash = _smoke(tmp_path, lambda side, t, n: (0.0, t == first))
    assert crash is None
    # the cached incumbent crashed there, although its rerun did not: not the candidate's fault either
    runner, crash = _smoke(
        tmp_path / "b", lambda side, t, n: (1.0, side == "candidate" and t == first), inc_crashed=[first]
    )
    assert crash is None


def test_a_crash_on_a_task_the_incumbent_has_no_outcome_for_is_checked(tmp_path: Path) -> None:
    """Before, a task missing from the incumbent's outcomes let any crash through (all([]) is True)."""
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (1.0, side == "candidate"))
    results, crash = evaluate.smoke(ws, svc, rc, CAND, {}, lambda _m: None)
    assert crash is not None and "5/5 crashed twice" in crash
    assert ("incumbent", sorted(t.id for t in rc.val)[:5], [evaluate.SMOKE_RERUN_EPOCH]) in svc.runner.batches


def test_flaky_crashes_rarely_reject_a_good_candidate(tmp_path: Path) -> None:
    """At a 5% crash rate on both sides, the old rule rejected ~23% of candidates (1 - 0.95^5);
    with the rerun a reject needs the same task to crash twice: ~1%."""
    import random

    rng = random.Random(7)
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (1.0, rng.random() < 0.05))
    inc = {t.id: [Outcome(score=1.0)] for t in rc.val}
    first_crashed = rejected = 0
    for _ in range(200):
        svc.runner.batches.clear()
        _, crash = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None)
        first_crashed += len(svc.runner.batches) > 1
        rejected += crash is not None
    assert 20 <= first_crashed <= 70  # what the old rule would have rejected (expected 45)
    assert rejected <= 8, rejected  # expected 200 * 5 * 0.05 * 0.05 * 0.95 = 2.4


def test_validation_stops_for_futility_and_the_gate_says_what_it_saved(tmp_path: Path) -> None:
    """A candidate that fails every task the incumbent passes: once even all remaining tasks in its
    favour could not lift it above 0, validation stops and the round is rejected without reruns."""
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (0.0, False))
    ids = sorted(t.id for t in rc.val)
    inc = {t: [Outcome(score=1.0 if i < 10 else 0.0)] for i, t in enumerate(ids)}  # 10 of 14 passed
    smoked, crash = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None)
    assert crash is None and len(smoked) == 5
    said: list[str] = []
    results = evaluate.validate(ws, svc, rc, CAND, smoked, inc, said.append)
    # after 5 tasks: -5 done, 4 fixable left of 9 -> best (-5 + 4) / 14 < 0: stop before any chunk
    assert len(results) == 5 and any("stopped for futility" in m for m in said)
    d = evaluate.gate(ws, svc, rc, CAND, results, inc)
    assert not d.accept and d.reason.startswith("rejected: stopped for futility after 5 val tasks")
    assert d.details["futility"] == {"done": 5, "left": 9, "saved_rollouts": 9}
    # the bar the stop used, not the dead zone of all 14 tasks at the default confidence (0.3+)
    assert d.dead_zone == 0.0 and "could not beat the incumbent (two looks" in d.reason
    assert [b[0] for b in svc.runner.batches] == ["candidate"]  # no rerun was spent on it


def test_validation_runs_everything_while_the_candidate_can_still_win(tmp_path: Path) -> None:
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (float(side == "candidate"), False))
    inc = {t.id: [Outcome(score=0.0)] for t in rc.val}
    smoked, _ = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None)
    results = evaluate.validate(ws, svc, rc, CAND, smoked, inc, lambda _m: None)
    assert sorted(r.task_id for r in results) == sorted(t.id for t in rc.val)
    assert evaluate.gate(ws, svc, rc, CAND, results, inc).accept


def test_the_first_incumbent_measurement_is_an_aa_test_and_a_change_of_environment_repeats_it(
    tmp_path: Path,
) -> None:
    script = lambda side, t, n: (float(n % 2 == 0 or t < "c"), False)  # noqa: E731
    ws, svc, rc = _setup(tmp_path, script, incumbent_epochs=1)  # no bank: the A/A test runs twice
    said: list[str] = []
    got, nf = evaluate.incumbent_outcomes(ws, svc, rc, said.append)
    n = len(rc.val)
    assert nf is not None and nf["m"] == n and nf["rollouts"] == 2 * n
    assert [b[2] for b in svc.runner.batches] == [[0], [1]]  # the incumbent, twice
    assert 0 < nf["flip_rate"] <= 1 and nf["paired_sd"] > 0 and nf["detectable"] > 0
    assert any("noise floor" in m and "detects a gain of" in m for m in said)
    assert any("above gate.target_effect" in m for m in said)  # 14 tasks cannot detect 0.05
    again, nf2 = evaluate.incumbent_outcomes(ws, svc, rc, said.append)  # cached: no rollout, no A/A
    assert again == got and nf2 is None and len(svc.runner.batches) == 2
    # a new skill: measured again, once (the environment did not change)
    (ws.root / "skill" / "SKILL.md").write_text((ws.root / "skill" / "SKILL.md").read_text() + "\nmore\n")
    git(ws.root, "commit", "-qam", "skill edit")
    _, nf3 = evaluate.incumbent_outcomes(ws, svc, rc, said.append)
    assert nf3 is None and len(svc.runner.batches) == 3
    # a new scorer: measured again, and the noise floor with it
    (ws.root / "scorer.py").write_text((ws.root / "scorer.py").read_text() + "\n# stricter\n")
    git(ws.root, "commit", "-qam", "scorer edit")
    _, nf4 = evaluate.incumbent_outcomes(ws, svc, rc, said.append)
    assert nf4 is not None and len(svc.runner.batches) == 5


def test_an_accepted_round_is_confirmed_on_runs_that_did_not_select_it(tmp_path: Path) -> None:
    from harnessopt.protocols import GateDecision

    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (float(side == "candidate"), False))
    accepted = GateDecision(True, "accepted", 14, 1.0, 0.0, 1.0, 0.3)
    rec = evaluate.confirm_accepted(ws, svc, rc, CAND, accepted, lambda _m: None)
    assert rec is not None and rec["on"] == "val" and rec["confirmed"] and rec["gain"] == 1.0
    assert rec["n"] == len(rc.val) and rec["rollouts"] == 2 * len(rc.val)
    assert {b[2][0] for b in svc.runner.batches} == {evaluate.CONFIRM_EPOCH}
    rejected = GateDecision(False, "rejected", 14, 0.0, 0.0, 0.0, 0.3)
    assert evaluate.confirm_accepted(ws, svc, rc, CAND, rejected, lambda _m: None) is None
    # no gain on fresh runs: not confirmed, and ho/best must not move
    ws2, svc2, rc2 = _setup(tmp_path / "b", lambda side, t, n: (1.0, False))
    flat = evaluate.confirm_accepted(ws2, svc2, rc2, CAND, accepted, lambda _m: None)
    assert flat is not None and not flat["confirmed"] and "ho/best does not move" in flat["summary"]
    from harnessopt.ledger import store as ledger
    from harnessopt.ledger.manifest import ConfirmationRecord

    m = ledger.RoundManifest(
        round=1, status="accepted", parent=ws2.repo.head.commit.hexsha, confirmation=flat
    )
    assert not ledger.is_new_best(ws2.repo, m)
    assert ledger.is_new_best(
        ws2.repo, m.model_copy(update={"confirmation": ConfirmationRecord.model_validate(rec)})
    )


def test_main_moves_only_when_runs_that_did_not_select_the_candidate_confirm_it(tmp_path: Path) -> None:
    from harnessopt.protocols import GateDecision

    accepted = GateDecision(True, "accepted: +0.200 > dead zone 0.150 (n=14)", 14, 1.0, 0.0, 0.2, 0.15)
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (1.0, False))  # fresh runs: no gain at all
    flat = evaluate.confirm_accepted(ws, svc, rc, CAND, accepted, lambda _m: None)
    assert flat is not None and not flat["confirmed"]
    status, reason = evaluate.final_ending(accepted, flat, confirm_moves_main=True)
    assert status == "rejected" and "not confirmed" in reason and "main does not move" in reason
    assert "accepted: +0.200" in reason  # what the gate said stays in the record
    assert evaluate.final_ending(accepted, flat, confirm_moves_main=False) == ("accepted", accepted.reason)
    good = {**flat, "confirmed": True}
    assert evaluate.final_ending(accepted, good, confirm_moves_main=True) == ("accepted", accepted.reason)
    assert evaluate.final_ending(accepted, None, confirm_moves_main=True)[0] == "accepted"  # confirm: none
    rejected = GateDecision(False, "rejected: inside", 14, 0.0, 0.0, 0.0, 0.3)
    assert evaluate.final_ending(rejected, None, confirm_moves_main=True) == ("rejected", "rejected: inside")


def test_holdout_tasks_are_never_seen_by_the_gate_and_confirm_the_accept(tmp_path: Path) -> None:
    from harnessopt.gate.confirmation import split_val

    ws = Workspace.open(make_ws(tmp_path))
    val = ws.tasks("val")
    sel, held = split_val(val, ws.cfg.gate.model_copy(update={"confirm": "holdout"}))
    assert len(held) == round(0.3 * len(val)) and not {t.id for t in sel} & {t.id for t in held}
    assert split_val(val, ws.cfg.gate) == (val, [])  # confirm: val sets nothing aside
    assert split_val(list(reversed(val)), ws.cfg.gate.model_copy(update={"confirm": "holdout"}))[1] == [
        t for t in reversed(val) if t in held
    ]  # chosen by id, not by position


def test_run_alpha_spends_the_runs_budget_over_run_rounds_decisions(tmp_path: Path) -> None:
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (float(side == "candidate"), False))
    g = ws.cfg.gate.model_copy(update={"run_alpha": 0.05, "run_rounds": 2})
    svc.cfg = ws.cfg.model_copy(update={"gate": g})
    policy = evaluate._round_policy(ws, svc)
    assert isinstance(policy, PairedGate) and policy.cfg.confidence == pytest.approx(1 - 0.025)
    inc = {t.id: [Outcome(score=0.0)] for t in rc.val}
    results = svc.runner.run(CAND, rc.val, 1, phase="validation")
    d = evaluate.gate(ws, svc, rc, CAND, results, inc)
    assert d.details["alpha"] == pytest.approx(0.025)
    # two decisions recorded: the budget is spent and nothing more can be accepted
    for k in (1, 2):
        m = ledger.RoundManifest(round=k, status="rejected", gate={"alpha": 0.025})
        ledger.record_other(ws.repo, ws.repo.head.commit.hexsha, ws.root, ["skill"], m)
    assert evaluate._round_policy(ws, svc) is None
    spent = evaluate.gate(ws, svc, rc, CAND, results, inc)
    assert not spent.accept and "gate.run_alpha 0.05 is spent" in spent.reason


def test_a_validation_stopped_for_futility_spends_its_level_of_the_runs_budget(tmp_path: Path) -> None:
    """The stop is non-binding: until it stopped, the candidate could be accepted. A stop that
    spent nothing let the next round test at the same share of gate.run_alpha, so a run whose null
    candidates often stop early could make more false accepts than its budget says."""
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (0.0, False))
    g = ws.cfg.gate.model_copy(update={"run_alpha": 0.05, "run_rounds": 2})
    svc.cfg = ws.cfg.model_copy(update={"gate": g})
    ids = sorted(t.id for t in rc.val)
    inc = {t: [Outcome(score=1.0 if i < 10 else 0.0)] for i, t in enumerate(ids)}
    smoked, _ = evaluate.smoke(ws, svc, rc, CAND, inc, lambda _m: None)
    results = evaluate.validate(ws, svc, rc, CAND, smoked, inc, lambda _m: None)
    d = evaluate.gate(ws, svc, rc, CAND, results, inc)
    assert "stopped for futility" in d.reason and d.details["alpha"] == pytest.approx(0.025)
    m = ledger.RoundManifest(round=1, status="rejected", gate=d.details)
    ledger.record_other(ws.repo, ws.repo.head.commit.hexsha, ws.root, ["skill"], m)
    assert gate_alphas(ledger.find(ws.repo, 1).manifest) == [pytest.approx(0.025)]  # status counts it
    # the next decision is the run's second, at its share; a third would find the budget spent
    policy = evaluate._round_policy(ws, svc)
    assert isinstance(policy, PairedGate) and policy.cfg.confidence == pytest.approx(1 - 0.025)
    m = ledger.RoundManifest(round=2, status="rejected", gate={"alpha": 0.025})
    ledger.record_other(ws.repo, ws.repo.head.commit.hexsha, ws.root, ["skill"], m)
    assert evaluate._round_policy(ws, svc) is None


def test_banked_incumbent_runs_pay_for_the_aa_test_and_the_gates_reruns(tmp_path: Path) -> None:
    # gate.incumbent_epochs 4: the incumbent runs 4 epochs once; the A/A test reads epochs 0 and 1,
    # the first look sees epoch 0 only, and the gate's reruns of the incumbent come from the bank
    fixed: set[str] = set()

    def script(side: str, t: str, n: int) -> tuple[float, bool]:
        return float(side == "candidate" and t in fixed), False  # 3 of 14 fixed: inside the zone

    ws, svc, rc = _setup(tmp_path, script, incumbent_epochs=4, second_look=2)
    fixed.update(sorted(t.id for t in rc.val)[:3])
    said: list[str] = []
    inc, nf = evaluate.incumbent_outcomes(ws, svc, rc, said.append)
    n = len(rc.val)
    assert [b[2] for b in svc.runner.batches] == [[0, 1, 2, 3]]  # one batch: no second pass for A/A
    assert nf is not None and nf["rollouts"] == 2 * n and all(len(r) == 4 for r in inc.values())
    assert any("1 for the first look, the rest banked" in m for m in said)
    cand_val = svc.runner.run(CAND, rc.val, 1, phase="validation")
    d = evaluate.gate(ws, svc, rc, CAND, cand_val, inc)
    incumbent_batches = [b for b in svc.runner.batches[2:] if b[0] == "incumbent"]
    assert d.details["look"] == 2 and d.details["flips_first_pass"] == 3
    # the 3 flips once, then every task twice: 3 + 2 x 14 incumbent runs, all from the bank
    assert d.details["incumbent_banked_runs"] == 3 + 2 * n
    assert not incumbent_batches
    assert "second look" in d.reason and d.details["epochs_total"] == 3


def test_a_cached_incumbent_with_fewer_runs_than_incumbent_epochs_is_topped_up(tmp_path: Path) -> None:
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (1.0, False), incumbent_epochs=3)
    from harnessopt.rollout.val_cache import ValCache, digest, key_parts

    one = {t.id: [Outcome(score=1.0)] for t in rc.val}  # e.g. an accepted candidate's one epoch
    ValCache(svc.state_dir).put(digest(key_parts(ws.repo, rc.parent, svc.cfg, svc.sandbox)), one)
    got, nf = evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None)
    assert nf is None and [b[2] for b in svc.runner.batches] == [[1, 2]]  # only the epochs it lacks
    assert all(len(r) == 3 for r in got.values())
    assert evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None)[0] == got  # cached now: no run
    assert len(svc.runner.batches) == 1


def test_a_one_look_validation_tops_the_bank_up_to_its_size_and_a_later_two_look_one_to_the_whole(
    tmp_path: Path,
) -> None:
    """``incumbent_outcomes(..., top_up=3)`` (a validation the budget plans for one look) measures
    3 runs a task (its A/A test on runs 0 and 1: no extra pass); ``bank_lacks`` says what each size
    still costs; a later validation with both looks runs only the 8 a task the whole bank lacks,
    and a one-look one after that runs nothing."""
    ws, svc, rc = _setup(tmp_path, lambda side, t, n: (float(n % 2 == 0), False), incumbent_epochs=11)
    n = len(rc.val)
    lacks = evaluate.bank_lacks(ws, svc, rc)
    assert (lacks(3), lacks(11), lacks(1)) == (3 * n, 11 * n, 2 * n)  # 1 run: the A/A test's second pass
    got, nf = evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None, 3)
    assert nf is not None and [b[2] for b in svc.runner.batches] == [[0, 1, 2]]
    assert all(len(r) == 3 for r in got.values())
    lacks = evaluate.bank_lacks(ws, svc, rc)
    assert (lacks(3), lacks(11)) == (0, 8 * n)
    whole, nf2 = evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None)
    assert nf2 is None and [b[2] for b in svc.runner.batches][1:] == [list(range(3, 11))]
    assert all(len(r) == 11 and r[:3] == got[t] for t, r in whole.items())
    assert evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None, 3)[0] == whole  # more is read whole
    assert len(svc.runner.batches) == 2


def test_the_loop_hands_a_banked_gate_the_whole_bank_and_reruns_only_the_candidate(tmp_path: Path) -> None:
    """``evaluate.incumbent_outcomes`` reruns the bank's crashed runs once; ``evaluate.gate`` passes
    every banked run and a ``confirm`` that runs the candidate alone."""
    fixed: set[str] = set()

    def script(side: str, t: str, n: int) -> tuple[float, bool]:
        if side == "incumbent" and t == sorted(fixed)[0] and n == 0:
            return 0.0, True  # the incumbent's first banked run of this task crashes; the rerun passes
        return float(side == "candidate" or t not in fixed), False

    ws, svc, rc = _setup(tmp_path, script, incumbent_epochs=4, second_look=2)
    svc.gate = BankedGate(ws.cfg.gate)
    fixed.update(sorted(t.id for t in rc.val)[:4])
    inc, _ = evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None)
    crashed_task = sorted(fixed)[0]
    assert ("incumbent", [crashed_task], [evaluate.CRASH_RERUN_EPOCH]) in svc.runner.batches
    assert all(len(r) == 4 for r in inc.values()) and not any(o.crashed for r in inc.values() for o in r)
    before = len(svc.runner.batches)
    cand_val = svc.runner.run(CAND, rc.val, 1, phase="validation")
    d = evaluate.gate(ws, svc, rc, CAND, cand_val, inc)
    after = svc.runner.batches[before + 1 :]
    assert d.details["incumbent_runs"] == 4 and d.details["design"] == "banked"
    assert after and all(label == "candidate" for label, _, _ in after)  # no incumbent rerun
    assert d.details["incumbent_banked_runs"] == 0


@pytest.mark.parametrize("confirm_epochs", [2, 9])
def test_the_banked_confirmation_starts_the_winners_bank_and_the_next_validation_tops_it_up(
    tmp_path: Path, confirm_epochs: int
) -> None:
    """After a banked accept the candidate runs ``confirm_epochs`` fresh times on val (capped at
    ``incumbent_epochs``; a crash rerun once); against the incumbent's bank that is the
    confirmation. Cached as the new incumbent's runs it starts its bank: the next round that
    validates runs only the epochs each task lacks, in that round (fresh runs, not this round's)."""
    from harnessopt.rollout.val_cache import ValCache, digest, key_parts
    from harnessopt.round.record import cache_accepted

    fixed: set[str] = set()
    armed: list[str] = []

    def script(side: str, t: str, n: int) -> tuple[float, bool]:
        if side == "candidate" and t in armed:
            armed.remove(t)
            return 0.0, True  # its first confirmation run of this task crashes; the rerun passes
        return float(side == "candidate" or t not in fixed), False

    ws, svc, rc = _setup(tmp_path, script, incumbent_epochs=4, second_look=2, confirm_epochs=confirm_epochs)
    runs = min(confirm_epochs, 4)
    svc.gate = BankedGate(ws.cfg.gate)
    fixed.update(sorted(t.id for t in rc.val)[:4])
    inc, _ = evaluate.incumbent_outcomes(ws, svc, rc, lambda _m: None)
    d = evaluate.gate(ws, svc, rc, CAND, svc.runner.run(CAND, rc.val, 1, phase="validation"), inc)
    assert d.accept, d.reason
    svc.runner.batches.clear()
    armed.append(sorted(fixed)[0])
    said: list[str] = []
    rec, fresh = evaluate.confirm_banked(ws, svc, rc, CAND, d, inc, said.append)
    n = len(rc.val)
    first = sorted(fixed)[0]
    assert svc.runner.batches[0] == (
        "candidate",
        sorted(t.id for t in rc.val),
        [2 * 10**6 + e for e in range(runs)],
    )
    assert ("candidate", [first], [evaluate.CRASH_RERUN_EPOCH + 2 * 10**6]) in svc.runner.batches
    assert all(len(r) == runs and not any(o.crashed for o in r) for r in fresh.values()) and len(fresh) == n
    assert rec is not None and rec["confirmed"] and rec["gain"] == pytest.approx(4 / n)
    topped = ", topped up to 4 when a round next validates" if runs < 4 else ""
    assert f"x {runs} fresh runs (the new incumbent's bank{topped})" in said[0]
    assert '"phase": "confirm"' in (ws.root / ".harnessopt" / "journal.jsonl").read_text()
    cache_accepted(ws, svc, "HEAD", context.Trail(decision=d, new_bank=fresh))
    cached = ValCache(svc.state_dir).get(digest(key_parts(ws.repo, "HEAD", svc.cfg, svc.sandbox)))
    assert cached is not None and {t: len(r) for t, r in cached.items()} == {t: runs for t in fresh}
    rc2 = context.RoundContext(2, tmp_path / "scratch2", rc.incumbent, "HEAD", rc.val)
    svc.runner.batches.clear()
    fixed.clear()  # round 2's incumbent is the accepted candidate: it passes where its confirmation did
    bank, _ = evaluate.incumbent_outcomes(ws, svc, rc2, lambda _m: None)
    if runs == 4:
        assert svc.runner.batches == []  # its bank is complete: nothing to top up
    else:  # the epochs each task lacks, run by round 2
        assert [(ids, epochs) for _, ids, epochs in svc.runner.batches] == [
            (sorted(t.id for t in rc.val), list(range(runs, 4)))
        ]
        assert svc.runner.rounds[-1] == 2
    assert all(len(r) == 4 for r in bank.values()) and all(bank[t][:runs] == fresh[t] for t in fresh)
    assert evaluate.confirm_banked(ws, svc, rc, CAND, None, inc, said.append) == (None, {})


def test_the_incumbent_line_says_the_runs_the_a_a_test_makes(tmp_path: Path) -> None:
    """With a bank smaller than two first looks (the demo's incumbent_epochs 1, gate.epochs 2) the
    line said "x 1 epoch(s), twice" while the A/A test's second arm ran 2 more a task: 42 runs on
    14 val tasks, not 28 (QA). It says what runs."""
    from harnessopt.round import driver

    ws = Workspace.open(make_ws(tmp_path, gate={"epochs": 2}))
    said: list[str] = []
    [result] = driver.run(ws, 1, said.append)
    n = len(ws.tasks("val"))
    line = f"round 1: measuring the incumbent on {n} val tasks x 1 epoch(s), then x 2 again (an A/A test"
    assert any(x.startswith(line) for x in said), [x for x in said if "measuring the incumbent" in x]
    assert result.manifest.phases["incumbent"].runs >= n * (1 + 2)
