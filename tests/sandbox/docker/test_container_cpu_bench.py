"""benchmarks/sandbox_overhead.py's CPU split: what the engine's containers spent, read from their
parent cgroup, still counts a container after it was removed (real Docker)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import sandbox_overhead as so
from harnessopt.sandbox.image.build import LABEL
from tests.conftest import IMAGE

pytestmark = pytest.mark.docker

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n"


def test_container_seconds_counts_a_removed_containers_cpu(docker_client: Any) -> None:
    before = so.container_seconds()
    assert before is not None, "no parent cgroup of the engine's containers on this machine"
    mine = so.own_seconds()
    container = docker_client.containers.run(
        IMAGE,
        ["python3", "-c", SPIN],
        labels={LABEL: "1", f"{LABEL}.run": "test-container-cpu"},
        network_mode="none",
        detach=True,
    )
    try:
        assert container.wait(timeout=120)["StatusCode"] == 0
    finally:
        container.remove(force=True)
    after = so.container_seconds()
    assert after is not None and after - before >= 0.55  # its 0.6 s of spinning, though it is gone
    assert so.own_seconds() - mine < 0.5  # and none of it was ours: it ran in the container


def test_cpu_sums_and_differences() -> None:
    a = so.Cpu(10.0, 4.0, 1.0, 0)
    b = so.Cpu(12.5, 5.0, 1.5, 0).since(a, 3)
    assert (b.machine, b.inside, b.own, b.made) == (2.5, 1.0, 0.5, 3)
    total = sum([b, b], so.Cpu(0.0, 0.0, 0.0, 0))
    assert (total.machine, total.inside, total.made) == (5.0, 2.0, 6)
    unknown = so.Cpu(12.5, None, 1.5, 0).since(a, 3)
    assert unknown.inside is None and (unknown + b).inside is None  # not told apart stays unknown
