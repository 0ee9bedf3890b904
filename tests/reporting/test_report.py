"""The demo run seen afterwards: projection against reality, the taxonomy and per-phase counts in
the manifests, `log` in 100 columns, `diff` naming discarded writes, `audit` progress, the report's
data, the HTML report and its plots, and the page in a real headless Chromium."""

from __future__ import annotations

import html
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.reporting.data import report_data
from harnessopt.reporting.html import render_html
from harnessopt.reporting.log import print_log
from harnessopt.workspace.core import Workspace
from tests.support.browser import Page, chromium
from tests.support.cli import cli, git
from tests.support.cli_errors import assert_user_error, snapshot


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("report") / "demo"
    r = cli("demo", target, "--sandbox", "local", timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "round 2: discarded 1 write(s) outside the whitelist: harness/NOTES.txt" in r.stdout
    return target


def test_demo_projection_is_within_ten_percent_of_the_calls_made(demo: Path) -> None:
    ws = Workspace.open(demo)
    (start,) = [e for e in ws.journal.entries() if e["phase"] == "run_start"]
    made = sum(u.calls for r in ledger.past_rounds(ws.repo) for u in r.manifest.tokens.values())
    projected = start["projected"]["calls"]
    assert abs(projected - made) <= 0.10 * made, (projected, made)
    status = cli("status", demo).stdout
    assert (
        f"last run spent:     {made} calls" in status and f"last run projected: {projected} calls" in status
    )


def test_manifests_count_phases_and_the_failure_taxonomy(demo: Path) -> None:
    r1, r2, r3 = ledger.past_rounds(Workspace.open(demo).repo)
    runs = {p: s.runs for p, s in r1.manifest.phases.items()}
    # round 1: 8 train, the incumbent on 14 val twice (the A/A noise floor), its smoke rerun of the
    # first smoke task made while the optimizer worked (the probe), smoke 5 + 9, the 7 fixed tasks
    # rerun on both sides (14), the memorised-answer check's perturbed variant of each of the 7 on
    # both sides (14), and the accept confirmed on all 14 val tasks on both sides (28)
    assert runs == {"rollout": 8, "incumbent": 28, "probe": 1, "smoke": 5, "validation": 9, "reruns": 56}
    assert "incumbent" not in r2.manifest.phases  # cached from round 1's candidate
    rollout = r1.manifest.phases["rollout"]
    assert rollout.passed == 0 and rollout.failures == {"wrong answer": 8} and rollout.turns == [1] * 8
    assert sum(s.calls for s in r1.manifest.phases.values()) == r1.manifest.tokens["target"].calls
    assert r1.manifest.repeats["egypt"] == [2, 0]  # rerun on both sides, the same each time
    assert r2.manifest.violations == ["harness/NOTES.txt"] and r3.manifest.wall_s
    assert r1.manifest.tokens["target"].cost_usd == 0.0  # the scripted model has no price


def test_log_fits_100_columns_and_diff_names_discarded_writes(demo: Path) -> None:
    buf = io.StringIO()
    print_log(Workspace.open(demo), Console(file=buf, width=100))
    lines = buf.getvalue().splitlines()
    assert max(map(len, lines)) <= 100
    header = next(line for line in lines if "status" in line)
    for col in ("val", "Δ", "zone", "+fix/-brk", "train", "cost", "viol", "summary / reason"):
        assert col in header
    row2 = next(line for line in lines if line.lstrip().startswith("2 "))
    assert "5/8" in row2 and "$0.00" in row2 and " 1 " in row2  # train pass, cost, one discarded write
    piped = cli("log", demo)  # not a terminal: still 100 columns
    assert max(map(len, piped.stdout.splitlines())) <= 100 and "Name the seat of government" in piped.stdout
    d2 = cli("diff", demo, "2").stdout
    assert "# discarded 1 write(s) outside the whitelist" in d2 and "#   harness/NOTES.txt" in d2


@pytest.fixture(scope="module")
def audited(demo: Path) -> subprocess.CompletedProcess:
    """The demo workspace audited once (an audit of the same pair again is refused): the report's
    tests need its plot, whichever of them runs first."""
    return cli("audit", demo, "--sandbox", "local", timeout=900)


def test_audit_shows_progress(audited: subprocess.CompletedProcess) -> None:
    r = audited
    assert r.returncode == 0, r.stderr
    # one count of both sides' runs, announced whole: not "10/10", then "20/20"
    assert "audit: 20/20 tasks" in r.stdout and "/10 tasks" not in r.stdout and "held-out gain" in r.stdout


@pytest.mark.usefixtures("audited")
def test_report_data_of_the_demo(demo: Path) -> None:
    data = report_data(Workspace.open(demo))
    assert data["outcomes"] == {"improved": 2, "regressed": 0, "no change": 1, "not measured": 0}
    m = data["matrix"]
    assert m["rounds"] == [1, 2, 3] and len(m["tasks"]) == 14
    assert m["cells"]["egypt"] == {1: "fixed", 2: "unchanged", 3: "unchanged"}
    assert m["cells"]["brazil"][3] == "fixed"
    assert [row["train_pass_rate"] for row in data["rounds"]] == [0.0, 5 / 8, 5 / 8]
    # round 1's failed runs: 8 train, 2 x 14 incumbent (A/A), the incumbent's probe, 3 smoke + 4
    # validation, and 35 reruns: the incumbent's 7 flip reruns, its 7 perturbed variants of the
    # memorised-answer check, then the confirmation's 14 incumbent and 7 candidate runs
    assert data["taxonomy"]["rounds"][0]["failures"] == {"wrong answer": 79}
    assert data["flaky"] == []  # the scripted model answers the same every time
    (audit,) = data["audits"]
    assert audit["claimed_val_gain"] == 1.0 and audit["gain"] is not None
    rule1 = next(u for u in data["adoption"]["rules"] if u["round"] == 1)
    assert "only the city name" in rule1["text"]
    assert rule1["trajectories"] == 16 and rule1["saw"] == 16  # rounds 2 and 3 had it in their prompt
    flags = {f["name"]: f for f in data["adoption"]["flags"]}
    assert set(flags) == {"stream", "skill_loading"}  # the chat template's flags.yaml
    flag = flags["stream"]
    # the chat template registers stream (default "0", harness/flags.yaml) and reports reading it
    assert (
        flag["name"] == "stream" and flag["used"] == flag["trajectories"] > 0 and flag["values"] == {"0": 24}
    )
    assert "+Reply with only the city name" in data["diffs"][1]
    # the rounds table says what log says (its confirmation was dropped), and where main is (QA)
    assert "confirmed: " in data["rounds"][0]["reason"]
    assert data["incumbent"].startswith("incumbent: ") and data["incumbent"].endswith("= round 3")
    # status's lines on the gate, the noise floor among them (QA: the report never mentioned it);
    # the demo's scripted target fails every val task in the A/A test, so it measured nothing
    gate = data["gate"]
    assert any(line.startswith("noise floor measured nothing: all 28 runs") for line in gate), gate
    assert gate[-1].startswith("gate decisions: 3, false-accept budget spent")
    assert all(f'<p class="gate">{html.escape(line)}</p>' in render_html(data, {}) for line in gate)


def test_the_report_says_main_is_on_a_rollback(demo: Path, tmp_path: Path) -> None:
    """After `rollback 1` with no round since, status said "(a rollback to round 1)"; the report
    said nothing, and a reader took round 3's skill to be live (QA)."""
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(demo, ws, symlinks=True)
    r = cli("rollback", ws, "1")
    assert r.returncode == 0, r.stderr
    said = report_data(Workspace.open(ws))["incumbent"]
    assert "rollback to round 1" in said, said
    assert said in render_html(report_data(Workspace.open(ws)), {})


def test_report_without_matplotlib_says_what_to_install(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harnessopt.reporting.html import write_report

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"pip install 'harnessopt\[report\]'"):
        write_report(Workspace.open(demo), demo / "nowhere")


@pytest.mark.usefixtures("audited")
def test_report_html_and_plots(demo: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report is the optional extra harnessopt[report]")
    r = cli("report", demo, "--out", tmp_path / "rep")
    assert r.returncode == 0, r.stderr
    pngs = {p.name for p in (tmp_path / "rep").glob("*.png")}
    assert pngs == {f"{n}.png" for n in ("scores", "matrix", "cost", "outcomes", "audit", "taxonomy")}
    page = (tmp_path / "rep" / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 6 and "<script" not in page and "http" not in page
    assert "harness/NOTES.txt" in page and "Flaky val tasks" in page


@pytest.mark.usefixtures("audited")
def test_report_out_as_a_page_path(demo: Path, tmp_path: Path) -> None:
    """``--out run1.html`` is the page itself (not a directory named so), its plots beside it with the
    page's stem, so a second report in the same directory keeps its own; an --out under a file is
    one line, exit 2, nothing written."""
    pytest.importorskip("matplotlib", reason="the report is the optional extra harnessopt[report]")
    for stem in ("run1", "run2"):
        r = cli("report", demo, "--out", tmp_path / "reports" / f"{stem}.html")
        assert r.returncode == 0, r.stderr
        assert f"{stem}.html" in r.stdout
    out = tmp_path / "reports"
    assert (out / "run1.html").is_file() and (out / "run2.html").is_file()
    names = {p.name for p in out.iterdir()}
    for stem in ("run1", "run2"):
        assert {
            f"{stem}-{n}.png" for n in ("scores", "matrix", "cost", "outcomes", "audit", "taxonomy")
        } <= names
    assert "report.html" not in names
    (tmp_path / "afile").write_text("x")
    before = snapshot(tmp_path)
    assert_user_error(cli("report", demo, "--out", tmp_path / "afile" / "r.html"), "is a file", ".html")
    assert_user_error(cli("report", demo, "--out", tmp_path / "afile"), "is a file")
    assert_user_error(cli("report", demo, "--out", tmp_path / "afile" / "sub" / "r.html"), "is a file")
    (tmp_path / "page.html").mkdir()  # a folder named like a page: a traceback after the plots were written
    assert_user_error(cli("report", demo, "--out", tmp_path / "page.html"), "page.html is a directory")
    assert snapshot(tmp_path) == before and list((tmp_path / "page.html").iterdir()) == []
    # the kernel's directories exist and take no file: one line, not a traceback
    assert_user_error(cli("report", demo, "--out", "/proc"), "no file can be made in /proc", "write to")
    assert_user_error(cli("report", demo, "--out", "/proc/self/r.html"), "no file can be made in /proc/self")
    # inside the workspace its files blocked the next run (uncommitted changes); '' was the cwd (QA)
    status = git(demo, "status", "--porcelain")
    for inside in (demo, demo / "skill", demo / "page.html"):
        assert_user_error(cli("report", demo, "--out", inside), "is inside the workspace")
    assert_user_error(cli("report", demo, "--out", ""), "--out is empty")
    assert git(demo, "status", "--porcelain") == status
    assert cli("report", demo, "--out", demo / ".harnessopt" / "r2").returncode == 0


@pytest.mark.browser
@pytest.mark.usefixtures("audited")
def test_report_in_headless_chromium(demo: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report is the optional extra harnessopt[report]")
    if not chromium():  # CI installs it (.ci/browser_setup.sh): a missing browser fails there
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "no chromium on PATH; run .ci/browser_setup.sh"
        )
    assert cli("report", demo, "--out", tmp_path).returncode == 0
    page = Page()
    try:
        page.open((tmp_path / "report.html").as_uri())
        images = page.evaluate(
            "JSON.stringify([...document.images].map(i => [i.id, i.complete, i.naturalWidth, i.naturalHeight]))"
        )
        title = page.evaluate("document.querySelector('h1').textContent")
        rows = page.evaluate("document.querySelectorAll('table')[0].tBodies[0].rows.length")
        errors = list(page.errors)
    finally:
        page.close()
    sizes = {name: (done, w, h) for name, done, w, h in json.loads(images)}
    assert set(sizes) == {f"plot-{n}" for n in ("scores", "matrix", "cost", "outcomes", "audit", "taxonomy")}
    assert all(done and w > 100 and h > 100 for done, w, h in sizes.values()), sizes
    assert "harnessopt report" in title and rows == 3
    assert errors == []


@pytest.mark.browser
def test_a_long_summary_wraps_inside_the_page(demo: Path, tmp_path: Path) -> None:
    """One 600-character word in a summary widened the rounds table past the page: every row's
    reason was cut off at the right edge (QA). Prose cells break anywhere; the short cells (a
    status, a count) do not break inside a word."""
    if not chromium():
        (pytest.fail if os.environ.get("CI") else pytest.skip)(
            "no chromium on PATH; run .ci/browser_setup.sh"
        )
    data = report_data(Workspace.open(demo))
    data["rounds"][0]["summary"] = "<script>alert(1)</script> " + "x" * 600
    page_file = tmp_path / "long.html"
    page_file.write_text(render_html(data, {}), encoding="utf-8")
    lines_of = (  # the line boxes a cell's text takes
        "(r, c) => { const range = document.createRange();"
        " range.selectNodeContents(document.querySelectorAll('table')[0].tBodies[0].rows[r].cells[c]);"
        " return new Set([...range.getClientRects()].map(x => Math.round(x.top))).size; }"
    )
    page = Page()
    try:
        page.viewport(1200, 1400)  # the width a reader's window has (the QA's)
        page.open(page_file.as_uri())
        wide = page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
        status_lines = page.evaluate(f"({lines_of})(0, 1)")
        summary_lines = page.evaluate(f"({lines_of})(0, 10)")  # the last column: summary / reason
        scripts = page.evaluate("document.scripts.length")
    finally:
        page.close()
    assert wide is False and scripts == 0
    assert status_lines == 1, status_lines  # "accepted" on one line, not a letter a line
    assert summary_lines > 3, summary_lines  # the long word wrapped within the page
