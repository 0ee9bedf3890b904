"""proc.run_in_session: the one way the host runs an untrusted child (deadline, group kill, caps)."""

from __future__ import annotations

import _thread
import errno
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from harnessopt.util.proc import run_in_session, wait_for_exit
from tests.support.interrupts import flag_handler_installed, swallow_an_interrupt_main


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pid: int, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_exit_code_separate_streams_and_full_sizes(tmp_path: Path) -> None:
    done = run_in_session(
        ["bash", "-c", "echo out; echo err >&2; exit 4"], timeout_s=10, cap=100, cwd=tmp_path
    )
    assert (done.returncode, done.timed_out) == (4, False)
    assert (done.stdout, done.stderr) == ("out\n", "err\n")
    assert (done.stdout_bytes, done.stderr_bytes) == (4, 4)


def test_merged_output_is_capped_head_and_tail() -> None:
    done = run_in_session(
        ["bash", "-c", "echo FIRST; head -c 100000 /dev/zero | tr '\\0' y; echo; echo LAST >&2"],
        timeout_s=10,
        cap=1000,
        merge_stderr=True,
    )
    assert done.stdout.startswith("FIRST") and done.stdout.rstrip().endswith("LAST")
    assert "bytes elided" in done.stdout and len(done.stdout) < 1100
    assert done.stdout_bytes > 100_000 and done.stderr == ""


def test_deadline_kills_the_whole_group_including_background_jobs(tmp_path: Path) -> None:
    t0 = time.monotonic()
    done = run_in_session(
        ["bash", "-c", "sleep 60 & echo $! > bg.pid; sleep 60"], timeout_s=1, cap=100, cwd=tmp_path
    )
    assert done.timed_out and done.returncode is None
    assert time.monotonic() - t0 < 5
    assert _wait_dead(int((tmp_path / "bg.pid").read_text()))


def test_leftovers_of_a_child_that_exited_are_killed_and_do_not_hang_the_call(tmp_path: Path) -> None:
    # The background job keeps stdout open: with a pipe, reading it would wait 60 s.
    t0 = time.monotonic()
    done = run_in_session(
        ["bash", "-c", "(sleep 60; echo late) & echo $! > bg.pid; echo done"],
        timeout_s=30,
        cap=100,
        cwd=tmp_path,
        term_grace_s=0.1,
    )
    assert time.monotonic() - t0 < 5
    assert done.returncode == 0 and done.stdout == "done\n"
    assert _wait_dead(int((tmp_path / "bg.pid").read_text()))


def test_stdin_is_fed_even_to_a_child_that_never_reads_it() -> None:
    brief = b"x" * (1 << 20)  # more than a pipe buffer
    done = run_in_session(
        [sys.executable, "-c", "import sys; print(len(sys.stdin.read()))"], timeout_s=10, cap=100, stdin=brief
    )
    assert done.stdout.strip() == str(1 << 20)
    t0 = time.monotonic()
    done = run_in_session(["sleep", "0.2"], timeout_s=10, cap=100, stdin=brief)
    assert done.returncode == 0 and time.monotonic() - t0 < 5


def test_started_gets_the_group_id_and_an_error_in_the_caller_kills_the_group(tmp_path: Path) -> None:
    pids: list[int] = []

    def started(pid: int) -> None:
        pids.append(pid)
        assert os.getpgid(pid) == pid  # its own group: killing the group kills what it starts
        raise KeyboardInterrupt  # as a Ctrl-C landing in the caller's thread while the child runs

    with pytest.raises(KeyboardInterrupt):
        run_in_session(["bash", "-c", "sleep 60"], timeout_s=30, cap=100, started=started)
    assert _wait_dead(pids[0])


def test_an_interrupt_without_a_signal_ends_the_wait_at_once_and_kills_the_group() -> None:
    """Ray cancels a running task with ``_thread.interrupt_main()``: no signal, so no poll() is
    cut short; the wait must come back to the interpreter on its own to see it."""
    pids: list[int] = []
    timer = threading.Timer(0.5, _thread.interrupt_main)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        timer.start()
        run_in_session(["bash", "-c", "sleep 60"], timeout_s=20, cap=100, started=pids.append)
    timer.join()
    assert time.monotonic() - t0 < 5  # not held until the child's exit or the deadline
    assert _wait_dead(pids[0])


def _pids_with(marker: str) -> list[int]:
    """Live processes whose argv holds ``marker`` (only this test's own processes carry it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _none_left(marker: str, within: float = 3.0) -> bool:
    end = time.monotonic() + within
    while _pids_with(marker):
        if time.monotonic() > end:
            for pid in _pids_with(marker):  # do not leave them running for the next test
                os.kill(pid, signal.SIGKILL)
            return False
        time.sleep(0.05)
    return True


def _sleeper(escape: str, marker: str) -> str:
    """A shell word: python that escapes (``os.setsid()``/``os.setpgid(0, 0)``), says so, sleeps."""
    code = f"import os, time; {escape}; open('up', 'w').close(); time.sleep(60)"
    return f"{sys.executable} -c {shlex.quote(code)} {marker}"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc")
def test_a_child_that_leaves_the_session_is_killed_at_the_deadline(tmp_path: Path) -> None:
    marker = f"ho-proc-test-{uuid.uuid4().hex}"
    script = f"{_sleeper('os.setsid()', marker)} & sleep 60"
    done = run_in_session(["bash", "-c", script], timeout_s=2, cap=100, cwd=tmp_path)
    assert done.timed_out and (tmp_path / "up").exists()  # it did escape its group and session
    assert _none_left(marker)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc")
def test_a_child_that_leaves_the_group_is_killed_with_the_session_after_a_normal_exit(tmp_path: Path) -> None:
    marker = f"ho-proc-test-{uuid.uuid4().hex}"
    script = f"{_sleeper('os.setpgid(0, 0)', marker)} & while [ ! -e up ]; do sleep 0.05; done; echo done"
    done = run_in_session(["bash", "-c", script], timeout_s=20, cap=100, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "done\n"
    assert _none_left(marker)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc")
def test_killing_a_session_leaves_other_sessions_alone(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        done = run_in_session(["bash", "-c", "sleep 60 & sleep 60"], timeout_s=1, cap=100, cwd=tmp_path)
        assert done.timed_out
        assert bystander.poll() is None and _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_a_cancel_a_finalizer_swallowed_still_ends_the_wait(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray cancel's KeyboardInterrupt that lands in a finalizer is dropped; with the flag's
    handler (the CLI's, and a Ray worker's job's) the wait's next slice raises it again, rather than
    the wait going on to the child's exit (3 s here): with a pidfd, and where pidfd_open is refused
    (an old kernel, a seccomp filter) and the wait falls back to ``Popen.wait``."""
    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", _refused, raising=False)
    pids: list[int] = []
    with flag_handler_installed():
        swallow_an_interrupt_main()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_in_session(["bash", "-c", "sleep 3"], timeout_s=20, cap=100, started=pids.append)
        assert time.monotonic() - t0 < 2
    assert _wait_dead(pids[0])


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no-pidfd"])
def test_the_wait_reaps_an_exit_and_keeps_its_deadline(pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wait_for_exit``: True and reaped once the child exits, False at the deadline with the child
    left running, on either path."""
    if not pidfd:
        monkeypatch.setattr(os, "pidfd_open", _refused, raising=False)
    quick = subprocess.Popen(["sleep", "0.3"])
    assert wait_for_exit(quick, 10)
    assert quick.returncode == 0
    slow = subprocess.Popen(["sleep", "30"])
    try:
        t0 = time.monotonic()
        assert not wait_for_exit(slow, 0.7)
        assert 0.6 < time.monotonic() - t0 < 5
        assert slow.poll() is None
    finally:
        slow.kill()
        slow.wait()


def _refused(_pid: int, _flags: int = 0) -> int:
    raise OSError(errno.ENOSYS, "pidfd_open refused")


def test_kill_marked_kills_the_processes_named_by_an_argument_and_no_other(tmp_path: Path) -> None:
    """A bwrap namespace orphaned in a session of its own escapes a session kill; the task dir's
    unique path among its arguments finds it (QA: one left after a finished run)."""
    from harnessopt.util.proc import kill_marked

    marker = str(tmp_path / "ho-local-abc")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    marked = subprocess.Popen([*sleeper, "--bind", marker], start_new_session=True)
    similar = subprocess.Popen([*sleeper, marker + "-other"], start_new_session=True)
    try:
        assert kill_marked({marker}) == 1
        assert marked.wait(timeout=10) == -9
        assert similar.poll() is None  # an argument that only starts with it is someone else's
        assert kill_marked(set()) == 0
    finally:
        for p in (marked, similar):
            p.kill()
            p.wait()
