"""Several candidates a round, end to end on the demo workspace with the scripted model: three
candidates, one good on train and two not; only the good one is validated and committed."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harnessopt.commands.demo import DEMO_DATA
from harnessopt.ledger import store as ledger
from harnessopt.ledger.manifest import gate_alphas
from harnessopt.reporting.data import report_data
from harnessopt.reporting.html import render_html
from harnessopt.reporting.log import round_diff, status_lines
from harnessopt.reporting.projection import project
from harnessopt.round import driver
from harnessopt.workspace.core import Workspace
from tests.support.cli import cli, git
from tests.support.workspace import make_ws, scripted_edits

OLD = "Be friendly and helpful. Explain your answer so the user learns something."
GOOD = "Reply with only the city name: no sentence, no explanation, no punctuation."
EDITS = {  # candidate -> the line it writes over OLD; only c2's makes the scripted target pass
    "c1": "Be friendly and helpful. Explain your answer, and be brief.",
    "c2": GOOD,
    "c3": "Be friendly and helpful. Explain your answer in two sentences.",
}


def _script(tmp_path: Path) -> Path:
    """The demo's script with round 1's optimizer rules replaced by one edit per candidate."""
    return scripted_edits(
        tmp_path,
        {name: (f"# Round 1:[\\s\\S]*candidate {name} of 3", OLD, line) for name, line in EDITS.items()},
    )


def _ws(tmp_path: Path, **search: Any) -> Path:
    return make_ws(tmp_path, model=_script(tmp_path), search={"candidates": 3, **search})


@pytest.fixture(scope="module")
def k3_round(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, float, float]:
    tmp = tmp_path_factory.mktemp("k3")
    ws = Workspace.open(_ws(tmp))
    with_search, without = (
        project(ws, 1),
        project(
            ws, 1, ws.cfg.model_copy(update={"search": ws.cfg.search.model_copy(update={"candidates": 1})})
        ),
    )
    [result] = driver.run(ws, 1, lambda _m: None)
    return ws.root, result, with_search.rounds[0].target_runs, without.rounds[0].target_runs


def test_only_the_train_winner_is_validated_and_committed(k3_round: tuple[Path, Any, float, float]) -> None:
    root, result, _, _ = k3_round
    m = result.manifest
    assert result.status == "accepted" and m.search is not None
    by_name = {c.name: c for c in m.search.candidates}
    assert m.search.winners == ["c2"] and m.search.alpha_split == 1
    assert by_name["c2"].chosen and by_name["c2"].mean_delta > 0 and by_name["c2"].wins
    for name in ("c1", "c3"):
        c = by_name[name]
        assert not c.chosen and c.mean_delta == 0.0 and c.n == 8
        assert c.reason.startswith("not validated:") and "c2 validated instead" in c.reason
    assert [c.name for c in m.search.candidates][0] == "c2"  # best first
    # Each screened candidate ran the round's 8 train tasks; only c2 ran the smoke test and val.
    assert m.phases["screening"].runs == 3 * 8 and m.phases["rollout"].runs == 8
    assert m.phases["smoke"].runs == 5
    assert m.summary.startswith("Edit of c2") and m.changed == ["skill/SKILL.md"]
    assert GOOD in (root / "skill" / "SKILL.md").read_text()
    # Each conversation has its own transcript; the round's record points at the winner's.
    names = sorted(p.name for p in (root / ".harnessopt" / "optimizer").glob("optimizer-round-1*.jsonl"))
    assert names == [f"optimizer-round-1-c{i}.jsonl" for i in (1, 2, 3)]
    assert (
        m.optimizer is not None
        and m.optimizer.transcript == ".harnessopt/optimizer/optimizer-round-1-c2.jsonl"
    )
    # Each candidate aimed at its own cluster: three different focuses.
    assert len({c.focus for c in m.search.candidates}) == 3


def test_every_candidate_is_a_diff_on_its_own_ref(k3_round: tuple[Path, Any, float, float]) -> None:
    root, result, _, _ = k3_round
    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/harnessopt/candidates/").split()
    assert refs == [f"refs/harnessopt/candidates/round-1/c{i}" for i in (1, 2, 3)]
    for i, (name, line) in enumerate(EDITS.items(), 1):
        out = subprocess.run(  # its number, or its name as log gives it (c2 was refused (QA))
            [sys.executable, "-m", "harnessopt", "diff", str(root), "1", "--candidate", str(i) if i % 2 else name],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert f"# round 1 candidate {name}: {'validated' if name == 'c2' else 'not validated'}" in out
        assert f"+{line}" in out and f"-{OLD}" in out
    bad = subprocess.run(
        [sys.executable, "-m", "harnessopt", "diff", str(root), "1", "--candidate", "9"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "has no candidate 9" in bad.stderr and "Traceback" not in bad.stderr
    # The rounds read back from git are unchanged by the candidates' refs.
    assert [r.round for r in ledger.past_rounds(Workspace.open(root).repo)] == [1]
    log = subprocess.run(
        [sys.executable, "-m", "harnessopt", "log", str(root), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = json.loads(log)[0]
    assert [c["name"] for c in row["candidates"]] == ["c2", "c1", "c3"]
    page = render_html(report_data(Workspace.open(root)), {})
    table = page.split("<h2>Candidates</h2>")[1].split("</table>")[0]
    assert table.count("<tr>") == 4 and "refs/harnessopt/candidates/round-1/c3" in table
    assert "c2 validated instead" in table


def test_the_projection_counts_the_screening_runs(k3_round: tuple[Path, Any, float, float]) -> None:
    _, result, with_search, without = k3_round
    assert with_search - without == pytest.approx(3 * 8)  # three candidates on the 8 train tasks
    assert with_search - without == result.manifest.phases["screening"].runs


def test_projection_is_within_ten_percent_of_the_demo_with_three_candidates(tmp_path: Path) -> None:
    """The demo's own script plays three candidates a round (c2 and c3 change nothing the scorer sees)."""
    ws = Workspace.open(make_ws(tmp_path, search={"candidates": 3}))
    projected = project(ws, 3).total().target_runs
    results = driver.run(ws, 3, lambda _m: None)
    actual = sum(s.runs for r in results for s in r.manifest.phases.values())
    assert all(r.manifest.phases["screening"].runs == 24 for r in results)
    assert abs(projected - actual) <= 0.10 * actual, (projected, actual)


def test_a_screen_floor_keeps_a_round_without_a_train_gain_from_validation(tmp_path: Path) -> None:
    script = yaml.safe_load(_script(tmp_path).read_text())
    script["rules"] = [r for r in script["rules"] if "candidate c2" not in str(r.get("first_user"))]
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(script))  # c2 now plays "No change"
    ws_root = make_ws(tmp_path, model=tmp_path / "model.yaml", search={"candidates": 3, "screen_floor": 0.01})
    [result] = driver.run(Workspace.open(ws_root), 1, lambda _m: None)
    m = result.manifest
    assert result.status == "rejected" and result.reason.startswith("screened out on train")
    assert "smoke" not in m.phases and "validation" not in m.phases  # nothing spent on val
    assert m.search is not None and m.search.winners == []
    outcomes = {c.name: c.outcome for c in m.search.candidates}
    assert outcomes == {"c1": "screened", "c2": "noop", "c3": "screened"}
    assert git(ws_root, "rev-parse", "refs/harnessopt/rejected/round-1")


def _journal_has(ws: Path, phase: str) -> bool:
    journal = ws / ".harnessopt" / "journal.jsonl"
    return journal.exists() and any(
        json.loads(x).get("phase") == phase for x in journal.read_text().splitlines()
    )


def test_a_rerun_after_ctrl_c_pays_neither_the_proposals_nor_the_screening_again(tmp_path: Path) -> None:
    """The interrupted run set its candidates with -c: the command status names after it repeats
    that (the plain one, which QA pasted, ran one candidate and called the optimizer again)."""
    ws = make_ws(tmp_path, model=_script(tmp_path))
    cmd = [sys.executable, "-m", "harnessopt", "run", str(ws), "--rounds", "1", "-c", "search.candidates=3"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 300
        while not _journal_has(ws, "screen"):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err
    (line,) = [x for x in status_lines(Workspace.open(ws)) if x.startswith("next: ")]
    resume = shlex.split(line.removeprefix("next: ").split("   |")[0])
    assert resume == ["harnessopt", "run", str(ws), "-c", "search.candidates=3"]
    cmd = [*cmd[:3], *resume[1:], "--rounds", "1"]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    out = again.stdout + again.stderr
    for name in ("c1", "c2", "c3"):
        assert f"round 1 candidate {name}: reusing the optimizer's proposal" in out
    reused = int(out.split("round 1: reused ")[1].split()[0])
    assert reused >= 8 + 3 * 8  # the incumbent's train runs and every screening run
    m = ledger.find(Workspace.open(ws).repo, 1).manifest
    assert m.status == "accepted" and m.search is not None and m.search.winners == ["c2"]
    # what the interrupted attempt paid (its optimizer conversations, its runs) is in no record:
    # the round's counts only the attempt that wrote it, and status and the report say the rest
    first, last = [e for e in Workspace.open(ws).journal.entries() if e.get("phase") == "spend"]
    paid = sum(u["calls"] for u in first["tokens"].values())
    assert paid > 0 and sum(u.calls for u in m.tokens.values()) == sum(
        u["calls"] for u in last["tokens"].values()
    )
    said = f"interrupted attempt(s) of round 1 spent $0.0000, {paid} model call(s)"
    status = subprocess.run([*cmd[:3], "status", str(ws)], capture_output=True, text=True, timeout=120).stdout
    assert said in status, status
    assert any(x.startswith(said) for x in report_data(Workspace.open(ws))["spend"])


def _complementary_script(tmp_path: Path) -> Path:
    """Round 1: c1 writes MODE-A (the target then answers australia and canada right), c3 MODE-B
    (france and germany), c2 nothing. Round 2: only the merge candidate edits, and only when its
    brief carries both archived diffs."""
    script = yaml.safe_load((DEMO_DATA / "model.yaml").read_text())
    keep = [
        r
        for r in script["rules"]
        if not (r.get("role") == "optimizer" and "Round" in str(r.get("first_user")))
    ]
    target = [
        {"role": "target", "system": "MODE-A", "last_user": r"\b(Australia|Canada)\b", "reply": "{lookup}"},
        {"role": "target", "system": "MODE-B", "last_user": r"\b(France|Germany)\b", "reply": "{lookup}"},
        {"role": "target", "system": "MODE-[AB]", "reply": "no idea"},
    ]

    def edit(when: str, line: str, *more: dict[str, Any]) -> list[dict[str, Any]]:
        change = {"command": "str_replace", "path": "skill/SKILL.md", "old_str": OLD, "new_str": line}
        uses = [{"name": "str_replace_based_edit_tool", "input": x} for x in (change, *more)]
        return [
            {"role": "optimizer", "first_user": when, "turn": 1, "tool_use": uses},
            {"role": "optimizer", "first_user": when, "turn": 2, "reply": f"{line}\n\nwhy"},
        ]  # fmt: skip

    merge = r"# Round 2:(?=[\s\S]*Yours: \*\*merge\*\*)(?=[\s\S]*\+MODE-A)(?=[\s\S]*\+MODE-B)"
    rules = [
        *edit(  # and a write outside skill mode's whitelist, which its copy-back discards
            r"# Round 1:[\s\S]*candidate c1 of 3",
            "MODE-A",
            {"command": "create", "path": "harness/NOTES.txt", "file_text": "notes\n"},
        ),
        *edit(r"# Round 1:[\s\S]*candidate c3 of 3", "MODE-B"),
        *edit(merge, "MODE-A MODE-B"),
    ]
    script["rules"] = target + rules + keep
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(script, sort_keys=False))
    return path


def test_two_winners_split_alpha_and_a_later_round_merges_complementary_candidates(tmp_path: Path) -> None:
    ws = Workspace.open(
        make_ws(tmp_path, model=_complementary_script(tmp_path), search={"candidates": 3, "winners": 2})
    )
    said: list[str] = []
    first, second = driver.run(ws, 2, said.append)
    s1 = first.manifest.search
    # the run names the winner each smoke and validation is of, and the first one's verdict (QA)
    turns = [
        m
        for m in said
        if m.startswith(
            ("round 1: candidate c1, ", "round 1: candidate c3, ", "round 1: candidate c1: rejected")
        )
    ]
    assert turns[0] == "round 1: candidate c1, screened winner 1 of 2 (each tested at alpha/2)", said
    assert turns[1].startswith("round 1: candidate c1: rejected: ") and turns[2].startswith(
        "round 1: candidate c3, "
    )
    assert said.index(turns[0]) < next(i for i, m in enumerate(said) if "smoke test of the candidate" in m)
    assert s1 is not None and s1.winners == ["c1", "c3"] and s1.alpha_split == 2
    assert s1.validated == ["c1", "c3"]  # neither gains on val (its wins are train-only): both tried
    assert first.status == "rejected"
    assert first.manifest.gate.confidence == pytest.approx(1 - (1 - ws.cfg.gate.confidence) / 2)
    # Each winner's verdict and spend is in its record (the round's fields hold only c3's, the
    # last validated), and the budget status counts both decisions: alpha/2 twice, not once (QA).
    by_name = {c.name: c for c in s1.candidates}
    alpha = 1 - ws.cfg.gate.confidence
    for name in ("c1", "c3"):
        assert by_name[name].verdict.startswith("rejected: ")
        assert not by_name[name].verdict.startswith("rejected: rejected:")  # it said it twice (QA)
        assert by_name[name].gate_alpha == pytest.approx(alpha / 2)
    assert gate_alphas(first.manifest) == pytest.approx([alpha / 2, alpha / 2])
    decisions = [*gate_alphas(first.manifest), *gate_alphas(second.manifest)]
    said = f"gate decisions: {len(decisions)}, false-accept budget spent {sum(decisions):.3f}"
    assert len(decisions) == 3 and said in "\n".join(status_lines(ws))
    # c1's discarded write is on its record, in its diff and in the round's, though c3 spoke last
    assert by_name["c1"].violations == ["harness/NOTES.txt"] and not by_name["c3"].violations
    assert first.manifest.violations == ["harness/NOTES.txt"]
    assert "#   harness/NOTES.txt" in round_diff(ws, 1, candidate=1)
    assert "#   harness/NOTES.txt (by c1)\n" in round_diff(ws, 1)  # the round's ref is c3's (QA)
    # each winner's verdict with the alpha it spent, in its diff and in log (QA: no view showed it)
    assert f"# {by_name['c1'].verdict} (alpha {alpha / 2:.3g})\n" in round_diff(ws, 1, candidate=1)
    logged = cli("log", ws.root).stdout
    assert logged.count(f"(alpha {alpha / 2:.3g})") >= 2, logged
    wins = {c.name: set(c.wins) for c in s1.candidates}
    assert wins["c1"] == {"australia", "canada"} and wins["c3"] == {"france", "germany"}
    # Round 2: the last candidate is asked to merge the archived pair, with both diffs in its brief.
    s2 = second.manifest.search
    assert s2 is not None and s2.merged == ["round-1/c3", "round-1/c1"]
    merged = next(c for c in s2.candidates if c.focus == "merge")
    # Its rule edits only when the brief holds both diffs; the other two changed nothing, so it is
    # validated without screening.
    assert merged.name == "c3" and merged.changed == ["skill/SKILL.md"] and merged.chosen
    assert "the only candidate" in merged.reason and second.manifest.search.validated == ["c3"]
    # Offered once: a third round would not offer them again.
    from harnessopt.search import archive

    assert archive.archived(ledger.past_rounds(ws.repo), 4) == []
