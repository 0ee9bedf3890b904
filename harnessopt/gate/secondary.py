"""The gate's secondary test: what may accept a candidate whose score difference is inside the
dead zone (docs/gate.md, "One alpha a round").

It is chosen by ``gate.secondary`` and never by the data, and it is tested at the level the
round's false-accept budget leaves for it (``stats.round_levels``):

* ``none`` (default): nothing breaks a tie; inside the zone is a rejection.
* ``soft``: the scorer's ``soft`` value must improve by more than ``max(soft_margin, its own
  dead zone)``, with no more tasks broken than fixed and a mean score that did not fall. Every
  run that did not crash must carry a ``soft`` value; a crashed run's counts 0.
* ``cost``: token saving, as an intersection-union test of two one-sided tests at the same level
  (so together they spend that level once): the relative token saving clears its dead zone, and
  quality is not worse than ``-noninferiority_margin`` (the lower confidence bound of the mean
  score difference is above it). An edit that loses more than the margin is accepted with
  probability at most the secondary level, whatever it saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harnessopt.config import GateConfig
from harnessopt.gate import stats
from harnessopt.protocols import Outcome, Outcomes


@dataclass
class Quality:
    """The primary test's numbers the secondary test needs (confirmed differences)."""

    delta: float
    s_d: float
    m: int
    step: float
    fixed: int
    broken: int


@dataclass
class SecondaryResult:
    """Whether the secondary test accepts, the text for the reason, and numbers for ``details``."""

    accept: bool
    note: str
    delta: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


def judge(
    cfg: GateConfig,
    candidate: Outcomes,
    incumbent: Outcomes,
    ids: Sequence[str],
    level: float | None,
    q: Quality,
) -> SecondaryResult:
    """The configured secondary test at one-sided confidence ``level`` (None: no secondary)."""
    if cfg.secondary == "none" or level is None:
        return SecondaryResult(False, "no tie-break (gate.secondary: none)")
    if cfg.secondary == "soft":
        return _soft(cfg, candidate, incumbent, ids, level, q)
    return _cost(cfg, candidate, incumbent, ids, level, q)


def _soft(
    cfg: GateConfig, candidate: Outcomes, incumbent: Outcomes, ids: Sequence[str], level: float, q: Quality
) -> SecondaryResult:
    lacking = sum(1 for t in ids for o in (*candidate[t], *incumbent[t]) if o.soft is None and not o.crashed)
    if lacking:
        return SecondaryResult(
            False,
            f"secondary soft: {lacking} run(s) have no soft value (the scorer must return one for every run)",
            details={"secondary": "soft", "soft_missing": lacking},
        )
    gains = [_soft_mean(candidate[t]) - _soft_mean(incumbent[t]) for t in ids]
    gain, bound = _clears(gains, level, cfg.soft_margin)
    out = SecondaryResult(
        False,
        "",
        gain,
        {"secondary": "soft", "soft_metric": "soft", "soft_bound": bound, "secondary_level": level},
    )
    if gain <= bound:
        out.note = f"soft {gain:+.3f} below margin {bound:.3f}"
    elif q.broken > q.fixed or q.delta < 0:
        out.note = f"soft {gain:+.3f} but {q.broken} broken > {q.fixed} fixed or score fell"
    else:
        out.accept, out.note = True, f"soft {gain:+.3f} > margin {bound:.3f}"
    return out


def _cost(
    cfg: GateConfig, candidate: Outcomes, incumbent: Outcomes, ids: Sequence[str], level: float, q: Quality
) -> SecondaryResult:
    savings, lacking = token_savings(candidate, incumbent, ids)
    details: dict[str, Any] = {"secondary": "cost", "secondary_level": level}
    if lacking:
        details["tokens_missing"] = lacking
        return SecondaryResult(False, f"secondary cost: {lacking} run(s) counted no tokens", details=details)
    saving, bound = _clears(savings, level, cfg.soft_margin)
    # Non-inferiority: the lower confidence bound of the mean score difference, at the same level.
    lower = q.delta - (stats.dead_zone(q.m, q.s_d, level, step=q.step))
    margin = cfg.noninferiority_margin
    details.update(
        soft_metric="token saving", soft_bound=bound, quality_lower_bound=lower, noninferiority_margin=margin
    )
    out = SecondaryResult(False, "", saving, details)
    if saving <= bound:
        out.note = f"token saving {saving:+.3f} below margin {bound:.3f}"
    elif lower <= -margin:
        out.note = (
            f"token saving {saving:+.3f} but quality may be worse by more than {margin:.3f} "
            f"(lower bound {lower:+.3f})"
        )
    else:
        out.accept = True
        out.note = f"token saving {saving:+.3f} > margin {bound:.3f}, quality lower bound {lower:+.3f} > -{margin:.3f}"
    return out


def _clears(gains: Sequence[float], level: float, margin: float) -> tuple[float, float]:
    """(mean gain, the bound it must exceed): its own dead zone (continuous: no lattice step) or the margin."""
    zone = stats.dead_zone(len(gains), stats.sample_sd(gains), level, step=0.0)
    return stats.mean(gains), max(margin, zone)


def _soft_mean(runs: Sequence[Outcome]) -> float:
    """Mean soft value over a task's runs; a crashed run counts 0."""
    vals = [0.0 if o.crashed else stats.finite(o.soft) for o in runs]
    return sum(vals) / len(vals) if vals else 0.0


def token_savings(candidate: Outcomes, incumbent: Outcomes, ids: Sequence[str]) -> tuple[list[float], int]:
    """Per-task relative token saving ``1 - cand/inc`` (clipped at -1), and how many runs that did
    not crash counted no tokens. Crashed runs are left out (a crash saves nothing: a task whose runs
    all crashed on either side saves 0); the score difference already counts the crash."""
    lacking = sum(1 for t in ids for o in (*candidate[t], *incumbent[t]) if not o.crashed and o.tokens <= 0)
    out = []
    for t in ids:
        c = [o.tokens for o in candidate[t] if not o.crashed]
        i = [o.tokens for o in incumbent[t] if not o.crashed]
        if not c or not i or sum(i) <= 0:
            out.append(0.0)
            continue
        out.append(max(-1.0, 1.0 - (sum(c) / len(c)) / (sum(i) / len(i))))
    return out, lacking
