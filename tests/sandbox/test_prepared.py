"""One read-only copy per candidate (issue 15): real Docker and real bwrap, no copy per task."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.docker.sandbox import DockerSandbox
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import LocalSandbox

INSPECT = """
    import hashlib, stat
    def tree(top):
        rows = []
        for here, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(files):
                p = os.path.join(here, name)
                rel = os.path.relpath(p, top)
                rows.append(f"{rel} {stat.S_IMODE(os.stat(p).st_mode) & 0o111 != 0} "
                            + hashlib.sha256(open(p, "rb").read()).hexdigest())
        return rows
    tries = {}
    skill = ARGS.skill
    for p in [skill + "/SKILL.md", skill + "/new.txt", os.path.dirname(ARGS.task) + "/harness/x.py"]:
        try:
            open(p, "a").write("PWNED")
            tries[p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1]] = "written"
        except OSError as e:
            tries[p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1]] = type(e).__name__
    try:
        listed = os.listdir("/ho-cand")
    except OSError as e:
        listed = type(e).__name__
    answer(json.dumps({"skill": tree(skill), "tries": tries, "cands": listed}))
"""


def _host_tree(top: Path) -> list[str]:
    rows = []
    for here, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            p = Path(here) / name
            executable = p.stat().st_mode & 0o111 != 0
            rows.append(f"{p.relative_to(top)} {executable} {hashlib.sha256(p.read_bytes()).hexdigest()}")
    return rows


def _big_skill(skill: Path) -> None:
    (skill / "fonts").mkdir()
    (skill / "fonts" / "big.ttf").write_bytes(os.urandom(1 << 20))
    (skill / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    (skill / "tool.sh").chmod(0o755)


@pytest.mark.docker
def test_docker_task_reads_the_candidate_read_only_from_one_shared_copy(
    docker_client: Any, small_cfg: Any, candidate: Any, gateway: Any, tmp_path: Path, spec_for: Any
) -> None:
    skill, harness = candidate(INSPECT)
    _big_skill(skill)
    (harness / "helper.py").write_text("X = 1\n")
    before = _host_tree(skill)
    sb = DockerSandbox(small_cfg(concurrency=2), docker_client, warm=2)
    outs: list[Any] = []
    try:

        def go(i: int) -> None:
            outs.append(sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / f"o{i}"))

        threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(o.error_class is None for o in outs), outs
        copies = sorted(p.name for p in sb.copies.root.iterdir())
        assert len(copies) == 1  # three tasks of one candidate: one copy
        for i in range(3):
            got = json.loads((tmp_path / f"o{i}" / "answer.txt").read_text())
            assert got["skill"] == before  # byte for byte, executable bits kept
            assert set(got["tries"].values()) <= {"OSError", "PermissionError"}, got["tries"]
            if os.geteuid() == 0:
                assert got["cands"] == "PermissionError"  # the other candidates cannot be listed
        assert _host_tree(skill) == before
        # The candidate changed in place: a new copy, and the task sees the new content.
        (skill / "SKILL.md").write_text("---\nname: t\ndescription: test skill\n---\nChanged.\n")
        out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "o-changed")
        assert out.error_class is None, out
        assert json.loads((tmp_path / "o-changed" / "answer.txt").read_text())["skill"] == _host_tree(skill)
        assert len(list(sb.copies.root.iterdir())) == 2
    finally:
        sb.close()
    assert not sb.copies.root.exists()


@pytest.mark.docker
def test_docker_slot_holds_links_to_the_mounted_copy_not_a_copy(
    docker_client: Any, small_cfg: Any, candidate: Any, gateway: Any, tmp_path: Path, spec_for: Any
) -> None:
    skill, harness = candidate("""
        answer(json.dumps({p: [os.path.islink(p), os.readlink(p) if os.path.islink(p) else None]
                           for p in ("/ho/skill", "/ho/harness")} | {"slot": sorted(os.listdir("/ho"))}))
    """)
    sb = DockerSandbox(small_cfg(), docker_client, warm=1)
    try:
        out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    finally:
        sb.close()
    assert out.error_class is None, out
    got = json.loads((tmp_path / "out" / "answer.txt").read_text())
    assert got["/ho/skill"][0] and got["/ho/skill"][1].startswith("/ho-cand/")
    assert got["/ho/harness"][0] and got["/ho/harness"][1].endswith("/harness")
    assert got["slot"] == ["harness", "skill", "task.json"]


@pytest.mark.skipif(not isolation.available("bwrap"), reason="bwrap does not work here")
def test_bwrap_task_gets_the_prepared_copy_read_only(
    small_cfg: Any, candidate: Any, gateway: Any, tmp_path: Path, spec_for: Any
) -> None:
    skill, harness = candidate(INSPECT)
    _big_skill(skill)
    before = _host_tree(skill)
    sb = LocalSandbox(small_cfg(), isolation_mode="bwrap")
    try:
        for i in range(2):
            out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / f"o{i}")
            assert out.error_class is None, out
            got = json.loads((tmp_path / f"o{i}" / "answer.txt").read_text())
            assert got["skill"] == before
            assert set(got["tries"].values()) <= {"OSError", "PermissionError"}, got["tries"]
        assert sb._copies is not None and len(list(sb._copies.root.iterdir())) == 1
        root = sb._copies.root
    finally:
        sb.close()
    assert _host_tree(skill) == before and not root.exists()
