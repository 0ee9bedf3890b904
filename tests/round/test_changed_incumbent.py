"""An incumbent whose later runs score lower than its confirmation fails the round (red team: a
harness that sabotaged its own bank top-up let a regression be accepted as a +0.442 gain)."""

from __future__ import annotations

import uuid
from pathlib import Path

from harnessopt.config import GateConfig
from harnessopt.gate.bank import changed_since
from harnessopt.ledger import store as ledger
from harnessopt.protocols import Outcome
from harnessopt.round import driver
from harnessopt.workspace.core import Workspace
from tests.support.workspace import leaky_workspace

ANSWER = '    (args.out / "answer.txt").write_text(answer)\n    return 0\n'


def _runs(scores_by_task: dict[str, list[float]]) -> dict[str, list[Outcome]]:
    return {t: [Outcome(x) for x in xs] for t, xs in scores_by_task.items()}


def test_changed_since_finds_later_runs_significantly_lower() -> None:
    earlier = _runs({f"t{i}": [1.0, 1.0, 1.0] if i % 2 else [0.0, 0.0, 0.0] for i in range(14)})
    sabotaged = _runs({f"t{i}": [0.0] * 8 for i in range(14)})  # half the tasks lose every run
    change = changed_since(earlier, sabotaged)
    assert change is not None and change[0] == -0.5 and change[2] == 14
    same = _runs({f"t{i}": [1.0] * 8 if i % 2 else [0.0] * 8 for i in range(14)})
    assert changed_since(earlier, same) is None
    # run noise: a task that passed 3 of 3 passes 6 of 8 later, on every other task
    noisy = _runs(
        {
            f"t{i}": ([1.0] * 6 + [0.0] * 2 if i % 4 == 1 else [1.0] * 8) if i % 2 else [0.0] * 8
            for i in range(14)
        }
    )
    assert changed_since(earlier, noisy) is None
    assert changed_since(_runs({"t0": [1.0]}), _runs({"t0": [0.0]})) is None  # one task: nothing to test on
    # timed-out runs (crashed, score 0) are no evidence of what the code does: a slow upstream
    # failed a round as "the incumbent changed" (QA)
    timeouts = {t: [Outcome(0.0, crashed=True)] * 6 + list(runs[:2]) for t, runs in same.items()}
    assert changed_since(earlier, timeouts) is None


def test_an_incumbent_that_sabotages_its_later_runs_fails_the_next_round(tmp_path: Path) -> None:
    """Round 1's edit is a real fix plus a harness line that answers wrong on val once a marker
    exists (the red team's read the clock); the marker is made between the runs, as the clock
    would pass. Round 2 tops up the incumbent's bank: its runs now score lower than its
    confirmation's, so no candidate is judged against it; the round fails and says why."""
    marker = Path("/var/tmp") / f"ho-bomb-{uuid.uuid4().hex}"  # outside /tmp and the workspace: seen by bwrap
    bomb = (
        f'    if os.path.exists("{marker}") and task.get("split") == "val":\n'
        '        answer = "unsure"\n' + ANSWER
    )
    rule = {
        "role": "optimizer",
        "first_user": "# Round 1:",
        "turn": 1,
        "tool_use": [{"name": "str_replace_based_edit_tool", "input": {
            "command": "str_replace", "path": "harness/run.py", "old_str": ANSWER, "new_str": bomb}}],
    }  # fmt: skip
    default = GateConfig()
    gate = {k: getattr(default, k) for k in ("policy", "incumbent_epochs", "second_look", "first_look_share")}
    ws = leaky_workspace(
        tmp_path, "Reply with only the city name: no sentence.", [rule], whitelist=["skill/**", "harness/**"],
        gate=gate,
    )  # fmt: skip
    try:
        [first] = driver.run(Workspace.open(ws), 1, lambda _m: None)
        assert first.status == "accepted", first.reason
        assert str(marker) in (ws / "harness" / "run.py").read_text()
        marker.touch()
        said: list[str] = []
        [second] = driver.run(Workspace.open(ws), 1, said.append)
    finally:
        marker.unlink(missing_ok=True)
    assert second.status == "failed", (second.status, second.reason)
    assert second.reason.startswith("the incumbent scores lower now than when it was confirmed"), (
        second.reason
    )
    assert "review the round that accepted it" in second.reason
    repo = Workspace.open(ws).repo
    assert ledger.best(repo).manifest.round == 1 and [r.round for r in ledger.past_rounds(repo)] == [1, 2]
