"""Flags, `harnessopt ablate` and `harnessopt replay`, end to end on demo-like workspaces."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.store import RoundManifest
from harnessopt.workspace import flags
from harnessopt.workspace.core import Workspace
from tests.support.cli import git
from tests.support.workspace import leaky_workspace

FLAGS_YAML = """\
- name: extract
  default: "0"
  purpose: cut the capital out of a chatty reply before writing the answer
"""
EXTRACT = """    flags_read = {"extract": os.environ.get("HO_FLAG_EXTRACT")}
    log_event(args.out, "extract", flags_read=flags_read)
    if flags_read["extract"] == "1":  # a harness change guarded by its flag
        import re

        found = re.search(r"capital of .+? is (.+?)\\.", answer)
        answer = found.group(1) if found else answer
    (args.out / "answer.txt").write_text(answer)
"""


def _harbour(tmp_path: Path) -> Path:
    """A small demo workspace (5 val tasks) whose harness has a flag that fixes every val task."""
    ws = leaky_workspace(tmp_path, "unused", small=True)
    run_py = ws / "harness" / "run.py"
    text = run_py.read_text()
    assert text.count('    (args.out / "answer.txt").write_text(answer)\n') == 1
    run_py.write_text(text.replace('    (args.out / "answer.txt").write_text(answer)\n', EXTRACT))
    (ws / "harness" / "flags.yaml").write_text(FLAGS_YAML)
    git(ws, "add", "harness")
    git(ws, "commit", "-q", "-m", "harness: the extract flag")
    return ws


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harnessopt", *args], capture_output=True, text=True, timeout=600
    )


def test_flags_yaml_defaults_then_config_then_candidate(tmp_path: Path) -> None:
    (tmp_path / "flags.yaml").write_text(FLAGS_YAML + '- {name: loud, default: true, purpose: "say more"}\n')
    [extract, loud] = flags.registered(tmp_path)
    assert (extract.env, extract.default, loud.default) == ("HO_FLAG_EXTRACT", "0", "1")
    env = flags.environment(tmp_path, {"LOUD": "0"}, [("extract", "1")])
    assert env == {"HO_FLAG_EXTRACT": "1", "HO_FLAG_LOUD": "0"}
    assert flags.read_in([{"event": "a", "flags_read": {"Extract": "1"}}, {"event": "b"}]) == {"extract": "1"}


@pytest.mark.parametrize(
    "text, says",
    [
        ("- name: Bad Name\n  default: 1\n  purpose: x\n", "needs a name"),
        ("- name: ok\n  purpose: x\n", "needs a default"),
        ("- {name: a, default: 1, purpose: x}\n- {name: a, default: 0, purpose: y}\n", "registered twice"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_malformed_flags_yaml_is_named(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "flags.yaml").write_text(text)
    with pytest.raises(UserError, match=says):
        flags.registered(tmp_path)
    assert flags.environment(tmp_path, {}) == {}  # the runner goes on without defaults


def test_ablate_reports_the_paired_difference_of_a_flag(tmp_path: Path) -> None:
    ws = _harbour(tmp_path)
    done = _cli(
        "ablate", str(ws), "extract", "--sandbox", "local", "--json", "-c", "gate.confirm_flips=false"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # off: every chatty reply fails the exact match; on: the extracted capital passes
    assert (report["on_score"], report["off_score"], report["n"]) == (1.0, 0.0, 5)
    assert report["delta"] == pytest.approx(1.0) and report["verdict"] == "helps"
    assert report["runs"] == 10 and report["runs_that_read_it"] == 10
    # the count runs to the total of both sides, not one side's and then more
    counts = re.findall(r"^incumbent: (\d+)/(\d+) tasks", done.stderr, re.M)
    assert counts and {total for _, total in counts} == {"10"} and counts[-1] == ("10", "10"), done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("ablate extract: on"))
    assert "paired difference +1.000 > dead zone" in line and line.endswith("the flag helps")
    repo = Workspace.open(ws).repo
    ref = f"refs/harnessopt/ablate/extract-{vcs.head_sha(repo)[:12]}"
    assert ledger.manifest_data(str(repo.commit(ref).message))["verdict"] == "helps"
    assert git(ws, "status", "--porcelain") == ""
    # another ablation of the flag at this commit keeps the first as a parent (QA: it replaced it)
    first = git(ws, "rev-parse", ref)
    again = _cli("ablate", str(ws), "extract", "--sandbox", "local", "--on", "0", "--off", "1")
    assert again.returncode == 0, again.stderr
    assert git(ws, "log", "-1", "--format=%P", ref).split()[1:] == [first]
    verdicts = [ledger.manifest_data(str(repo.commit(c).message))["verdict"] for c in (ref, first)]
    assert verdicts == ["hurts", "helps"]
    assert "last run stopped" not in _cli("status", str(ws)).stdout  # a finished ablation stopped nothing
    # the report's adoption table lists the registered flag (no round read it yet)
    from harnessopt.reporting.data import report_data

    assert [f["name"] for f in report_data(Workspace.open(ws))["adoption"]["flags"]] == ["extract"]
    unknown = _cli("ablate", str(ws), "nope", "--sandbox", "local")
    assert unknown.returncode == 2 and "known: extract" in unknown.stderr


def test_ablate_needs_the_values_of_a_flag_that_is_not_on_or_off(tmp_path: Path) -> None:
    """The chat harness's skill_loading takes system or catalogue. With --on 1 --off 0 taken by
    default every run exited 2 before any model call, and ablate said "no measurable difference",
    asked whether the harness reads the flag and recorded that. Now it asks for the two values, and
    a measurement whose every run crashed says so and records nothing."""
    ws = _harbour(tmp_path)
    (ws / "harness" / "flags.yaml").write_text(
        FLAGS_YAML + "- {name: skill_loading, default: system, purpose: system prompt or catalogue}\n"
    )
    git(ws, "commit", "-qam", "harness: register skill_loading")
    assert "HO_FLAG_SKILL_LOADING" in (ws / "harness" / "run.py").read_text()  # the chat harness reads it
    asked = _cli("ablate", str(ws), "skill_loading", "--sandbox", "local")
    assert asked.returncode == 2 and "Traceback" not in asked.stderr, asked.stderr
    assert "defaults to 'system', not 1 or 0" in asked.stderr and "--on VALUE --off VALUE" in asked.stderr
    crashed = _cli("ablate", str(ws), "skill_loading", "--on", "1", "--off", "0", "--sandbox", "local")
    assert crashed.returncode == 2 and "Traceback" not in crashed.stderr, crashed.stderr
    assert "every run crashed, with HO_FLAG_SKILL_LOADING=1 and =0" in crashed.stderr
    assert "use system or catalogue" in crashed.stderr and "no measurable difference" not in crashed.stderr
    assert git(ws, "for-each-ref", "refs/harnessopt/ablate/") == ""  # nothing recorded


def _accept(ws: Path, k: int, old: str, new: str, delta: float) -> str:
    """Record an accepted round that replaces ``old`` by ``new`` in SKILL.md (as the loop would)."""
    opened = Workspace.open(ws)
    parent = vcs.head_sha(opened.repo)
    overlay = ws.parent / f"overlay-{k}"
    (overlay / "skill").mkdir(parents=True)
    text = (ws / "skill" / "SKILL.md").read_text()
    assert old in text
    (overlay / "skill" / "SKILL.md").write_text(text.replace(old, new))
    m = RoundManifest(round=k, status="accepted", summary=f"round {k} edit", parent=parent, delta=delta)
    sha = ledger.record_accepted(opened.repo, opened.journal, parent, overlay, ["skill"], m, new_best=True)
    git(ws, "reset", "-q", "--hard", "main")  # the tmp workspace's own checkout, as recover does
    return sha


def test_replay_revalidates_each_accepted_round_in_order_for_another_target(tmp_path: Path) -> None:
    ws = leaky_workspace(tmp_path, "unused", small=True)
    chatty = "Be friendly and helpful. Explain your answer so the user learns something."
    bare = "Reply with only the city name: no sentence, no explanation, no punctuation."
    _accept(ws, 1, chatty, bare, 0.5)
    _accept(
        ws,
        2,
        bare,
        bare + "\nA country's capital is often not its largest city: name the seat of government.",
        0.3,
    )
    no_reruns = ("-c", "gate.confirm_flips=false")  # each state's runs countable: no flip reruns
    done = _cli(
        "replay", str(ws), "--target", "scripted-demo-target-2", "--sandbox", "local", "--json", *no_reruns
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["target"] == "scripted-demo-target-2"
    r1, r2 = report["rounds"]
    # val: bolivia, brazil, cameroon, egypt, greece. Round 1 fixes egypt and greece; round 2 the
    # three whose largest city is not the capital.
    assert (r1["round"], r1["delta"], sorted(r1["fixed"])) == (1, pytest.approx(0.4), ["egypt", "greece"])
    assert (r2["round"], r2["delta"], sorted(r2["fixed"])) == (
        2,
        pytest.approx(0.6),
        ["bolivia", "brazil", "cameroon"],
    )
    for r in (r1, r2):
        assert r["verdict"] == ("still helps" if r["delta"] > r["dead_zone"] else "no measurable difference")
    assert any(
        x.startswith("replay on scripted-demo-target-2: of 2 accepted round(s)")
        for x in done.stderr.splitlines()
    )
    # three states measured, each once: round 1's commit is round 2's parent
    spend = [json.loads(x) for x in (ws / ".harnessopt" / "journal.jsonl").read_text().splitlines()]
    assert [e["verdicts"] for e in spend if e.get("phase") == "replay"] == [
        {"1": r1["verdict"], "2": r2["verdict"]}
    ]
    assert report["tokens"]["target"]["calls"] == 15  # 3 states x 5 val tasks, not 4 x 5
    assert git(ws, "status", "--porcelain") == ""
    # a second replay on that model starts from the val cache: nothing is run again
    again = _cli(
        "replay", str(ws), "--target", "scripted-demo-target-2", "--sandbox", "local", "--json", *no_reruns
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["tokens"] == {}
    assert [r["verdict"] for r in json.loads(again.stdout)["rounds"]] == [r1["verdict"], r2["verdict"]]
    # ... but not after the val tasks changed: the cache was keyed by the rounds' own val file, and
    # a replay on other val tasks read outcomes of the old ones (QA)
    val = ws / "tasks" / "val.jsonl"
    kept = val.read_text().splitlines()
    val.write_text("\n".join(kept[:5] + [kept[0].replace('"bolivia"', '"bolivia-2"', 1)]) + "\n")
    git(ws, "commit", "-qam", "val: one more task")
    changed = _cli(
        "replay", str(ws), "--target", "scripted-demo-target-2", "--sandbox", "local", "--json", *no_reruns
    )
    assert changed.returncode == 0, changed.stderr
    fresh = json.loads(changed.stdout)
    assert fresh["tokens"]["target"]["calls"] == 18 and [r["n"] for r in fresh["rounds"]] == [6, 6]
    # an uncommitted edit is refused: the states measured are commits, the scorer the tree's
    (ws / "scorer.py").write_text((ws / "scorer.py").read_text() + "\n# edited\n")
    dirty = _cli("replay", str(ws), "--target", "scripted-demo-target-3", "--sandbox", "local")
    assert dirty.returncode == 2 and "uncommitted changes (scorer.py)" in dirty.stderr, dirty.stderr


@pytest.mark.parametrize("mode, asked", [("skill", False), ("harness", True), ("joint", True)])
def test_the_brief_asks_for_a_flag_per_harness_change_where_the_harness_may_change(
    mode: str, asked: bool
) -> None:
    from harnessopt.config import OptimizerConfig
    from harnessopt.optimizer.brief import render_brief

    brief = render_brief(1, mode, ["harness/**"], OptimizerConfig())
    assert ("## Feature flags" in brief) is asked
    if asked:
        assert "harness/flags.yaml" in brief and "HO_FLAG_<NAME>" in brief and "flags_read" in brief
