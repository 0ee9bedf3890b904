"""Triggering in the log and the report (objective trigger or both): precision and recall per
round, both sides, the description's length and the pass rate of task runs by loading."""

from __future__ import annotations

from typing import Any

from harnessopt.ledger.store import TriggerStats


def trigger_row(t: TriggerStats | None) -> dict[str, Any] | None:
    return t.model_dump() if t is not None else None


def trigger_note(t: dict[str, Any] | None) -> str:
    """One line for the log: ``trigger: precision 1.00->1.00, recall 0.20->1.00, description 41->160 chars``."""
    if not t:
        return ""
    inc, cand = t.get("incumbent") or {}, t.get("candidate") or {}
    parts = [
        f"{k} {_f(inc.get(k))}->{_f(cand.get(k))}" for k in ("precision", "recall") if cand.get(k) is not None
    ]
    # a round whose candidate never ran (a no-op) has no description of its own: "41->41 chars" alone
    # read as a measured round (QA)
    if t.get("description_chars") is not None and (
        parts or t["description_chars"] != t.get("incumbent_description_chars")
    ):
        parts.append(f"description {t.get('incumbent_description_chars')}->{t['description_chars']} chars")
    for k in ("loaded", "not_loaded"):
        if t.get(f"runs_{k}"):
            parts.append(
                f"pass when {k.replace('_', ' ')} {_f(t.get(f'pass_when_{k}'))} ({t[f'runs_{k}']} runs)"
            )
    return "trigger: " + ", ".join(parts) if parts else ""


def plot_triggering(plt: Any, data: dict[str, Any]) -> Any:
    """Precision and recall of triggering per round, incumbent (line) and candidate (markers);
    None when no round measured triggering (the page then has no such section)."""
    rows = [r for r in data["rounds"] if r.get("trigger")]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 3.2))
    ks = [r["round"] for r in rows]
    # recall a little left of its round and precision a little right: both are often 1.00, and the
    # one drawn second hid the first (QA)
    for metric, color, dodge in (("recall", "#1565c0", -0.08), ("precision", "#6a1b9a", 0.08)):
        xs = [k + dodge for k in ks]
        inc = [r["trigger"]["incumbent"].get(metric) for r in rows]
        cand = [r["trigger"]["candidate"].get(metric) for r in rows]
        ax.plot(
            xs,
            [float("nan") if v is None else v for v in inc],
            "s-",  # a marker: a lone round (or one between unmeasured ones) draws no line
            color=color,
            markerfacecolor="none",
            label=f"{metric} (incumbent)",
        )
        ax.scatter(
            xs,
            [float("nan") if v is None else v for v in cand],
            marker="o",
            color=color,
            label=f"{metric} (candidate)",
        )
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("round")
    ax.set_ylabel("on val trigger runs")
    ax.set_xticks(ks)
    ax.set_xlim(min(ks) - 0.6, max(ks) + 0.6)  # markers off the axis edge (QA: cut in half)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot, over no point
    fig.tight_layout()
    return fig


def _f(x: Any) -> str:
    return "n/a" if x is None else f"{x:.2f}"  # "-" before an arrow read "precision -->1.00" (QA)
