"""The simulation behind docs/gate.md runs, end to end, on a few trials (the real figures take minutes)."""

from __future__ import annotations

import pytest

from benchmarks import gate_simulation as sim


def test_the_simulation_prints_every_table_for_every_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim.main(["--trials", "3", "--runs", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    for pol in sim.POLICIES:
        assert out.count(f"| {pol.label} |") == 3  # per round, 20-round runs, no-effect runs
    assert "smoke test, +0.10 gains rejected" in out and "P(any accepted)" in out


def test_a_proposal_changes_the_population_mean_by_exactly_its_effect() -> None:
    import numpy as np

    s0 = sim.population(np.random.default_rng(1))
    for kind, effect in sim.EFFECT.items():
        cand = sim.propose(s0, kind, np.random.default_rng(2))
        assert float(cand.p.mean() - s0.p.mean()) == pytest.approx(effect, abs=1e-9)
        assert np.allclose(cand.tokens / s0.tokens, 0.9) is (kind == "cheap-harm")
