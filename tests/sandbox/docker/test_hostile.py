"""Hostile harnesses against the Docker sandbox: each is contained and leaves nothing behind."""

from __future__ import annotations

import _thread
import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.docker.sandbox import DockerSandbox
from tests.support.interrupts import flag_handler_installed

pytestmark = pytest.mark.docker

REAL_KEY = "sk-ant-REALKEY-do-not-leak-5b9e"


@pytest.fixture
def make_sandbox(docker_client: Any, small_cfg: Any) -> Iterator[Any]:
    made: list[DockerSandbox] = []

    def make(**kw: Any) -> DockerSandbox:
        warm = kw.pop("warm", 1)
        sb = DockerSandbox(small_cfg(**kw), docker_client, warm=warm)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        sb.close()
        left = docker_client.containers.list(all=True, filters={"label": f"harnessopt.run={sb.run_id}"})
        assert left == [], f"containers left behind: {left}"


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_well_behaved_harness_reaches_gateway_with_run_token(
    make_sandbox, candidate, gateway, tmp_path, spec_for
):
    skill, harness = candidate("""
        import urllib.request
        req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models",
                                     headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"]})
        body = urllib.request.urlopen(req, timeout=10).read().decode()
        print("to stdout"); print("to stderr", file=sys.stderr)
        json.dump(json.load(open(ARGS.task)), open(os.path.join(OUT, "task_seen.json"), "w"))
        answer(body)
    """)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease("tok-abc")), tmp_path / "out")
    assert out.error_class is None, out
    assert out.exit_code == 0
    assert (tmp_path / "out" / "answer.txt").read_text() == "echo /v1/models"
    assert gateway.requests == [{"path": "/v1/models", "key": "tok-abc"}]
    assert "answer" not in (tmp_path / "out" / "task_seen.json").read_text()
    assert out.stdout_tail == "to stdout" and out.stderr_tail == "to stderr\n"


def test_gold_answers_scorer_and_real_key_are_invisible(
    make_sandbox, candidate, gateway, tmp_path, spec_for, monkeypatch
):
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
    ws = candidate.ws
    skill, harness = candidate(f"""
        found = []
        for p in [{str(ws / "scorer.py")!r}, {str(ws / "tasks" / "tasks.jsonl")!r}]:
            found.append(p) if os.path.exists(p) else None
        # Split so that this very file does not contain them.
        needles = [b"GOLD-ANSWER-" + b"7f3a", b"SCORER-SECRET-" + b"91c2", {REAL_KEY[:10].encode()!r} + {REAL_KEY[10:].encode()!r}]
        paths = ["/proc/" + p + "/" + f for p in os.listdir("/proc") if p.isdigit() for f in ("environ", "cmdline")]
        for root, dirs, files in os.walk("/"):
            if root.startswith(("/proc", "/sys", "/dev")):
                dirs[:] = []
                continue
            paths += [os.path.join(root, f) for f in files]
        for path in paths:
            if True:
                try:
                    data = open(path, "rb").read(1 << 20)
                except OSError:
                    continue
                for n in needles:
                    if n in data:
                        found.append(path)
        found += [k for k, v in os.environ.items() if "REALKEY" in v]
        answer("FOUND " + repr(found) if found else "clean")
    """)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease(), 60), tmp_path / "out")
    assert out.error_class is None, out
    assert (tmp_path / "out" / "answer.txt").read_text() == "clean"


def test_no_network_but_loopback_and_host_listener_unreachable(
    make_sandbox, candidate, gateway, tmp_path, spec_for
):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    skill, harness = candidate(f"""
        import socket
        ifaces = sorted(os.listdir("/sys/class/net"))
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            reached = "connected"
        except OSError as e:
            reached = type(e).__name__
        answer(json.dumps({{"ifaces": ifaces, "host": reached}}))
    """)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    result = (tmp_path / "out" / "answer.txt").read_text()
    assert out.error_class is None
    assert '"ifaces": ["lo"]' in result and '"connected"' not in result
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing came in from the container
    listener.close()


def test_writes_outside_out_and_to_mounted_skill_fail(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        results = {}
        for p in ["/ho/skill/SKILL.md", "/ho/harness/run.py", "/ho/new.txt", "/etc/x", "/opt/x",
                  "/ho-gw/x", "/root/x", "/x"]:
            try:
                open(p, "a").write("PWNED")
                results[p] = "written"
            except OSError as e:
                results[p] = type(e).__name__
        open("/tmp/scratch", "w").write("ok")  # /tmp is a private tmpfs: allowed
        answer(json.dumps(results))
    """)
    before = tree_digest(candidate.ws)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    results = (tmp_path / "out" / "answer.txt").read_text()
    assert out.error_class is None, out
    assert "written" not in results
    assert tree_digest(candidate.ws) == before
    assert not list(gateway.dir.glob("x"))


def test_fork_bomb_is_contained(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(0.01)
    """)
    t0 = time.monotonic()
    out = make_sandbox(pids=32).run(spec_for(skill, harness, gateway.lease(), 4), tmp_path / "out")
    assert out.error_class in ("timeout", "crash")
    assert time.monotonic() - t0 < 20


def test_memory_hog_is_oom_killed(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        blocks = []
        while True:
            blocks.append(bytearray(16 << 20))
    """)
    out = make_sandbox(memory_mb=96).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "oom", out


def test_a_child_killed_for_memory_is_oom_though_the_harness_exits_with_a_code(
    make_sandbox, candidate, gateway, tmp_path, spec_for
):
    """A harness that runs its work as a child (the command template, CLI agents) exits with a code
    of its own when the kernel kills that child for memory: the engine's word makes it ``oom``,
    not a crash (it was ``crash, exit code 1``)."""
    skill, harness = candidate("""
        import subprocess
        hog = "blocks = []\\nwhile True:\\n    blocks.append(bytearray(16 << 20))\\n"
        sys.exit(1 if subprocess.run([sys.executable, "-c", hog]).returncode else 0)
    """)
    out = make_sandbox(memory_mb=96).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "oom", out


@pytest.mark.parametrize("body", ["while True:\n    pass\n", "time.sleep(600)\n"])
def test_endless_harness_times_out_and_keeps_partial_out(
    make_sandbox, candidate, gateway, tmp_path, spec_for, body
):
    skill, harness = candidate('open(os.path.join(OUT, "partial.txt"), "w").write("so far")\n' + body)
    t0 = time.monotonic()
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease(), 2), tmp_path / "out")
    assert out.error_class == "timeout" and out.exit_code is None
    assert time.monotonic() - t0 < 2 + 8
    assert (tmp_path / "out" / "partial.txt").read_text() == "so far"


def test_an_interrupt_of_the_main_thread_ends_a_silent_run_at_once(
    make_sandbox, docker_client, candidate, gateway, tmp_path, spec_for
):
    """Ray cancels a task with ``_thread.interrupt_main()``: no signal, so the KeyboardInterrupt
    comes only when the main thread next runs Python. The wait for a harness that prints nothing
    must come back to Python often, and the task's container go as the run unwinds."""
    skill, harness = candidate("""
        import urllib.request
        urllib.request.urlopen(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models", timeout=10).read()
        time.sleep(60)
    """)
    sb = make_sandbox()
    taken: list[Any] = []
    take = sb.pool.take
    sb.pool.take = lambda socket_dir: taken.append(take(socket_dir)) or taken[-1]  # type: ignore[method-assign]
    fired: list[float] = []

    def interrupt() -> None:  # once the harness runs (it reached the gateway), or after 15 s anyway
        deadline = time.monotonic() + 15
        while not gateway.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        fired.append(time.monotonic())
        _thread.interrupt_main()

    timer = threading.Thread(target=interrupt, daemon=True)
    # As a Ray worker's job runs it (rollout.ray.worker.run_job): with the flag's handler, an
    # interrupt that lands in a finalizer (printed and dropped) is raised at the next read slice.
    with flag_handler_installed(), pytest.raises(KeyboardInterrupt):
        timer.start()
        sb.run(spec_for(skill, harness, gateway.lease(), 20), tmp_path / "out")
        timer.join()  # the interrupt must land inside this block, however late
        time.sleep(1)
    late = time.monotonic() - fired[0]
    assert gateway.requests, "the harness never started"
    assert late < 3, f"KeyboardInterrupt came {late:.1f} s after interrupt_main"
    label = {"label": f"harnessopt.run={sb.run_id}"}
    deadline = time.monotonic() + 10
    listed = lambda: docker_client.containers.list(all=True, filters=label, ignore_removed=True)  # noqa: E731
    while taken[0].container.id in {c.id for c in listed()}:
        assert time.monotonic() < deadline, "the interrupted task's container was not removed"
        time.sleep(0.1)


def test_gigabytes_of_output_are_cut(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        chunk = "x" * (1 << 20)
        for _ in range(4096):
            sys.stdout.write(chunk)
    """)
    out = make_sandbox(output_cap_kb=16).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "output_cap", out
    assert len(out.stdout_tail) < 20_000 and "elided" in out.stdout_tail


def test_full_out_is_output_cap(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        with open(os.path.join(OUT, "big.bin"), "wb") as f:
            try:
                for _ in range(64):
                    f.write(b"\\0" * (1 << 20))
            except OSError:
                pass
        answer("wrote")
    """)
    out = make_sandbox(out_mb=4).run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "output_cap", out
    total = sum(p.stat().st_size for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert total <= 4 << 20


def test_background_process_is_killed_before_collection(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        import subprocess
        subprocess.Popen([sys.executable, "-c",
            "import time, sys; time.sleep(1.5); open(sys.argv[1], 'w').write('late')",
            os.path.join(OUT, "late.txt")], start_new_session=True)
        answer("done")
    """)
    sb = make_sandbox()
    out = sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None and out.exit_code == 0
    time.sleep(2)
    assert not (tmp_path / "out" / "late.txt").exists()


def test_the_runner_sleeps_while_its_harness_runs(make_sandbox, candidate, gateway, tmp_path, spec_for):
    """The runner (PID 1) waits for its harness's exit and for the host's stop without polling: its
    main thread does not wake while a silent harness sleeps (a 10 ms poll woke it ~100 times a
    second, CPU a task paid for every second it ran)."""
    skill, harness = candidate("""
        def wakeups():
            for line in open("/proc/1/status"):
                if line.startswith("voluntary_ctxt_switches"):
                    return int(line.split()[1])
        before = wakeups()
        time.sleep(2)
        answer(wakeups() - before)
    """)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None, out.stderr_tail
    assert int((tmp_path / "out" / "answer.txt").read_text()) <= 5


def test_crash_reports_exit_code_and_stderr(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate('raise SystemExit("harness gave up")\n')
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class == "crash" and out.exit_code == 1
    assert "harness gave up" in out.stderr_tail


def test_concurrent_runs_use_fresh_containers(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        marker = "/tmp/seen"
        reused = os.path.exists(marker)
        open(marker, "w").write("x")
        answer("reused" if reused else open("/etc/hostname").read().strip())
    """)
    sb = make_sandbox(concurrency=2, warm=2)
    outs: list[Any] = []

    def go(i: int) -> None:
        outs.append(sb.run(spec_for(skill, harness, gateway.lease()), tmp_path / f"o{i}"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answers = [(tmp_path / f"o{i}" / "answer.txt").read_text() for i in range(6)]
    assert all(o.error_class is None for o in outs)
    assert "reused" not in answers and len(set(answers)) == 6


# --------------------------------------------------------------------------- the runner's protocol
# A harness that knows the attach protocol tries to forge the end of its task: a fake exit code and
# its own archive of /out (links, `..`, absolute paths, devices, a git hook aimed at the workspace).
# Both the old marker line (with the nonce read from the slot) and length-prefixed frames are tried.

FORGE = """
    import io, tarfile
    def member(tar, name, kind=tarfile.REGTYPE, data=b"", linkname=""):
        ti = tarfile.TarInfo(name)
        ti.type, ti.linkname, ti.mode = kind, linkname, 0o4755
        ti.size = len(data) if kind == tarfile.REGTYPE else 0
        tar.addfile(ti, io.BytesIO(data))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        member(tar, "answer.txt", data=b"FORGED")
        member(tar, "forged.txt", data=b"forged")
        member(tar, "../escaped.txt", data=b"x")
        member(tar, ABS_TARGET, data=b"x")
        member(tar, "link", tarfile.SYMTYPE, linkname=HOST_DIR)
        member(tar, "link/planted.txt", data=b"x")
        member(tar, "hard", tarfile.LNKTYPE, linkname=ABS_TARGET)
        member(tar, "dev", tarfile.CHRTYPE)
        member(tar, HOOK, data=b"#!/bin/sh\\ntouch /tmp/PWNED\\n")
    forged_tar = buf.getvalue()
    try:
        nonce = json.load(open("/ho/run.json"))["nonce"]
    except Exception:
        nonce = "unknown"
    meta = json.dumps({"exit_code": 0, "stopped": False, "out_full": False}).encode()
    old = b"\\n@@HO-OUT " + nonce.encode() + b" " + meta + b"@@\\n" + forged_tar
    framed = b"M" + len(meta).to_bytes(4, "big") + meta
    framed += b"T" + len(forged_tar).to_bytes(4, "big") + forged_tar
    answer("real")
    sys.stdout.flush()
    for stream in WHERE:
        try:
            with open(stream, "wb") as f:
                f.write(old)
                f.write(framed)
        except OSError:
            pass
    sys.exit(3)
"""


@pytest.mark.parametrize("where", ["/dev/stdout", "/proc/1/fd/1"])
def test_forged_end_marker_and_archive_are_only_harness_output(
    make_sandbox, candidate, gateway, tmp_path, spec_for, where
):
    out_dir = tmp_path / "out"
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    abs_target = tmp_path / "abs-planted.txt"
    hook = "../ws/.git/hooks/post-checkout"  # from out_dir to the candidate's workspace
    skill, harness = candidate(
        f"ABS_TARGET, HOST_DIR, HOOK, WHERE = {str(abs_target)!r}, {str(host_dir)!r}, {hook!r}, [{where!r}]\n"
        + textwrap.dedent(FORGE)
    )
    before = tree_digest(candidate.ws)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), out_dir)
    assert (out.error_class, out.exit_code) == ("crash", 3), out
    assert sorted(p.name for p in out_dir.iterdir()) == ["answer.txt"]
    assert (out_dir / "answer.txt").read_text() == "real"
    assert not abs_target.exists() and list(host_dir.iterdir()) == []
    assert not (tmp_path / "escaped.txt").exists() and not (candidate.ws / ".git").exists()
    assert tree_digest(candidate.ws) == before


def test_harness_cannot_open_or_trace_the_runner(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        import ctypes
        results = {}
        for name, path, flags in [("stdout", "/proc/1/fd/1", os.O_WRONLY), ("mem", "/proc/1/mem", os.O_RDONLY),
                                  ("environ", "/proc/1/environ", os.O_RDONLY)]:
            try:
                os.close(os.open(path, flags))
                results[name] = "opened"
            except OSError as e:
                results[name] = type(e).__name__
        try:
            results["fds"] = "listed " + repr(os.listdir("/proc/1/fd"))
        except OSError as e:
            results["fds"] = type(e).__name__
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, 1, 0, 0) == 0:  # PTRACE_ATTACH
            results["ptrace"] = "attached"
            time.sleep(0.1)
            libc.ptrace(17, 1, 0, 0)  # PTRACE_DETACH
        else:
            results["ptrace"] = os.strerror(ctypes.get_errno())
        answer(json.dumps(results))
    """)
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), tmp_path / "out")
    assert out.error_class is None, out
    results = json.loads((tmp_path / "out" / "answer.txt").read_text())
    assert not any(v.startswith(("opened", "listed", "attached")) for v in results.values()), results


# --------------------------------------------------------------------------- what /out may hold

LINKS_IN_OUT = """
    answer("real")
    os.symlink("/etc/passwd", os.path.join(OUT, "abs"))
    os.symlink(".", os.path.join(OUT, "loop"))
    os.symlink("/out", os.path.join(OUT, "x"))
    os.makedirs(os.path.join(OUT, "d"))
    os.symlink("..", os.path.join(OUT, "d", "up"))
    os.link(os.path.join(OUT, "answer.txt"), os.path.join(OUT, "hard"))
    os.mkfifo(os.path.join(OUT, "fifo"))
"""


def _links_and_specials(root: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) or (
                stat.S_ISREG(st.st_mode) and st.st_nlink > 1
            ):
                found.append(os.path.relpath(p, root))
    return found


def test_links_fifos_and_hard_links_in_out_are_not_collected(
    make_sandbox, candidate, gateway, tmp_path, spec_for
):
    skill, harness = candidate(LINKS_IN_OUT)
    out_dir = tmp_path / "out"
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease()), out_dir)
    assert out.error_class is None, out
    assert (out_dir / "answer.txt").read_text() == "real"
    assert _links_and_specials(out_dir) == []
    shutil.copytree(out_dir, tmp_path / "copy")  # what the next round does with a candidate root
    skipped = " ".join(out.notes)
    assert all(name in skipped for name in ("abs", "loop", "fifo", "hard")), out.notes


def test_out_symlink_loop_does_not_break_the_next_rounds_copy(
    docker_client, small_cfg, candidate, gateway, tmp_path
):
    from harnessopt.commands.demo import demo_config
    from harnessopt.protocols import Task
    from harnessopt.rollout.runner import Candidate, Runner

    class Leases:  # the two calls Runner.run_one makes of the gateway, served by the echo gateway
        refusals = 0

        def lease(self, role: str, round_no: int, task_id: str | None = None) -> Any:
            return gateway.lease()

        def release(self, token: str) -> list:
            return []

    skill, harness = candidate(LINKS_IN_OUT)
    scratch = tmp_path / "scratch"
    root = scratch / "round-1" / "incumbent"  # where loop.start_round puts the incumbent
    shutil.copytree(skill, root / "skill")
    shutil.copytree(harness, root / "harness")
    cfg = demo_config("docker")
    cfg.rollout = small_cfg(sandbox="docker")
    sandbox = DockerSandbox(cfg.rollout, docker_client, warm=1)
    try:
        runner = Runner(cfg, sandbox, Leases(), lambda task, answer, out_dir: answer == "real", scratch)  # type: ignore[arg-type]
        task = Task("t1", "what?", "secret", "train")
        result = runner.run_one(Candidate(root, "incumbent", "c0"), task, 1, 0)
        result2 = runner.run_one(Candidate(root, "incumbent", "c0"), task, 1, 1)
    finally:
        sandbox.close()
    assert result.passed and result2.passed, (result, result2)
    # Before the fix the copy below followed `loop -> .` and `d/up -> ..` exponentially (10 min,
    # 11 GB written, then the pytest timeout): check for links first so a regression fails fast.
    assert _links_and_specials(scratch) == []
    assert sorted(os.listdir(root)) == ["harness", "skill"]  # no task output inside a candidate
    shutil.copytree(root, scratch / "round-1" / "candidate")  # loop.check's copy of the incumbent


def test_many_files_in_out_are_capped(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        answer("real")
        for i in range(12_000):
            open(os.path.join(OUT, f"f{i:05d}"), "w").close()
    """)
    out_dir = tmp_path / "out"
    # /out big enough that the archive (a pax header per file) stays under the size cap
    out = make_sandbox(out_mb=64).run(spec_for(skill, harness, gateway.lease(), 60), out_dir)
    assert out.error_class == "output_cap", out
    assert (out_dir / "answer.txt").read_text() == "real"
    assert len(os.listdir(out_dir)) <= 10_000


def test_sparse_file_bomb_in_out_is_cut_quickly(make_sandbox, candidate, gateway, tmp_path, spec_for):
    skill, harness = candidate("""
        answer("real")
        with open(os.path.join(OUT, "bomb"), "wb") as f:
            f.truncate(64 << 30)  # 64 GiB that take no room on the tmpfs
    """)
    out_dir = tmp_path / "out"
    t0 = time.monotonic()
    out = make_sandbox().run(spec_for(skill, harness, gateway.lease(), 20), out_dir)
    assert time.monotonic() - t0 < 10, out
    assert out.error_class == "output_cap", out
    assert (out_dir / "answer.txt").read_text() == "real"
    assert sum(p.stat().st_size for p in out_dir.rglob("*")) <= 8 << 20


# --------------------------------------------------------------------------- the slot on the host


def test_slot_never_holds_the_token_where_other_users_can_read_it(
    make_sandbox, candidate, gateway, tmp_path, spec_for, monkeypatch
):
    slots = tmp_path / "slots"
    slots.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(slots))  # the pool's slot dirs land here
    token = "ho-run-token-SLOT-" + "9d1e"
    skill, harness = candidate('time.sleep(1.5)\nanswer("done")\n')
    seen: dict[str, Any] = {"slots": set(), "token_in": set(), "open_dirs": set(), "open_files": set()}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for slot in slots.glob("ho-slot-*"):
                with contextlib.suppress(OSError):
                    st = slot.stat()
                    seen["slots"].add(slot.name)
                    # as root: root:65534 0750, readable by the container's group, no one else
                    if st.st_mode & 0o027 or (os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 65534)):
                        seen["open_dirs"].add(f"{slot.name} {oct(st.st_mode)} {st.st_uid}:{st.st_gid}")
                    for f in slot.rglob("*"):
                        with contextlib.suppress(OSError):
                            if f.is_file() and token.encode() in f.read_bytes():
                                seen["token_in"].add(f.name)
                                if f.stat().st_mode & 0o077:
                                    seen["open_files"].add(f"{f.name} {oct(f.stat().st_mode)}")
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = make_sandbox().run(spec_for(skill, harness, gateway.lease(token)), tmp_path / "out")
    finally:
        done.set()
        watcher.join()
    assert out.error_class is None, out
    assert seen["slots"], "no slot dir was observed"
    assert seen["open_files"] == set() and seen["token_in"] == set(), seen
    if os.geteuid() == 0:
        assert seen["open_dirs"] == set(), seen
