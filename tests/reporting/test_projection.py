"""The projection before any round is measured: what round 1 runs follows from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.reporting.projection import project
from harnessopt.workspace.core import Workspace
from tests.support.workspace import make_ws

UNBANKED = {"incumbent_epochs": 1, "second_look": 2, "first_look_share": 0.2}  # set explicitly: these
# tests were written for a gate without a bank (the default banks since issue 21)


def _runs(ws: Workspace, memorised: str = "reject", **gate: object) -> list[float]:
    checks = ws.cfg.checks.model_copy(update={"memorised": memorised})
    cfg = ws.cfg.model_copy(
        update={"gate": ws.cfg.gate.model_copy(update={**UNBANKED, **gate}), "checks": checks}
    )
    return [r.target_runs for r in project(ws, 2, cfg).rounds]


def test_round_one_counts_the_aa_test_and_later_rounds_the_cached_incumbent(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path))
    n_val = len(ws.tasks("val"))
    first, second = _runs(ws)
    assert first - second == pytest.approx(2 * n_val)  # the incumbent twice (A/A), then cached
    banked_first, banked_second = _runs(ws, incumbent_epochs=5)
    assert banked_first - banked_second == pytest.approx(
        5 * n_val
    )  # five runs a task; the A/A test reads two of them
    assert banked_second < second  # the bank pays the incumbent's side of the reruns


def test_reruns_and_the_confirmation_follow_the_gate_settings(tmp_path: Path) -> None:
    ws = Workspace.open(make_ws(tmp_path))
    n_val = len(ws.tasks("val"))
    base = _runs(ws)[1]
    assert _runs(ws, confirm="none")[1] < base  # no confirmation of an accept
    assert _runs(ws, memorised="off")[1] < base  # no memorised-answer check of an accept
    no_reruns = _runs(ws, memorised="off", confirm_flips=False, confirm="none")[1]
    # the train batch, val once, and the incumbent's probe (its smoke rerun made ahead)
    assert no_reruns == pytest.approx(min(ws.cfg.rollout.batch_size, len(ws.tasks("train"))) + n_val + 1)
    assert _runs(ws, "off", confirm_flips=False, confirm="none", smoke=0)[1] == pytest.approx(no_reruns - 1)
    assert _runs(ws, second_look=4)[1] > base


def test_harness_mode_projects_round_zero_until_a_proposal_is_approved(tmp_path: Path) -> None:
    from harnessopt.ledger import round0 as proposals

    ws = Workspace.open(make_ws(tmp_path, mode="harness"))
    p = project(ws, 2)
    n_train = len(ws.tasks("train"))
    assert p.round0 is not None and p.round0.target_runs == n_train  # the whole train split
    assert p.total().calls == pytest.approx(p.round0.calls + sum(r.calls for r in p.rounds))
    assert "round 0 (the diagnosis) first" in p.line() and p.table()[1].lstrip().startswith("0 ")
    assert project(Workspace.open(make_ws(tmp_path / "skill")), 2).round0 is None  # skill mode: none
    (ws.root / "proposals").mkdir()
    (ws.root / "proposals" / "round-0.md").write_text("# Plan\n")
    proposals.record_proposal(ws.repo, "# Plan\n", ws.root / "trajectories", {})
    proposals.record_decision(ws.repo, True, "", by="tester")
    assert project(ws, 2).round0 is None  # approved: the rounds run, no diagnosis


def _dry_run(ws: Path, *config: str) -> str:
    from tests.support.cli import cli

    out = cli("run", ws, "--dry-run", "--rounds", "1", *(x for c in config for x in ("-c", c)))
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_priors_per_template_and_prices_applied(tmp_path: Path) -> None:
    """openai-chat makes one call a task (not an agent's 5), and a ``prices:`` entry prices the target."""
    ws = make_ws(tmp_path, template="openai-chat")
    assert project(Workspace.open(ws), 1).rates["target_calls_per_run"] == 1.0
    free = _dry_run(ws, "model.target=my-llm")
    assert "rough guess" in free and "target_calls_per_run 1," in free
    priced = _dry_run(ws, "model.target=my-llm", "prices={my-llm: [100.0, 100.0]}")
    rate = project(Workspace.open(ws, {"model.target": "my-llm", "prices": {"my-llm": [100.0, 100.0]}}), 1)
    assert rate.rates["target_usd_per_call"] > 0
    assert "target_usd_per_call 0," in free and "target_usd_per_call 0," not in priced


def test_a_scripted_models_time_is_projected_from_its_script_not_a_hosted_models(tmp_path: Path) -> None:
    """The demo's projection said ~28 min for a run of seconds: the priors are a hosted model's
    15 s a run and 20 s an optimizer call. A scripted model waits its script's latency_s."""
    import yaml

    from harnessopt.reporting.projection import PRIORS, SCRIPTED_SECONDS

    ws = make_ws(tmp_path)
    rates = project(Workspace.open(ws), 1).rates
    assert rates["seconds_per_run"] == rates["seconds_per_optimizer_call"] == SCRIPTED_SECONDS
    script = yaml.safe_load((ws / "scripted_model.yaml").read_text())
    (ws / "scripted_model.yaml").write_text(yaml.safe_dump({**script, "latency_s": 2.0}))
    rates = project(Workspace.open(ws), 1).rates
    assert rates["seconds_per_run"] == SCRIPTED_SECONDS + 2.0 * rates["target_calls_per_run"]
    assert rates["seconds_per_optimizer_call"] == SCRIPTED_SECONDS + 2.0
    hosted = project(Workspace.open(ws, {"model.provider": "anthropic"}), 1).rates
    assert hosted["seconds_per_run"] == PRIORS["seconds_per_run"]
    assert hosted["seconds_per_optimizer_call"] == PRIORS["seconds_per_optimizer_call"]


def test_failed_rounds_teach_the_projection_nothing(tmp_path: Path) -> None:
    """A round that failed (all tasks crashed, STOP) ended early: its rates are not a round's."""
    from harnessopt.ledger import store as ledger
    from harnessopt.ledger.store import PhaseStats, RoundManifest

    ws = Workspace.open(make_ws(tmp_path))
    before = project(ws, 1)
    from harnessopt.ledger import vcs

    stopped = RoundManifest(
        round=1, status="failed", reason="stopped", phases={"rollout": PhaseStats(runs=8)}
    )
    ledger.record_other(ws.repo, vcs.head_sha(ws.repo), ws.root, ["skill"], stopped)
    assert [r.status for r in ledger.past_rounds(ws.repo)] == ["failed"]
    after = project(Workspace.open(ws.root), 1)
    assert after.basis == before.basis and after.total().calls == pytest.approx(before.total().calls)


def test_rounds_screened_out_on_train_are_not_charged_the_incumbents_val_runs(tmp_path: Path) -> None:
    """An explore round whose every step is dropped on train never reaches smoke, so it never
    measures the incumbent on val: projected from such a round, the next is what it ran."""
    from harnessopt.round import driver
    from tests.support.workspace import DEMO_LINE as old
    from tests.support.workspace import scripted_edits

    when = r"# Round (?P<r>\d+):[\s\S]*Your step: (?P<s>s\d+),"  # a sentence the answers ignore
    model = scripted_edits(tmp_path, {"step": (when, old, old + " Be kind (round {r}, {s}).")})
    ws = Workspace.open(make_ws(tmp_path, model=model, search={"explore": 2}))
    assert project(ws, 1).rounds[0].target_runs > 2 * len(ws.tasks("val"))  # priors: the bank too
    [first] = driver.run(ws, 1, lambda _m: None)
    assert first.status == "rejected" and "screened out on train" in first.reason
    made = sum(p.runs for p in first.manifest.phases.values())
    assert set(first.manifest.phases) == {"rollout", "screening", "probe"}  # nothing on val but the probe
    assert project(Workspace.open(ws.root), 2).rounds[0].target_runs == pytest.approx(made)


def test_the_line_says_in_which_round_the_budget_would_end_the_run_and_what_that_round_plans(
    tmp_path: Path,
) -> None:
    """``budget_note``: the first round whose running total passes a limit set, by the limit's
    name; nothing when every round fits. The run prints it before anything is spent. With the task
    objective the run plans its budget (``search.budget``): the round it runs out in still runs,
    its chain ending where its validation fits and its gate taking one look if two do not, unless
    what the rounds before it left pays for no round that could commit and finish
    (``round_can_commit``, the bound ``round.driver`` stops on), in which case the run ends before
    it. The demo's round 2 (58 calls) is smaller than what that bound asks (its batch, a turn and a
    one-look validation with the memorised-answer check and 10% over: 89), so a budget that runs
    out inside it ends the run before it; a chain of 3 steps makes a round larger than the bound."""
    ws = Workspace.open(make_ws(tmp_path))
    first, second = project(ws, 2).rounds
    assert project(ws, 2).budget_note() == ""  # the demo's config sets no limit
    for limit, used, size in (
        ("max_calls", first.calls, second.calls),
        ("max_tokens", first.tokens, second.tokens),
    ):
        says = "would end it before this run's round 2: what is left pays for no round that could commit"
        for share in (0.99, 0.3):
            at = int(used + share * size)
            cfg = ws.cfg.model_copy(update={"budget": ws.cfg.budget.model_copy(update={limit: at})})
            p = project(ws, 2, cfg)
            assert p.budget_note() == f"; budget.{limit} {says}"
            assert f"budget.{limit} {says}" in p.line()
            assert f"limit: budget.{limit} {says}" in p.table()  # run --dry-run prints it too
        ample = ws.cfg.model_copy(update={"budget": ws.cfg.budget.model_copy(update={limit: 10**9})})
        assert project(ws, 2, ample).budget_note() == ""
    tight = ws.cfg.model_copy(update={"budget": ws.cfg.budget.model_copy(update={"max_calls": 1})})
    assert project(ws, 2, tight).budget_note() == (  # on priors a first round starts: the gateway stops it
        "; by this rough guess budget.max_calls would stop it in this run's round 1 (it pays for no round "
        "that could commit); the round starts, and its measured rates decide"
    )
    chained = ws.cfg.model_copy(update={"search": ws.cfg.search.model_copy(update={"explore": 3})})
    one, two = project(ws, 2, chained).rounds
    for share, says in (
        (0.99, "would end it in this run's round 2, which plans for what is left (its chain ends where its validation "
               "still fits, and the gate takes one look if two do not fit: search.budget)"),
        (0.3, "would end it before this run's round 2: what is left pays for no round that could commit"),
    ):  # fmt: skip
        at = int(one.calls + share * two.calls)
        cfg = chained.model_copy(update={"budget": chained.budget.model_copy(update={"max_calls": at})})
        assert project(ws, 2, cfg).budget_note() == f"; budget.max_calls {says}"
        assert f"limit: budget.max_calls {says}" in project(ws, 2, cfg).table()
    hours = (first.wall_s + second.wall_s / 2) / 3600  # the wall clock, from the projected times
    timed = ws.cfg.model_copy(update={"budget": ws.cfg.budget.model_copy(update={"max_hours": hours})})
    assert project(ws, 2, timed).budget_note().startswith("; budget.max_hours would end it")
    # an objective whose rounds the budget does not plan: the gateway stops the round it runs out in
    tokens = int(first.tokens + 0.5 * second.tokens)
    trigger = ws.cfg.model_copy(
        update={"objective": "trigger", "budget": ws.cfg.budget.model_copy(update={"max_tokens": tokens})}
    )
    assert project(ws, 2, trigger).budget_note() == "; budget.max_tokens would stop it in this run's round 2"


def test_a_run_plans_its_budget_at_the_rates_its_rounds_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run re-reads the projection's rates after each round (``current_rates``): round 1's
    validation plans at the priors, round 2's at what round 1 measured."""
    from harnessopt.reporting.projection import measured_rates, prior_rates
    from harnessopt.round import driver, evaluate
    from harnessopt.search import budget

    ws = Workspace.open(make_ws(tmp_path, budget={"max_calls": 10**6}))
    priors = prior_rates(ws, ws.cfg)
    assert project(ws, 1).rates == priors
    seen: list[dict[str, float]] = []
    real = budget.looks

    def looks(cfg, rates, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(dict(rates))  # each validation's plan, at the rates the run holds then
        return real(cfg, rates, *args, **kwargs)

    monkeypatch.setattr(evaluate.budget, "looks", looks)
    results = driver.run(ws, 2, lambda _m: None)
    assert [r.round for r in results] == [1, 2] and len(seen) == 2, (results, seen)
    measured = measured_rates([results[0].manifest], ws.cfg)
    assert seen[0] == priors and seen[1] == measured and measured != priors


def test_the_optimizers_seconds_a_call_are_measured_from_the_rounds(tmp_path: Path) -> None:
    """Each round records the seconds its optimizer's conversations took (``optimizer_s``); the
    rates divide them by its calls, and take them out of the round's wall before the runs'."""
    from harnessopt.ledger.manifest import PhaseStats, RoleUsage, RoundManifest
    from harnessopt.reporting.projection import PRIORS, measured_rates
    from harnessopt.round import driver

    ws = Workspace.open(make_ws(tmp_path))
    [result] = driver.run(ws, 1, lambda _m: None)
    m = result.manifest
    calls = m.tokens["optimizer"].calls
    assert m.optimizer_s is not None and 0 < m.optimizer_s < (m.wall_s or 0) and calls > 0
    assert measured_rates([m], ws.cfg)["seconds_per_optimizer_call"] == pytest.approx(m.optimizer_s / calls)

    def made(optimizer_s: float | None) -> RoundManifest:
        return RoundManifest(
            round=1,
            status="rejected",
            wall_s=100.0,
            optimizer_s=optimizer_s,
            phases={"rollout": PhaseStats(runs=40, calls=40)},
            tokens={"optimizer": RoleUsage(calls=2), "target": RoleUsage(calls=40)},
        )

    c = ws.cfg.rollout.concurrency
    timed = measured_rates([made(30.0)], ws.cfg)
    assert timed["seconds_per_optimizer_call"] == 15.0
    assert timed["seconds_per_run"] == pytest.approx(70.0 * c / 40)
    old = measured_rates([made(None)], ws.cfg)  # a round recorded before optimizer_s: the prior
    assert old["seconds_per_optimizer_call"] == PRIORS["seconds_per_optimizer_call"]
    assert old["seconds_per_run"] == pytest.approx(
        (100.0 - 2 * PRIORS["seconds_per_optimizer_call"]) * c / 40
    )


def test_checkpoints_are_projected_at_the_share_of_them_the_measured_rounds_ran(tmp_path: Path) -> None:
    """A chain's checkpoints score its head; a head already scored is not run again. Before a round
    is measured every checkpoint is counted (an upper bound); after, the share that ran: here no
    step is kept, so of the chain's two checkpoints (after s2 and at the end) only the first runs
    its 50 fixed tasks, and the next round is projected at what this one made."""
    from harnessopt.round import driver
    from tests.support.workspace import DEMO_LINE as old
    from tests.support.workspace import scripted_edits, with_more_train

    when = r"# Round (?P<r>\d+):[\s\S]*Your step: (?P<s>s\d+),"  # a sentence the answers ignore
    model = scripted_edits(tmp_path, {"step": (when, old, old + " Be kind (round {r}, {s}).")})
    tasks = with_more_train(tmp_path, 50)
    ws = Workspace.open(make_ws(tmp_path, tasks=tasks, model=model, search={"explore": 4, "checkpoints": 2}))
    unscored = ws.cfg.model_copy(update={"search": ws.cfg.search.model_copy(update={"checkpoints": 0})})
    upper = project(ws, 1).rounds[0].target_runs - project(ws, 1, unscored).rounds[0].target_runs
    assert upper == pytest.approx(2 * 50)
    [first] = driver.run(ws, 1, lambda _m: None)
    assert first.status == "rejected" and "screened out on train" in first.reason
    search = first.manifest.search
    assert search is not None and (search.checkpoints, search.checkpoints_run) == (2, 1)
    made = sum(p.runs for p in first.manifest.phases.values())
    measured = project(Workspace.open(ws.root), 2)
    assert measured.rates["checkpoint_share"] == 0.5
    assert measured.rounds[0].target_runs == pytest.approx(made)


def test_a_manual_optimizer_is_projected_no_model_calls_and_a_model_one_its_priors(tmp_path: Path) -> None:
    """--optimizer manual makes no model call: none are projected or priced. A model backend after
    rounds that were manual (no optimizer call measured) is projected at the priors, not at zero."""
    from harnessopt.ledger import store as ledger
    from harnessopt.ledger import vcs
    from harnessopt.ledger.manifest import PhaseStats, RoleUsage, RoundManifest
    from harnessopt.reporting.projection import prior_rates

    priced = {"prices": {"*": [15.0, 75.0]}}  # the scripted models have no price of their own
    ws = Workspace.open(make_ws(tmp_path, search={"explore": None}), priced)
    model = project(ws, 1)
    assert model.total().optimizer_calls > 0 and model.total().cost_usd > 0
    manual = project(Workspace.open(ws.root, {**priced, "optimizer.backend": "manual"}), 1)
    assert manual.total().optimizer_calls == 0
    assert manual.total().cost_usd < model.total().cost_usd
    assert "0 optimizer" in manual.line() and "chosen for a person: a person makes each step" in manual.line()
    by_hand = RoundManifest(
        round=1,
        status="rejected",
        wall_s=100.0,
        phases={"rollout": PhaseStats(runs=40, calls=40)},
        tokens={"target": RoleUsage(calls=40, input=4000, output=400, cost_usd=0.4)},
    )
    ledger.record_other(ws.repo, vcs.head_sha(ws.repo), ws.root, ["skill"], by_hand)
    after = project(Workspace.open(ws.root, priced), 1)
    # said: "measured" alone read as if the optimizer's 20 calls a round had been measured (QA: a
    # round that resumed its proposals made none)
    assert (
        after.basis
        == "1 measured round(s); the optimizer's calls from config priors (no measured round made one)"
    )
    prior = prior_rates(ws, ws.cfg)
    assert after.rates["optimizer_calls"] == prior["optimizer_calls"] > 0
    assert after.rates["optimizer_usd_per_call"] == prior["optimizer_usd_per_call"] > 0
    assert after.rates["target_usd_per_call"] == pytest.approx(0.01)  # the target's as measured


def test_rounds_measured_with_other_models_or_prices_do_not_price_a_run(tmp_path: Path) -> None:
    """A user who rehearses with the scripted model ($0) and then runs a priced one was projected
    $0 from the rehearsal's rounds (and a budget planned on it): rates come only from rounds that
    ran the run's models at its prices; the others are left out, and the basis says so."""
    from harnessopt.config import apply_overrides
    from harnessopt.round import driver

    ws = Workspace.open(make_ws(tmp_path, search={"explore": 0}))
    [first] = driver.run(ws, 1, lambda _m: None)
    assert (
        first.manifest.models is not None and first.manifest.models["target"]["model"] == ws.cfg.model.target
    )
    ws = Workspace.open(ws.root)
    assert project(ws, 1).basis == "1 measured round(s)"
    priced = {"prices": {"scripted-*": [3.0, 15.0]}}
    for change in ({"model.target": "another-target"}, {"optimizer.model": "another-optimizer"}, priced):
        cfg = apply_overrides(ws.cfg, change)
        p = project(ws, 1, cfg)
        assert (
            p.basis.startswith("config priors")
            and "1 round(s) measured with other models or prices left out" in p.basis
        )
    assert project(ws, 1, apply_overrides(ws.cfg, priced)).total().cost_usd > 0  # the priors at the new price


def test_several_winners_are_projected_with_the_validations_they_make(tmp_path: Path) -> None:
    """search.winners 2 validates the second winner when the first is rejected: a round validated
    twice (QA: 5 smoke and 9 validation runs with one winner, 10 and 18 with two), while the dry run
    printed the same line for winners 1, 2 and 3. Priors: the next winner at the rejected share."""
    ws = Workspace.open(make_ws(tmp_path))
    search = ws.cfg.search

    def second_round(**update: object) -> float:
        cfg = ws.cfg.model_copy(update={"search": search.model_copy(update={"candidates": 3, **update})})
        return project(ws, 2, cfg).rounds[1].target_runs

    one, two, three = (second_round(winners=w) for w in (1, 2, 3))
    n_val, epochs = len(ws.tasks("val")), ws.cfg.gate.epochs
    assert two - one >= 0.7 * n_val * epochs  # the second winner's smoke and validation, 70% of rounds
    assert three > two and second_round(winners=5) == pytest.approx(
        three
    )  # no more winners than 3 candidates
    assert second_round(winners=2, candidates=1) == pytest.approx(second_round(winners=1, candidates=1))


def test_measured_rounds_give_the_validations_a_round_made() -> None:
    from harnessopt.config import Config
    from harnessopt.ledger.store import RoundManifest
    from harnessopt.reporting.projection import _validations

    def round_(*verdicts: str) -> RoundManifest:
        cands = [{"name": f"c{i}", "chosen": True, "verdict": v} for i, v in enumerate(verdicts, 1)]
        return RoundManifest.model_validate(
            {
                "round": 1,
                "status": "rejected",
                "phases": {"validation": {"runs": 9}},
                "search": {"candidates": cands},
            }
        )

    cfg = Config.model_validate({"search": {"candidates": 3, "winners": 2}})
    both, first = round_("rejected: a", "accepted: b"), round_("accepted: a", "")
    assert _validations([both, first], cfg) == pytest.approx(1.5)  # 2 winners judged, then 1
    assert _validations([first], cfg) == pytest.approx(1.7)  # none judged two yet: the prior, 1 + 0.7
    assert _validations([first], Config()) == pytest.approx(1.0)


def test_the_table_rows_add_up_to_its_total(tmp_path: Path) -> None:
    """Rows rounded one by one did not: 76 task runs a round for three rounds, total 229 (QA). Each
    count is rounded as a running total, so the rows add up and each is within 1 of its value."""
    from harnessopt.reporting.projection import Projection, RoundCost

    rounds = [
        RoundCost(target_runs=76.4, target_calls=80.3, optimizer_calls=3.6, tokens=500.4) for _ in range(3)
    ]
    p = Projection(rounds=rounds, basis="test", rates={})
    body = [line.split() for line in p.table()[1:5]]
    assert [row[0] for row in body] == ["+1", "+2", "+3", "total"]
    runs, calls, tokens = ([int(row[i]) for row in body] for i in (1, 2, 3))
    for column in (runs, calls, tokens):
        assert sum(column[:3]) == column[3], column
    assert runs[3] == 229 and calls[3] == 252 and tokens[3] == 1501
    assert all(abs(r - 76.4) < 1 for r in runs[:3]) and all(abs(c - 83.9) < 1 for c in calls[:3])
