"""The manifest's sub-records are typed, and commits written before they were still read and
written back unchanged (a key this version does not declare is kept)."""

from __future__ import annotations

import json

from harnessopt.ledger import store as ledger
from harnessopt.ledger.manifest import ConfirmationRecord, GateRecord, RoundManifest

# Round 1 of the demo workspace (smoke 2, epochs 2), as the version before typed sub-records wrote
# it: the gate's details, the noise floor, the confirmation and the checks were plain objects.
OLD_LINE = (
    'harnessopt-manifest: {"broken": [], "changed": ["skill/SKILL.md"], "checks": {"leakage": '
    '{"action": "reject", "added_lines": 1, "findings": [], "tasks": []}}, "confirmation": '
    '{"candidate_score": 0.5, "confirmed": true, "gain": 0.5, "incumbent_score": 0.0, "interval": '
    '[0.2004107705852438, 0.7995892294147562], "n": 14, "on": "val", "rollouts": 56, "summary": '
    '"confirmed on 14 val tasks, runs that did not select it: +0.500 (95% interval +0.200 to +0.800)", '
    '"written_by_a_later_version": 1}, "delta": 0.5, "fixed": ["t1"], "gate": {"alpha": '
    '0.050000000000000044, "confidence": 0.95, "confirmed": true, "crashed_runs": {"candidate": 0, '
    '"incumbent": 0}, "epochs": 2, "flips_first_pass": 7, "look": 1, "look_levels": [0.99, 0.96], '
    '"m": 14, "max_broken": null, "reruns": 28, "t": 3.605551275463989}, "noise_floor": {"aa_delta": '
    '0.0, "detectable": 0.4492982543860993, "epochs": 2, "flip_rate": 0.0, "m": 14, "measured_round": 1, '
    '"paired_sd": 0.0, "reach": {"epochs": null, "tasks": 341}, "rollouts": 56, "target_effect": 0.05}, '
    '"round": 1, "status": "accepted", "version": 2}'
)
SUB_RECORDS = ("gate", "noise_floor", "confirmation", "checks")


def test_a_manifest_of_the_older_format_reads_into_typed_records() -> None:
    data = ledger.manifest_data(f"harnessopt round 1: accepted: x\n\n{OLD_LINE}\n")
    m = RoundManifest.model_validate(data)
    assert m.gate.alpha == 0.050000000000000044 and m.gate.model_extra["look_levels"] == [0.99, 0.96]
    assert m.noise_floor is not None and m.noise_floor.m == 14 and m.noise_floor.reach["tasks"] == 341
    assert m.confirmation is not None and m.confirmation.confirmed and m.confirmation.gain == 0.5
    assert m.checks.leakage is not None and m.checks.leakage.action == "reject"
    again = ledger.manifest_data(ledger.message("s", "", m))  # written back: the same keys and values
    assert {k: again[k] for k in SUB_RECORDS} == {k: data[k] for k in SUB_RECORDS}


def test_records_write_only_the_keys_they_were_given() -> None:
    m = RoundManifest(round=3, status="rejected", gate={"run_alpha_spent": True})
    payload = json.loads(ledger.message("s", "", m).split(ledger.MANIFEST_PREFIX)[1])
    assert payload["gate"] == {"run_alpha_spent": True} and payload["checks"] == {}
    assert payload["confirmation"] is None and payload["noise_floor"] is None
    assert GateRecord().alpha is None and not ConfirmationRecord().confirmed  # what a missing key reads as
