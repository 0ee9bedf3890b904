"""What ``log`` and ``status`` say about the gate's evidence (docs/gate.md): the noise floor, the
accepted rounds' gains on runs that did not select them, and the run-level false-accept figure."""

from __future__ import annotations

from typing import Any

from harnessopt.gate import noise_floor as noisefloor
from harnessopt.gate import stats
from harnessopt.ledger import store as ledger
from harnessopt.ledger.journal import STATE_DIR
from harnessopt.ledger.manifest import ConfirmationRecord, gate_alphas
from harnessopt.workspace.core import Workspace


def confirmation_note(conf: ConfirmationRecord | dict[str, Any] | None) -> str:
    """One line for a round's confirmation ('' when it has none); a dict is read as the record
    (a row of ``log --json``)."""
    if not conf:
        return ""
    if isinstance(conf, dict):
        conf = ConfirmationRecord.model_validate(conf)
    state = "confirmed" if conf.confirmed else "NOT confirmed (ho/best did not move)"
    return f"{state}: {conf.gain:+.3f} on {conf.n} {conf.on} tasks, fresh runs"


def evidence_lines(ws: Workspace) -> list[str]:
    """The gate's lines of ``harnessopt status``."""
    past = ledger.past_rounds(ws.repo)
    out = []
    best = ledger.best(ws.repo).manifest
    if best.confirmation:
        claimed = (
            f" (claimed on the runs that selected it: {best.delta:+.3f})" if best.delta is not None else ""
        )
        out.append(f"best, on runs that did not select it: {confirmation_note(best.confirmation)}{claimed}")
    nf = noisefloor.NoiseFloorStore(ws.root / STATE_DIR).latest()
    if nf:
        first, *more = noisefloor.lines(nf)
        out += [f"{first} (measured in round {nf.get('measured_round', '?')})", *more]
    out.append(run_level_line(past, ws.cfg.gate.run_alpha, ws.cfg.gate.run_rounds))
    return out


def run_level_line(past: list[ledger.Round], run_alpha: float | None, run_rounds: int) -> str:
    """How much false-accept budget the recorded gate decisions spent, and what that bounds."""
    alphas = [a for r in past for a in gate_alphas(r.manifest)]
    spent = sum(alphas)
    line = (
        f"gate decisions: {len(alphas)}, false-accept budget spent {spent:.3f}: P(a no-effect edit was "
        f"accepted in this workspace) <= {stats.any_false_accept_bound(spent, 1):.2f}"
    )
    if run_alpha is None:
        return line + " (nothing caps it: gate.run_alpha would)"
    return line + f" (gate.run_alpha {run_alpha}: {min(len(alphas), run_rounds)} of {run_rounds} decisions)"
