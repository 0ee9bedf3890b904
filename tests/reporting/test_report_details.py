"""Report details a user reads: intervals within the possible range, a $0 run's dollar axis, a
rejected candidate visible on the incumbent's marker, a rule no text can check not shown as 0%."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessopt.reporting.adoption import RuleUse, measurable, shows
from harnessopt.reporting.data import _audit
from harnessopt.reporting.html import _adoption

plt = pytest.importorskip("matplotlib.pyplot", reason="the report is the optional extra harnessopt[report]")


def _row(k: int, status: str, val: float, inc: float) -> dict:
    return {"round": k, "status": status, "val_score": val, "incumbent_score": inc, "dead_zone": 0.2,
            "tokens": {"target": 100, "optimizer": 50}, "role_cost_usd": {"target": 0.0, "optimizer": 0.0}}  # fmt: skip


def test_an_audit_interval_is_clipped_to_the_possible_gain() -> None:
    audit = _audit({"gain": 1.0, "interval": [0.572, 1.428], "n": 10})
    assert audit["interval"] == [0.572, 1.0]
    from harnessopt.reporting.html import plot_audit

    fig = plot_audit(plt, {"audits": [{**audit, "interval": [0.572, 1.428], "claimed_val_gain": 1.0}]})
    (bars,) = [c for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]
    top = max(float(y) for seg in bars.lines[2][0].get_segments() for _x, y in seg)
    assert top <= 1.0
    plt.close(fig)


def test_a_zero_dollar_run_has_an_axis_from_zero() -> None:
    from harnessopt.reporting.html import plot_cost

    fig = plot_cost(plt, {"rounds": [_row(1, "accepted", 1.0, 0.5), _row(2, "rejected", 1.0, 1.0)]})
    low, high = fig.axes[1].get_ylim()
    assert low == 0 and high > 0
    plt.close(fig)


def test_a_rejected_candidate_is_drawn_over_the_incumbent() -> None:
    from harnessopt.reporting.html import plot_scores

    fig = plot_scores(plt, {"rounds": [_row(1, "accepted", 1.0, 0.5), _row(2, "rejected", 1.0, 1.0)]})
    ax = fig.axes[0]
    (incumbent,) = [line for line in ax.get_lines() if line.get_label() == "incumbent"]
    rejected = next(c for c in ax.collections if c.get_label() == "candidate (rejected)")
    assert rejected.get_zorder() > incumbent.get_zorder() and incumbent.get_markerfacecolor() == "none"
    plt.close(fig)


def test_the_dead_zone_and_the_score_axis_end_at_one() -> None:
    """A dead zone above an incumbent at 1.0 reached past any score (the band drawn to 1.2)."""
    from harnessopt.reporting.html import plot_scores

    rows = [
        {**_row(1, "accepted", 1.0, 0.5), "dead_zone": 0.2},
        {**_row(2, "rejected", 1.0, 1.0), "dead_zone": 0.2},
    ]
    fig = plot_scores(plt, {"rounds": rows})
    ax = fig.axes[0]
    assert ax.get_ylim()[1] <= 1.05
    (band,) = [c for c in ax.containers if c.get_label() == "dead zone"]
    assert max(box.get_y() + box.get_height() for box in band) <= 1.0
    plt.close(fig)


def test_the_dead_zone_of_a_lone_round_is_a_box_around_it() -> None:
    """With one round that reached the gate the band stepped between rounds had no width: the
    legend said "dead zone" over a hairline (QA). Each round has its box, inside the axis."""
    from harnessopt.reporting.html import plot_scores

    fig = plot_scores(plt, {"rounds": [{**_row(1, "rejected", 0.3, 0.25), "dead_zone": 0.2}]})
    ax = fig.axes[0]
    ((box,),) = [list(c) for c in ax.containers if c.get_label() == "dead zone"]
    assert box.get_width() >= 0.5 and box.get_y() == 0.25 and abs(box.get_height() - 0.2) < 1e-9
    left, right = ax.get_xlim()
    assert left < box.get_x() and box.get_x() + box.get_width() < right
    plt.close(fig)


def test_a_rule_no_text_can_check_is_not_reported_as_unused() -> None:
    rule = "Reply with the word only."
    assert not measurable(rule) and not shows(rule, "apple")
    assert measurable("Use `pdftotext` first") and measurable("Mention the capital and the country")
    use = RuleUse(1, "skill/SKILL.md", rule, trajectories=8, saw=8, showed=None)
    html = _adoption({"rules": [use.__dict__], "flags": []})
    assert "not measurable from text" in html and "0 (0%)" not in html


def test_a_flags_values_read_as_counts_not_a_python_dict() -> None:
    flag = {"name": "stream", "trajectories": 15, "used": 15, "values": {"0": 3, "1": 12}}
    unread = {"name": "self_check", "trajectories": 15, "used": 0, "values": {}}
    html = _adoption({"rules": [], "flags": [flag, unread]})
    assert "1 (12 runs), 0 (3 runs)" in html and "none read" in html
    assert "{" not in html and "&#x27;" not in html


def test_a_lone_round_of_triggering_draws_the_incumbents_point() -> None:
    """The incumbent was a line with no marker: one measured round (or one between rounds that
    measured nothing) drew nothing, so log's "precision 0.62->1.00" showed only the 1.00 (QA)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harnessopt.reporting.triggering import plot_triggering

    side = {"precision": 0.62, "recall": 1.0}
    data = {
        "rounds": [
            {"round": 1, "trigger": {"incumbent": side, "candidate": {"precision": 1.0, "recall": 1.0}}}
        ]
    }
    fig = plot_triggering(plt, data)
    drawn = [
        (line.get_label(), line.get_marker(), list(line.get_ydata())) for line in fig.axes[0].get_lines()
    ]
    assert ("precision (incumbent)", "s", [0.62]) in drawn and ("recall (incumbent)", "s", [1.0]) in drawn
    plt.close(fig)


def test_triggering_markers_of_equal_values_do_not_hide_each_other() -> None:
    """Precision and recall are often both 1.00: the markers drawn second hid the first, and the
    legend sat on the points (QA). Each metric is drawn a little to its side of the round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from harnessopt.reporting.triggering import plot_triggering

    both = {"precision": 1.0, "recall": 1.0}
    data = {"rounds": [{"round": k, "trigger": {"incumbent": both, "candidate": both}} for k in (1, 2)]}
    fig = plot_triggering(plt, data)
    ax = fig.axes[0]
    xs = {line.get_label(): list(line.get_xdata()) for line in ax.get_lines()}
    assert xs["recall (incumbent)"] != xs["precision (incumbent)"]
    points = [tuple(map(tuple, c.get_offsets())) for c in ax.collections]
    assert len(points) == 2 and points[0] != points[1]  # the candidates' markers, one set a metric
    assert all(abs(x - k) < 0.2 for k, x in zip((1, 2), xs["recall (incumbent)"], strict=True))
    plt.close(fig)


def test_a_report_before_any_round_says_nothing_ran_once(tmp_path: Path) -> None:
    """Right after init the page said no val task disagreed across reruns (none had run), and "no
    runs counted yet" twice, in an empty plot and under it (QA)."""
    from harnessopt.reporting.data import report_data
    from harnessopt.reporting.html import render_html
    from harnessopt.workspace.core import Workspace
    from tests.support.workspace import make_ws

    page = render_html(report_data(Workspace.open(make_ws(tmp_path))), {"taxonomy": tmp_path / "t.png"})
    assert "no val task was rerun yet" in page and "disagreed with itself" not in page
    assert page.count("no runs counted yet") == 1 and 'id="plot-taxonomy"' not in page
