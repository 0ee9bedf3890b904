"""``harnessopt report WS [--out DIR]``: one self-contained HTML file plus its plots as PNG files.

The plots (matplotlib, the optional extra ``harnessopt[report]``) are written beside the page
and embedded in it as data URIs, so the HTML alone can be mailed or attached; the page has no
script and loads nothing from the network. The numbers come from ``report_data``.
"""

from __future__ import annotations

import base64
import html
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.ledger.journal import STATE_DIR
from harnessopt.ledger.manifest import judged
from harnessopt.reporting.data import CELLS, OUTCOMES, report_data
from harnessopt.reporting.triggering import plot_triggering
from harnessopt.workspace.core import Workspace

COLORS = {"fixed": "#2e7d32", "broken": "#c62828", "unchanged": "#cfd8dc", "absent": "#ffffff"}
ROLE_COLORS = {"target": "#1565c0", "optimizer": "#ef6c00"}
OUTCOME_COLORS = {
    "improved": "#2e7d32",
    "regressed": "#c62828",
    "no change": "#90a4ae",
    "not measured": "#ffb300",
}
INSTALL_HINT = "harnessopt report draws its plots with matplotlib: pip install 'harnessopt[report]'"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_report(ws: Workspace, out: Path | None = None) -> Path:
    """Write ``report.html`` and its PNG plots to the directory ``out`` (default
    ``WS/.harnessopt/report``); an ``out`` ending in ``.html`` is the page itself, its plots beside
    it as ``STEM-NAME.png`` (so two reports in one directory keep their own plots)."""
    plt = _pyplot()
    page, prefix = page_path(ws, out)
    out = page.parent
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # a directory no file can be made in (/proc, /sys)
            pass
    except (FileExistsError, NotADirectoryError):  # out, or a folder above it, is a file
        raise UserError(
            f"--out: {out} or a folder above it is a file, not a directory; pass a directory or a path "
            "ending in .html"
        ) from None
    except FileNotFoundError:  # a directory of the kernel's, where no file can be made
        raise UserError(f"--out: no file can be made in {out}; pass a directory you can write to") from None
    if page.is_dir():  # --out x.html names a folder: nothing is written, not the plots either
        raise UserError(
            f"--out: {page} is a directory; pass a new file name ending in .html, or the directory"
        )
    data = report_data(ws)
    plots: dict[str, Path] = {}
    for name, draw in PLOTS.items():
        fig = draw(plt, data)
        if fig is None:
            continue
        path = out / f"{prefix}{name}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        plots[name] = path
    page.write_text(render_html(data, plots), encoding="utf-8")
    return page


def page_path(ws: Workspace, out: Path | None) -> tuple[Path, str]:
    """Where the page goes and the prefix of its plots' file names."""
    if out is None:
        return ws.root / STATE_DIR / "report" / "report.html", ""
    out = Path(out)
    where = out.resolve()
    if where.is_relative_to(ws.root) and not where.is_relative_to(ws.root / STATE_DIR):
        raise UserError(
            f"--out {out} is inside the workspace, whose next run refuses the files it would leave "
            f"(uncommitted changes); write it outside, or under {ws.root / STATE_DIR} (the default)"
        )
    if out.suffix.lower() in (".html", ".htm"):
        return out, f"{out.stem}-"
    return out / "report.html", ""


# --------------------------------------------------------------------------- plots


def _empty(fig: Any, ax: Any, text: str) -> Any:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def plot_scores(plt: Any, data: dict[str, Any]) -> Any:
    """Candidate and incumbent val score per round, the dead zone above the incumbent shaded."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    rows = [r for r in data["rounds"] if r["val_score"] is not None]
    if not rows:
        return _empty(fig, ax, "no round reached the gate yet")
    ks = [r["round"] for r in rows]
    inc = [r["incumbent_score"] for r in rows]
    # no score is above 1; objective both has a zone per family, none for the pooled score
    zone = [min(1.0, r["incumbent_score"] + (r["dead_zone"] or 0.0)) for r in rows]
    # a box on each round: a band stepped between rounds had no width with one round (a hairline,
    # QA) and half a box at either end
    heights = [z - i for z, i in zip(zone, inc, strict=True)]
    ax.bar(ks, heights, bottom=inc, width=0.8, alpha=0.25, color="#90a4ae", label="dead zone", zorder=1)
    ax.set_xlim(min(ks) - 0.6, max(ks) + 0.6)
    # The incumbent hollow and below, the candidates large and on top: a rejected candidate that
    # scored the incumbent's score stays visible on its square.
    ax.plot(ks, inc, "s-", color="#455a64", markerfacecolor="none", zorder=2, label="incumbent")
    for status, marker, color in (("accepted", "o", "#2e7d32"), ("rejected", "X", "#c62828")):
        pts = [(r["round"], r["val_score"]) for r in rows if r["status"] == status]
        if pts:
            ax.scatter(
                *zip(*pts, strict=True),
                marker=marker,
                s=70,
                color=color,
                edgecolors="white",
                linewidths=0.8,
                zorder=4,
                label=f"candidate ({status})",
            )
    ax.set_xlabel("round")
    ax.set_ylabel("val score")
    ax.set_xticks(ks)
    ax.set_ylim(top=min(ax.get_ylim()[1], 1.05))  # a mean score ends at 1
    ax.legend(fontsize=8, loc="best")
    return fig


def plot_matrix(plt: Any, data: dict[str, Any]) -> Any:
    """Val task x round: fixed, broken or unchanged."""
    m = data["matrix"]
    fig, ax = plt.subplots(
        figsize=(max(4.0, 1.0 + 0.5 * len(m["rounds"])), max(2.5, 0.22 * len(m["tasks"]) + 1))
    )
    if not m["rounds"] or not m["tasks"]:
        return _empty(fig, ax, "no round reached the gate yet")
    from matplotlib.colors import ListedColormap

    index = {c: i for i, c in enumerate(CELLS)}
    grid = [[index[m["cells"][t].get(k, "unchanged")] for k in m["rounds"]] for t in m["tasks"]]
    ax.imshow(
        grid, aspect="auto", cmap=ListedColormap([COLORS[c] for c in CELLS]), vmin=0, vmax=len(CELLS) - 1
    )
    ax.set_xticks(range(len(m["rounds"])), [str(k) for k in m["rounds"]])
    ax.set_yticks(range(len(m["tasks"])), m["tasks"], fontsize=7)
    ax.set_xlabel("round")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=COLORS[c], label=c) for c in CELLS],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    return fig


def plot_cost(plt: Any, data: dict[str, Any]) -> Any:
    """Tokens per round and role (bars) and dollars per round and role (lines)."""
    rows = data["rounds"]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 4.5), sharex=True)
    if not rows:
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(7, 2))
        return _empty(fig, ax, "no rounds yet")
    ks = [r["round"] for r in rows]
    below = [0] * len(rows)
    for role, color in ROLE_COLORS.items():
        vals = [r["tokens"].get(role, 0) for r in rows]
        top.bar(ks, vals, bottom=below, color=color, label=role)
        below = [a + b for a, b in zip(below, vals, strict=True)]
        bottom.plot(ks, [r["role_cost_usd"].get(role) or 0.0 for r in rows], "o-", color=color, label=role)
    top.set_ylabel("tokens")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, not on one (QA)
    bottom.set_ylabel("US dollars")
    dollars = [r["role_cost_usd"].get(role) or 0.0 for r in rows for role in ROLE_COLORS]
    if max(dollars, default=0.0) > 0:
        bottom.set_ylim(bottom=0)  # dollars are never negative
    else:  # no priced call: an axis from $0, and say why it is flat
        bottom.set_ylim(0, 1)
        bottom.text(0.5, 0.5, "$0: no call had a price", ha="center", va="center", transform=bottom.transAxes)
    bottom.set_xlabel("round")
    bottom.set_xticks(ks)
    fig.tight_layout()
    return fig


def plot_outcomes(plt: Any, data: dict[str, Any]) -> Any:
    """Share of proposals that improved, regressed, changed nothing, or were not measured."""
    counts = data["outcomes"]
    total = sum(counts.values())
    fig, ax = plt.subplots(figsize=(6, 2.2))
    if not total:
        return _empty(fig, ax, "no proposals yet")
    left = 0.0
    for name in OUTCOMES:
        share = counts[name] / total
        if share:
            ax.barh([0], [share], left=left, color=OUTCOME_COLORS[name], label=f"{name} ({counts[name]})")
            left += share
    ax.set_xlim(0, 1)
    ax.set_yticks([])
    ax.set_xlabel("share of proposals")
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    return fig


def plot_audit(plt: Any, data: dict[str, Any]) -> Any:
    """The val-claimed gain beside the audit's held-out gain (with its 95% interval)."""
    audits = [a for a in data["audits"] if a.get("gain") is not None]
    if not audits:
        return None
    a = audits[-1]
    lo, hi = (max(-1.0, min(1.0, x)) for x in (a.get("interval") or (a["gain"], a["gain"])))
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.bar([0, 1], [a.get("claimed_val_gain") or 0.0, a["gain"]], color=["#90a4ae", "#1565c0"])
    ax.errorbar([1], [a["gain"]], yerr=[[a["gain"] - lo], [hi - a["gain"]]], color="black", capsize=6)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([0, 1], ["claimed on val", "held-out (test)"])
    ax.set_ylabel("gain over round 0")
    return fig


def plot_taxonomy(plt: Any, data: dict[str, Any]) -> Any:
    """Failure classes per round as a share of all runs (a stack up to the failure rate)."""
    rows = data["taxonomy"]["rounds"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    if not rows:
        return _empty(fig, ax, "no runs counted yet")
    ks = [r["round"] for r in rows]
    below = [0.0] * len(rows)
    cmap = plt.get_cmap("tab10")
    for i, kind in enumerate(data["taxonomy"]["classes"]):
        vals = [r["shares"].get(kind, {}).get("of_runs", 0.0) for r in rows]
        if any(vals):
            ax.bar(ks, vals, bottom=below, color=cmap(i), label=kind)
            below = [a + b for a, b in zip(below, vals, strict=True)]
    ax.set_ylim(0, 1)
    ax.set_xlabel("round")
    ax.set_ylabel("share of all target runs")
    ax.set_xticks(ks)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


PLOTS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "scores": plot_scores,
    "triggering": plot_triggering,
    "matrix": plot_matrix,
    "cost": plot_cost,
    "outcomes": plot_outcomes,
    "audit": plot_audit,
    "taxonomy": plot_taxonomy,
}


# --------------------------------------------------------------------------- page

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; width: 100%; }
td, th { padding: 2px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
td.t { overflow-wrap: anywhere; }
td.n { white-space: nowrap; } td:last-child { min-width: 14em; } table { font-size: 13px; }
th { text-align: left; background: #fafafa; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; display: block; margin: .5em 0; } pre { background: #f6f8fa; padding: .8em; overflow-x: auto; }
.accepted { color: #2e7d32; } .rejected { color: #c62828; } .noop { color: #f9a825; } .failed { color: #6a1b9a; }
.muted { color: #777; }
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _num(x: Any, fmt: str = ".3f") -> str:
    return "" if x is None else format(x, fmt)


def _table(
    head: list[str], rows: list[list[str]], numeric: set[int] | None = None, prose: set[int] | None = None
) -> str:
    """``numeric`` columns align right; ``prose`` columns (summaries, reasons, titles: the
    optimizer's or the model's text) break anywhere, so one long word cannot widen the table past
    the page."""
    numeric, prose = numeric or set(), prose or set()

    def cell(i: int, c: str) -> str:
        return (
            f'<td class="n">{c}</td>'
            if i in numeric
            else f'<td class="t">{c}</td>'
            if i in prose
            else f"<td>{c}</td>"
        )

    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(plots: dict[str, Path], name: str, alt: str) -> str:
    if name not in plots:
        return ""
    data = base64.b64encode(plots[name].read_bytes()).decode("ascii")
    return f'<img id="plot-{name}" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def render_html(data: dict[str, Any], plots: dict[str, Path]) -> str:
    """The page: rounds, plots, failure taxonomy, flaky tasks, adoption, accepted diffs."""
    cfg = data["config"]
    parts = [
        f"<h1>harnessopt report: {_e(data['workspace'])}</h1>",
        f'<p class="muted">mode {_e(cfg["mode"])}, template {_e(cfg["template"])}, target {_e(cfg["target"])}, '
        f"optimizer {_e(cfg['optimizer'])}, batch {_e(cfg['batch_size'])}, epochs {_e(cfg['epochs'])}</p>",
    ]
    parts.append(f"<p>{_e(data['incumbent'])}</p>")  # main may be on a rollback, not the last round
    parts += [f"<p>{_e(line)}</p>" for line in data["spend"]]
    parts += [f'<p class="gate">{_e(line)}</p>' for line in data.get("gate", [])]
    parts += ["<h2>Rounds</h2>", _rounds_table(data["rounds"])]
    parts += _candidates(data["rounds"])
    parts += [
        "<h2>Val score per round</h2>",
        _img(plots, "scores", "candidate and incumbent val score per round"),
    ]
    if "triggering" in plots:
        parts += [
            "<h2>Triggering per round</h2>",
            _img(plots, "triggering", "precision and recall of triggering"),
        ]
    parts += [
        "<h2>Tasks fixed and broken</h2>",
        _img(plots, "matrix", "val task by round: fixed, broken, unchanged"),
    ]
    parts += ["<h2>Tokens and dollars</h2>", _img(plots, "cost", "tokens and dollars per round and role")]
    parts += ["<h2>What the proposals did</h2>", _img(plots, "outcomes", "share of proposals by outcome")]
    if "audit" in plots:
        parts += [
            "<h2>Claimed on val against held out</h2>",
            _img(plots, "audit", "val-claimed and held-out gain"),
            *[  # a forced audit is a further look at the test split: the looks before it, said
                f'<p class="muted">{_e(_earlier_looks(a))}</p>' for a in data["audits"] if a.get("earlier")
            ],
        ]
    parts += [
        "<h2>Failure taxonomy</h2>",
        # no runs: the table's line says so once (the empty plot said it too, QA)
        _img(plots, "taxonomy", "failure classes per round") if data["taxonomy"]["rounds"] else "",
        _taxonomy(data),
    ]
    parts += ["<h2>Flaky val tasks</h2>", _flaky(data["flaky"], ran=bool(data["rounds"]))]
    parts += ["<h2>Are accepted edits used?</h2>", _adoption(data["adoption"])]
    parts += ["<h2>Accepted changes</h2>"]
    parts += [f"<h3>round {_e(k)}</h3><pre>{_e(d)}</pre>" for k, d in data["diffs"].items()] or [
        '<p class="muted">no accepted round yet</p>'
    ]
    body = "\n".join(p for p in parts if p)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>harnessopt report</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _rounds_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="muted">no rounds yet</p>'
    head = [
        "#",
        "status",
        "val",
        "incumbent",
        "Δ",
        "dead zone",
        "fixed/broken",
        "train pass",
        "cost",
        "discarded",
        "summary / reason",
    ]
    body = []
    for r in rows:
        rate = r["train_pass_rate"]
        body.append(
            [
                _e(r["round"]),
                f'<span class="{_e(r["status"])}">{_e(r["status"])}</span>',
                _num(r["val_score"]),
                _num(r["incumbent_score"]),
                _num(r["delta"], "+.3f"),
                _num(r["dead_zone"]),
                f"+{len(r['fixed'])}/-{len(r['broken'])}" if r["delta"] is not None else "",
                "" if rate is None else f"{rate:.0%}",
                "" if r["cost_usd"] is None else f"${r['cost_usd']:.4f}",
                _e(", ".join(r["violations"])),
                f'{_e(r["summary"])}<br><span class="muted">{_e(r["reason"])}</span>',
            ]
        )
    return _table(head, body, numeric={0, 2, 3, 4, 5, 7, 8}, prose={len(head) - 2, len(head) - 1})


def _candidates(rows: list[dict[str, Any]]) -> list[str]:
    """Rounds with several candidates: each one, its screen result on train and why it was or was
    not validated (docs/optimizer.md, "Search")."""
    searched = [r for r in rows if r["candidates"]]
    if not searched:
        return []
    head = [
        "round",
        "candidate",
        "aimed at",
        "train Δ",
        "won/lost",
        "checkpoint",
        "validated",
        "why",
        "title",
        "optimizer tokens",
        "ref",
    ]
    body = []
    for r in searched:
        for c in r["candidates"]:
            screened = c["mean_delta"] is not None
            body.append(
                [
                    _e(r["round"]),
                    _e(c["name"]),
                    _e(c["focus"]),
                    _num(c["mean_delta"], "+.3f"),
                    f"{len(c['wins'])}/{len(c['losses'])}" if screened else "",
                    _num(c.get("checkpoint"), ".3f"),
                    "yes" if c["chosen"] else "no",
                    _e(
                        c["reason"]
                        + (f"; {v}" if (v := judged(c.get("verdict", ""), c.get("gate_alpha"))) else "")
                    ),
                    _e(c["title"]),
                    _e(f"{c['optimizer_tokens']:,}"),
                    f"<code>{_e(c['ref'])}</code>" if c["ref"] else "",
                ]
            )
    split = [
        f"round {r['round']}: alpha split {r['alpha_split']} ways" for r in searched if r["alpha_split"] > 1
    ]
    note = f'<p class="muted">{_e("; ".join(split))}</p>' if split else ""
    return ["<h2>Candidates</h2>", _table(head, body, numeric={0, 3, 5, 9}, prose={7, 8, 10}) + note]


def _taxonomy(data: dict[str, Any]) -> str:
    rows = data["taxonomy"]["rounds"]
    if not rows:
        return '<p class="muted">no runs counted yet</p>'
    classes = [c for c in data["taxonomy"]["classes"] if any(c in r["failures"] for r in rows)]
    head = ["round", "runs", "failed", *classes, "turns (mean / max)", "looping runs"]
    body = []
    for r in rows:
        failed = sum(r["failures"].values())
        cells = [
            f"{r['failures'][c]} ({r['shares'][c]['of_failures']:.0%} of failures, {r['shares'][c]['of_runs']:.0%} of runs)"
            if c in r["failures"]
            else ""
            for c in classes
        ]
        turns = f"{r['turns_mean']:.1f} / {r['turns_max']}" if r["turns_mean"] is not None else ""
        body.append([_e(r["round"]), _e(r["runs"]), _e(failed), *cells, turns, _e(r["looping"])])
    return _table(head, body, numeric={0, 1, 2})


def _earlier_looks(audit: dict[str, Any]) -> str:
    gains = ", ".join(
        f"{e['gain']:+.3f}" if isinstance(e.get("gain"), int | float) else "?" for e in audit["earlier"]
    )
    return (
        f"the audit of {str(audit.get('best') or '?')[:10]} ({audit['gain']:+.3f}) was forced: the test split "
        f"was looked at {len(audit['earlier'])} time(s) before, which gave {gains}"
    )


def _flaky(rows: list[dict[str, Any]], ran: bool = True) -> str:
    if not ran:  # before any round: no rerun to disagree (it said none disagreed, QA)
        return '<p class="muted">no val task was rerun yet</p>'
    if not rows:
        return '<p class="muted">no val task disagreed with itself across identical reruns (epochs, the gate\'s reruns)</p>'
    body = [[_e(r["task"]), _e(r["groups"]), _e(r["flipped"]), f"{r['rate']:.0%}"] for r in rows]
    return _table(["val task", "rerun groups", "disagreed", "flip rate"], body, numeric={1, 2, 3})


def _adoption(uses: dict[str, Any]) -> str:
    out = []
    if uses["rules"]:
        body = [
            [
                _e(u["round"]),
                _e(u["path"]),
                _e(u["text"]),
                _e(u["trajectories"]),
                _share(u["saw"], u["trajectories"]),
                _share(u["showed"], u["trajectories"])
                if u["showed"] is not None
                else "not measurable from text",
            ]
            for u in uses["rules"]
        ]
        out.append(
            _table(
                ["round", "file", "rule", "later trajectories", "saw it", "showed it"],
                body,
                numeric={3, 4, 5},
            )
        )
    else:
        out.append('<p class="muted">no rule added by an accepted round yet</p>')
    if uses["flags"]:
        body = [
            [_e(f["name"]), _e(f["trajectories"]), _share(f["used"], f["trajectories"]), _values(f["values"])]
            for f in uses["flags"]
        ]
        out.append(_table(["flag", "trajectories", "read by the harness", "values"], body, numeric={1, 2}))
    out.append(
        '<p class="muted">How a rule counts as seen or shown: docs/report.md. An edit nobody uses is a candidate for removal.</p>'
    )
    return "\n".join(out)


def _values(counts: dict[str, int]) -> str:
    """A flag's values as read, most read first: ``1 (12 runs), 0 (3 runs)``."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return _e(", ".join(f"{v} ({n} run{'s' if n != 1 else ''})" for v, n in ranked) or "none read")


def _share(n: int, total: int) -> str:
    return f"{n} ({n / total:.0%})" if total else "-"
