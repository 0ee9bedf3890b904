"""``harnessopt ablate WS FLAG``: does a harness feature flag help? Val with it on and with it off.

The incumbent (``HEAD``) runs on the val tasks the gate sees twice: once with ``HO_FLAG_<FLAG>``
set to the "on" value and once with the "off" value, every other flag as usual. The paired
difference (on minus off) goes through the run's gate exactly as a round's candidate would
(``audit.paired_decision``): flipped tasks rerun on both sides, the same dead zone. One verdict
line says whether the flag helps, hurts, or makes no measurable difference; the record is kept
on ``refs/harnessopt/ablate/<flag>-<head>`` and in the journal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harnessopt.commands.audit import export_states, measuring, paired_decision, verdict_word
from harnessopt.errors import UserError
from harnessopt.gate.confirmation import split_val
from harnessopt.ledger import vcs
from harnessopt.ledger.store import message, record_measurement
from harnessopt.reporting.progress import RunProgress
from harnessopt.workspace import flags
from harnessopt.workspace.core import Workspace

ABLATE_REF = "refs/harnessopt/ablate/{flag}-{head}"


def known_flags(ws: Workspace) -> dict[str, str]:
    """Flags the incumbent registers (harness/flags.yaml) or harnessopt.yaml sets: name -> purpose."""
    out = {f.name: f.purpose for f in flags.registered(ws.root / "harness")}
    for name in ws.cfg.flags:
        out.setdefault(name.lower(), "set in harnessopt.yaml")
    return out


def run_ablation(
    ws: Workspace,
    flag: str,
    *,
    on: str | None = None,
    off: str | None = None,
    say: Callable[[str], None],
    progress: RunProgress | None = None,
) -> dict[str, Any]:
    """Measure ``flag`` on against off on val (module docstring); returns the report. ``on`` and
    ``off`` default to 1 and 0, for a flag whose default is one of them."""
    name = flag.lower()
    known = known_flags(ws)
    if name not in known:
        listed = ", ".join(sorted(known)) or "none"
        raise UserError(
            f"flag {flag!r} is not registered in {ws.root}/harness/flags.yaml nor set in harnessopt.yaml "
            f"(known: {listed}); register it there (docs/optimizer.md, 'Feature flags')"
        )
    default = next((f.default for f in flags.registered(ws.root / "harness") if f.name == name), None)
    if on is None and off is None and default not in (None, "0", "1"):
        raise UserError(
            f"flag {name} defaults to {default!r}, not 1 or 0 ({known[name]}): pass the two values to "
            "compare, --on VALUE --off VALUE"
        )
    on, off = on if on is not None else "1", off if off is not None else "0"
    if on == off:
        raise UserError(f"--on and --off are both {on!r}: give two different values")
    val, _held_out = split_val(ws.tasks("val"), ws.cfg.gate)
    head = vcs.head_sha(ws.repo)
    with measuring(ws, ws.cfg, say, progress) as svc:
        cands = export_states(
            ws,
            svc,
            "ablate",
            {"flag-on": head, "flag-off": head},
            {"flag-on": [(name, on)], "flag-off": [(name, off)]},
        )
        say(
            f"ablate {name}: {len(val)} val tasks x {ws.cfg.gate.epochs} epoch(s), {flags.env_name(name)}={on} and ={off}"
        )
        reads = _ReadCounter(name)
        svc.runner.observers.append(reads)
        d, _on_out, _off_out = paired_decision(svc, cands["flag-on"], cands["flag-off"], val)
        usage = svc.usage_of_round(0)
    if reads.runs and reads.crashed == reads.runs:  # no evidence either way: no verdict, no record
        raise UserError(
            f"ablate {name}: every run crashed, with {flags.env_name(name)}={on} and ={off} (the harness "
            f"said: {reads.said or 'nothing on stderr'}); nothing recorded: pass values the harness "
            "takes (--on, --off)"
        )
    word = verdict_word(d)
    report = {
        "flag": name,
        "on": on,
        "off": off,
        "head": head,
        "verdict": word,
        "on_score": d.candidate_score,
        "off_score": d.incumbent_score,
        "delta": d.delta,
        "dead_zone": d.dead_zone,
        "n": d.n,
        "fixed": d.fixed,
        "broken": d.broken,
        "gate_reason": d.reason,
        "runs": reads.runs,
        "runs_that_read_it": reads.read,
        "tokens": usage.tokens,
        "cost_usd": usage.cost_usd,
    }
    ref = ABLATE_REF.format(flag=name, head=head[:12])
    text = message(f"harnessopt ablate {name} at {head[:10]}", "", report)
    # an ablation of the flag at this commit before (other --on/--off values, or a rerun) stays a
    # parent of the new one: git log of the ref shows every verdict (QA: the last replaced the rest)
    record_measurement(ws.repo, ref, head, text)
    ws.journal.write(0, "ablate", flag=name, verdict=word, delta=d.delta, dead_zone=d.dead_zone, ref=ref)
    say(verdict_line(report))
    if reads.read == 0:
        say(
            f"ablate {name}: note: no run reported reading it (flags_read); is the harness reading {flags.env_name(name)}?"
        )
    return report


def verdict_line(r: dict[str, Any]) -> str:
    """The one line ``ablate`` prints."""
    sign, says = _WORDS[r["verdict"]]
    return (
        f"ablate {r['flag']}: on {r['on_score']:.3f} vs off {r['off_score']:.3f}, paired difference "
        f"{r['delta']:+.3f} {sign} dead zone {r['dead_zone']:.3f} (n={r['n']}, fixed {len(r['fixed'])}, "
        f"broken {len(r['broken'])}): {says}"
    )


_WORDS = {
    "helps": (">", "the flag helps"),
    "hurts": ("below minus", "the flag hurts"),
    "no measurable difference": ("inside", "no measurable difference"),
}


class _ReadCounter:
    """A run observer counting the runs that reported reading the flag (``flags_read``)."""

    def __init__(self, name: str):
        self.name, self.runs, self.read, self.crashed, self.said = name, 0, 0, 0, ""

    def started(self, *_args: Any) -> None:
        pass

    def finished(self, _label: str, result: Any, _done: int, _total: int) -> None:
        self.runs += 1
        self.read += self.name in flags.read_in(result.harness_events)
        if result.crashed:
            self.crashed += 1
            lines = [x.strip() for x in (result.stderr_tail or "").splitlines() if x.strip()]
            self.said = self.said or (lines[-1][:300] if lines else "")
