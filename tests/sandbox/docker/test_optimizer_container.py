"""A hostile optimizer in its Docker shell: nothing it does reaches the host (issue 8: 1, 4, 11).

The attacks run through the real optimizer loop (the anthropic SDK against a scripted fake
Messages API, bash and the editor in a real container) or straight through ``DockerShell``.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from harnessopt.config import OptimizerConfig
from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer
from harnessopt.optimizer.view import build_view, copy_back
from harnessopt.sandbox.docker.shell import (
    OPTIMIZER_UID,
    VIEW_FILES_CAP,
    VIEW_GROWTH_CAP,
    VIEW_HEADROOM,
    DockerShell,
)
from tests.support import killed_run
from tests.support.fake_anthropic import FakeAnthropicServer

pytestmark = pytest.mark.docker

_ids = itertools.count(1)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("---\nname: t\ndescription: test\n---\nAdd numbers.\n")
    (root / "harness").mkdir()
    (root / "harness" / "run.py").write_text("print('run')\n")
    (root / "trajectories").mkdir()
    return root


@pytest.fixture
def view(ws: Path, tmp_path: Path) -> Path:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    build_view(ws, private / "view", history_md="h", brief_md="b")
    return private / "view"


@pytest.fixture
def shells(docker_client: Any, small_cfg: Any) -> Iterator[list[DockerShell]]:
    made: list[DockerShell] = []
    yield made
    for sh in made:
        sh.close()
        left = docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sh.run_id}"})
        assert left == [], f"containers left behind: {left}"


def _shell(shells: list[DockerShell], view: Path, docker_client: Any, cfg: Any) -> DockerShell:
    sh = DockerShell(view, cfg, client=docker_client)
    shells.append(sh)
    return sh


def _live_processes(docker_client: Any, sh: DockerShell) -> list[list[str]]:
    (container,) = docker_client.containers.list(filters={"label": f"harnessopt.run={sh.run_id}"})
    return [row for row in container.top(ps_args="-o pid,stat,args")["Processes"] if "Z" not in row[1]]


def _tool(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{next(_ids):04d}", "name": name, "input": tool_input}


def _reply(content: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "fake",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


# --------------------------------------------------------------------------- 8.1


def test_no_process_of_a_bash_call_outlives_it(shells, view, docker_client, small_cfg) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run("setsid sleep 1000 </dev/null >/dev/null 2>&1 & sleep 0.5; echo started", 20)
    assert r.exit_code == 0 and "started" in r.output
    live = _live_processes(docker_client, sh)
    assert len(live) == 1 and "idle" in live[0][2], f"processes outlived the call: {live}"


# The swapper waits until the editor opens skill/hold (a FIFO) for reading, swaps skill/ for a
# symlink to a host directory, and feeds the editor what it expects: an editor on the host then
# writes the file back through the symlink, resolved on the host (a .git/config, say).
SWAPPER = """cat > /tmp/swap.py <<'EOF'
import os, sys
os.symlink(sys.argv[1], "lnk")
fd = os.open("skill/hold", os.O_WRONLY)
os.rename("skill", "real")
os.rename("lnk", "skill")
os.write(fd, b"[core]\\n\\tfsmonitor = HOLD\\n")
os.close(fd)
EOF
mkfifo skill/hold
setsid python3 /tmp/swap.py {target} </dev/null >/dev/null 2>&1 &
sleep 0.5; echo armed"""


def test_the_editor_cannot_be_raced_into_a_host_dir(view, docker_client, small_cfg, tmp_path) -> None:
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    replies = iter(
        [
            _reply([_tool("bash", {"command": SWAPPER.format(target=host_dir)})]),
            _reply(
                [
                    _tool(
                        "str_replace_based_edit_tool",
                        {"command": "str_replace", "path": "skill/hold", "old_str": "HOLD", "new_str": "x"},
                    )
                ]
            ),
            _reply([{"type": "text", "text": "done"}]),
        ]
    )
    made: list[DockerShell] = []

    def shell_factory(v: Path) -> DockerShell:
        made.append(DockerShell(v, small_cfg(), client=docker_client))
        return made[-1]

    with FakeAnthropicServer(lambda request: next(replies)) as fake:
        client = anthropic.Anthropic(base_url=fake.base_url, api_key="lease", max_retries=0)
        opt = AnthropicOptimizer(
            client,
            "m",
            OptimizerConfig(bash_timeout_s=20.0, wall_s=120.0),
            shell_factory,
            transcript_dir=tmp_path,
        )
        proposal = opt.propose(view, "brief", 1)
        bash_result = fake.requests[1]["body"]["messages"][2]["content"][0]
        edit_result = fake.requests[2]["body"]["messages"][4]["content"][0]
    assert "armed" in bash_result["content"], bash_result
    assert proposal.stopped_by == "done"
    assert list(host_dir.iterdir()) == [], "the editor wrote into a host directory"
    assert edit_result.get("is_error") is True, edit_result
    for sh in made:
        left = docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sh.run_id}"})
        assert left == []


def test_editor_operations_run_in_the_container_and_never_follow_links(
    shells, view, docker_client, small_cfg
) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run("ln -s /etc skill/etc; mkfifo skill/pipe; truncate -s 60M skill/huge.md", 20)
    assert r.exit_code == 0, r.output
    r = sh.run("truncate -s 512M skill/huge.md", 20)
    assert r.exit_code == 128 + 25, r  # SIGXFSZ: no file past the per-command size limit
    assert sh.edit({"op": "view", "path": "skill/SKILL.md"})["text"].endswith("Add numbers.\n")
    for path, why in (
        ("skill/etc/passwd", "link"),
        ("skill/pipe", "regular file"),
        ("skill/huge.md", "bytes"),
    ):
        reply = sh.edit({"op": "view", "path": path})
        assert reply["ok"] is False and why in reply["error"], (path, reply)
    assert sh.edit({"op": "write", "path": "skill/etc/x", "text": "x"})["ok"] is False
    assert sh.edit({"op": "write", "path": "skill/new/dir/n.md", "text": "new"}) == {
        "ok": True,
        "existed": False,
    }
    assert (view / "skill" / "new" / "dir" / "n.md").read_text() == "new"


# --------------------------------------------------------------------------- 8.4


def test_the_container_runs_as_another_uid_and_leaves_no_reachable_setuid_file(
    shells, view, ws, docker_client, small_cfg
) -> None:
    snapshot = build_view(ws, view, history_md="h", brief_md="b")
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run(
        "id -u; cp /bin/dash skill/sh; chmod 4755 skill/sh; chmod u+s skill/SKILL.md; chmod 755 /view; "
        "stat -c '%a %u' skill/sh",
        20,
    )
    uid = int(r.output.split()[0])
    assert uid not in (0, os.getuid()), f"the optimizer's container runs as uid {uid}"
    sh.close()
    assert stat.S_IMODE(view.parent.stat().st_mode) == 0o700  # nobody else reaches the view
    shell_copy = view / "skill" / "sh"
    if shell_copy.exists() and shell_copy.stat().st_mode & stat.S_ISUID:
        assert shell_copy.stat().st_uid not in (0, os.getuid()), "a setuid file of the host's uid"
    res = copy_back(view, ws, ["skill/**"], snapshot=snapshot)
    assert "skill/sh" in res.changed
    for rel in res.changed:
        mode = stat.S_IMODE((ws / rel).stat().st_mode)
        assert mode in (0o644, 0o755), (rel, oct(mode))


def test_a_view_in_a_directory_others_can_enter_is_refused(tmp_path, docker_client, small_cfg) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    (shared / "view").mkdir()
    with pytest.raises(ValueError, match="0700"):
        DockerShell(shared / "view", small_cfg(), client=docker_client)


# --------------------------------------------------------------------------- 8.11


def _disk_used(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))


def test_a_gigabyte_written_by_the_optimizer_is_stopped(shells, view, docker_client, small_cfg) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    before = _disk_used(view)
    r = sh.run("dd if=/dev/zero of=big.bin bs=1M count=1126 2>&1; echo rc=$?", 120)
    assert "rc=0" not in r.output, r.output
    assert _disk_used(view) - before <= (64 << 20) + (1 << 20)
    # Many files each under the per-file cap: the view's growth is capped in total.
    r = sh.run(
        "for i in $(seq 1 24); do dd if=/dev/zero of=f$i.bin bs=1M count=60 2>/dev/null & done; wait", 120
    )
    assert r.exit_code == 125 and "may grow by" in r.output, r.output
    assert _disk_used(view) - before < (256 << 20) + (200 << 20)


# ------------------------------------------------------------------ the view's quota and its copy


def test_the_view_is_a_tmpfs_quota_of_the_container_and_no_host_path_is_mounted(
    shells, view, docker_client, small_cfg
) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run("stat -f -c '%T %b %S' /view; stat -c '%u %a' /view; cat skill/SKILL.md", 20)
    fs_type, blocks, frsize, owner, mode = r.output.split()[:5]
    assert (fs_type, owner, mode) == ("tmpfs", str(OPTIMIZER_UID), "700"), r.output
    assert int(blocks) * int(frsize) <= _disk_used(view) + VIEW_GROWTH_CAP + VIEW_HEADROOM + (1 << 20)
    assert "Add numbers." in r.output  # seeded from the host's view
    (container,) = docker_client.containers.list(filters={"label": f"harnessopt.run={sh.run_id}"})
    assert container.attrs["Mounts"] == [], container.attrs["Mounts"]  # not a bind, not a volume
    assert "/view" in container.attrs["HostConfig"]["Tmpfs"]


def test_only_files_and_directories_reach_the_host_view(shells, view, docker_client, small_cfg) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run(
        "cd skill && ln -s /etc etc && mkfifo pipe && ln SKILL.md hard.md && printf x > s.md && "
        "chmod 4777 s.md && printf y > locked.md && chmod 000 locked.md && mkdir -m 777 open && "
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && echo made",
        20,
    )
    assert r.exit_code == 0 and "made" in r.output, r.output
    skill = view / "skill"
    assert sorted(p.name for p in skill.iterdir()) == ["SKILL.md", "hard.md", "locked.md", "open", "s.md"]
    assert (skill / "hard.md").read_text() == (skill / "SKILL.md").read_text()
    assert (skill / "locked.md").read_text() == "y"
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in skill.iterdir()}
    assert modes == {"SKILL.md": 0o644, "hard.md": 0o644, "locked.md": 0o644, "open": 0o755, "s.md": 0o755}
    assert {p.lstat().st_uid for p in view.rglob("*")} == {os.geteuid()}


def test_what_cannot_leave_the_container_is_said_and_copied_back_as_discarded(
    shells, view, ws, docker_client, small_cfg
) -> None:
    """A symlink or FIFO made in the container never reaches the host view, and vanished unsaid:
    a local view keeps it and the copy-back lists it as discarded (QA). The call's output says so
    once, and the copy-back lists it; a file swapped for a link is not read as a deletion."""
    snapshot = build_view(ws, view, history_md="h", brief_md="b")
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run("cd skill && ln -s /etc etc && mkfifo pipe && ln -sf /etc/passwd SKILL.md && echo made", 20)
    assert r.exit_code == 0 and "made" in r.output, r.output
    assert (
        "not copied out of the container, so discarded: skill/SKILL.md, skill/etc, skill/pipe" in r.output
    ), r.output
    assert "discarded" not in sh.run("echo again > skill/new.md", 20).output  # said once
    copied = copy_back(view, ws, ["skill/**"], snapshot=snapshot)
    assert copied.violations == ["skill/SKILL.md", "skill/etc", "skill/pipe"], copied
    assert copied.changed == ["skill/new.md"] and "Add numbers." in (ws / "skill" / "SKILL.md").read_text()
    assert sh.run("rm skill/etc skill/pipe", 20).exit_code == 0  # gone from the container: no longer listed
    assert copy_back(view, ws, ["skill/**"], snapshot=snapshot).violations == ["skill/SKILL.md"]


def test_an_outgrown_call_is_discarded_and_the_view_keeps_the_calls_before(
    shells, view, docker_client, small_cfg
) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    assert sh.edit({"op": "write", "path": "skill/kept.md", "text": "kept"})["ok"] is True
    # Holes take no room on the tmpfs but would be written out in full: they count.
    r = sh.run("echo lost > skill/lost.md; for i in 1 2 3 4 5; do truncate -s 60M s$i.bin; done", 20)
    assert r.exit_code == 125 and "may grow by" in r.output and "discarded" in r.output, r.output
    assert (view / "skill" / "kept.md").read_text() == "kept"
    assert not (view / "skill" / "lost.md").exists() and not list(view.glob("s*.bin"))
    r = sh.run("ls skill; ls", 20)  # a new container, seeded from the host's view
    assert "kept.md" in r.output and "lost.md" not in r.output and "s1.bin" not in r.output, r.output
    # Every name of a hard link would be written out in full too.
    r = sh.run(
        "dd if=/dev/zero of=a.bin bs=1M count=60 2>/dev/null; for i in 1 2 3 4; do ln a.bin l$i; done", 20
    )
    assert r.exit_code == 125 and "discarded" in r.output, r.output
    assert sorted(p.name for p in view.iterdir()) == [
        "OPTIMIZE.md",
        "harness",
        "history.md",
        "skill",
        "trajectories",
    ]


def test_the_view_may_hold_so_many_files(shells, view, docker_client, small_cfg) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    r = sh.run(f"mkdir d && cd d && seq 1 {VIEW_FILES_CAP + 5} | xargs touch 2>&1 | tail -1", 60)
    assert r.exit_code == 125 and "may grow by" in r.output, r.output
    assert not (view / "d").exists()


def test_each_command_may_grow_the_view_by_the_cap(shells, view, docker_client, small_cfg) -> None:
    sh = _shell(shells, view, docker_client, small_cfg())
    before = _disk_used(view)
    write = "for i in {}; do dd if=/dev/zero of=f$i.bin bs=1M count=60 2>/dev/null || echo FAILED; done"
    r = sh.run(write.format("1 2"), 60)
    assert r.exit_code == 0 and "FAILED" not in r.output, r.output
    # The container's tmpfs had room for the cap past the seeded view: it is made anew with room.
    r = sh.run(write.format("3 4 5"), 60)
    assert r.exit_code == 0 and "FAILED" not in r.output, r.output
    assert _disk_used(view) - before >= 5 * (60 << 20)


def test_the_optimizer_container_of_a_run_killed_with_sigkill_exits_on_its_own(
    docker_client: Any, ws: Path, view: Path, tmp_path: Path, small_cfg: Any, shells: list[DockerShell]
) -> None:
    """No clean-up reaches a run that kill -9 or the OOM killer ends: its optimizer container, whose
    PID 1 waits for docker exec commands, ran on for ever. PID 1 now exits when the run's attach
    socket on its stdin closes (HO_LIFELINE, StdinOnce)."""
    proc, run_id = killed_run.start(
        f"""
        import time
        from pathlib import Path
        from harnessopt.config import RolloutConfig
        from harnessopt.sandbox.docker.shell import DockerShell
        sh = DockerShell(Path({str(view)!r}), RolloutConfig(sandbox="docker"))
        assert sh.run("echo up", 60).exit_code == 0
        print(sh.run_id, flush=True)
        time.sleep(600)
        """,
        tmp_path,
    )
    try:
        assert (
            run_id and len(docker_client.containers.list(filters={"label": f"harnessopt.run={run_id}"})) == 1
        )
        (tmp_path / "mine").mkdir(mode=0o700)
        build_view(ws, tmp_path / "mine" / "view", history_md="h", brief_md="b")
        sh_alive = _shell(shells, tmp_path / "mine" / "view", docker_client, small_cfg())  # a live run's
        assert sh_alive.run("echo up", 60).exit_code == 0
        assert killed_run.running_after_sigkill(docker_client, proc, run_id) == []  # it exited
        assert sh_alive.run("echo still here", 60).output.startswith("still here")  # untouched
    finally:
        killed_run.remove_leftovers(docker_client, proc)
