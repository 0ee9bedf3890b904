"""Ctrl-C and SIGTERM are never lost: an exception a finalizer swallowed is raised at the next
check, and a stop signal exits through the clean-up."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from harnessopt.util import interrupts
from tests.support.interrupts import handlers_restored


@pytest.fixture(autouse=True)
def restore_sigint():
    with handlers_restored():  # SIGINT, SIGTERM, the unraisable hook and the flag, as they were
        yield


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
def test_a_ctrl_c_swallowed_by_a_finalizer_is_raised_at_the_next_check() -> None:
    hook = sys.unraisablehook
    interrupts.install()
    interrupts.check()  # nothing pending

    class Holder:
        pass

    obj = Holder()
    # The signal handler's KeyboardInterrupt lands inside the finalizer, where Python prints and drops it.
    weakref.finalize(obj, os.kill, os.getpid(), signal.SIGINT)
    try:
        del obj
        gc.collect()
        for _ in range(1000):  # give the handler its bytecode boundary
            pass
    except KeyboardInterrupt:
        pass  # delivered outside the finalizer this time: the flag must be set all the same
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
    sys.unraisablehook = hook


def _finalizer_raises(exc: BaseException) -> None:
    class Holder:
        pass

    def raiser() -> None:
        raise exc

    obj = Holder()
    weakref.finalize(obj, raiser)
    del obj
    gc.collect()


def test_the_dropped_interrupt_prints_no_traceback_but_other_errors_still_print(capfd) -> None:
    hook = sys.unraisablehook
    interrupts.install()
    try:
        interrupts._interrupted.set()
        _finalizer_raises(KeyboardInterrupt())
        assert capfd.readouterr().err == ""
        _finalizer_raises(ValueError("real bug"))
        assert "real bug" in capfd.readouterr().err

        class HalfBuilt:  # cut short by the stop before __init__ set what __del__ reads (QA)
            def __init__(self) -> None:
                raise KeyboardInterrupt

            def __del__(self) -> None:
                self._state.close()

        with pytest.raises(KeyboardInterrupt):
            HalfBuilt()
        gc.collect()
        assert capfd.readouterr().err == ""
    finally:
        sys.unraisablehook = hook


def test_deferred_holds_the_interrupt_until_the_block_ends() -> None:
    interrupts.install()
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("block finished")
    assert done == ["block finished"]
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()


def test_exit_callbacks_run_once_newest_first_and_one_failing_does_not_stop_the_others() -> None:
    ran: list[str] = []

    def first() -> None:
        ran.append("first")

    def broken() -> None:
        raise RuntimeError("cleanup failed")

    interrupts.on_exit(first)
    interrupts.on_exit(broken)
    interrupts.on_exit(first)  # registered already: no second run
    interrupts.run_exit_callbacks()
    interrupts.run_exit_callbacks()
    assert ran == ["first"]


def test_sigterm_exits_through_the_exit_callbacks(tmp_path: Path) -> None:
    # A run killed with SIGTERM (systemd, `kill`, a CI timeout) still removes what it started.
    marker = tmp_path / "cleaned"
    script = textwrap.dedent(f"""
        import sys, time
        from harnessopt.util import interrupts
        interrupts.install()
        interrupts.on_exit(lambda: open({str(marker)!r}, "w").write("yes"))
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 10
    assert marker.read_text() == "yes"


def test_install_leaves_a_sigterm_handler_someone_else_set() -> None:
    def mine(_signum, _frame) -> None:
        pass

    signal.signal(signal.SIGTERM, mine)
    interrupts.install()
    assert signal.getsignal(signal.SIGTERM) is mine


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
@pytest.mark.parametrize("signum", interrupts.TERMINATING, ids=lambda s: s.name)
def test_a_stop_signal_swallowed_by_a_finalizer_is_raised_at_the_next_check(signum: signal.Signals) -> None:
    # as in a new `harnessopt` process: no handler yet (in this test process Ray, imported by other
    # tests, handles SIGTERM, and a CI job started under nohup ignores SIGHUP; the fixture restores both)
    signal.signal(signum, signal.SIG_DFL)
    interrupts.install()

    class Holder:
        pass

    obj = Holder()
    weakref.finalize(obj, os.kill, os.getpid(), signum)  # Terminated lands in the finalizer, dropped
    try:
        del obj
        gc.collect()
        for _ in range(1000):
            pass
    except interrupts.Terminated:
        pass  # delivered outside the finalizer this time: the flag holds it all the same
    with pytest.raises(interrupts.Terminated) as got:
        interrupts.check()
    assert got.value.code == 128 + signum and got.value.name == signum.name


def test_deferred_holds_a_sigterm_until_the_block_ends_and_then_exits() -> None:
    interrupts.install()
    done = []
    with pytest.raises(interrupts.Terminated) as got, interrupts.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # both came: the stop wins, as it asks for more
        done.append("block finished")
    assert done == ["block finished"] and got.value.code == 128 + signal.SIGTERM


def test_a_deferred_block_inside_another_holds_until_the_outer_one_ends() -> None:
    interrupts.install()
    done = []
    with pytest.raises(interrupts.Terminated), interrupts.deferred():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("inner finished")
        done.append("outer finished")  # the inner block's end raised nothing
    assert done == ["inner finished", "outer finished"]
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():  # the next block holds again
        os.kill(os.getpid(), signal.SIGINT)
        done.append("again")
    assert done[-1] == "again"


def test_install_leaves_an_ignored_sighup_ignored() -> None:
    # `nohup harnessopt run ...`: a closed terminal must not stop the run, in or out of a deferred block
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    interrupts.install()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    with interrupts.deferred():
        os.kill(os.getpid(), signal.SIGHUP)
    interrupts.check()  # nothing pending


def test_sighup_exits_through_the_exit_callbacks(tmp_path: Path) -> None:
    # the terminal a run was started in closed (an ssh session dropped) without nohup
    marker = tmp_path / "cleaned"
    script = textwrap.dedent(f"""
        import signal, time
        from harnessopt.util import interrupts
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a terminal session: not inherited from nohup
        interrupts.install()
        interrupts.on_exit(lambda: open({str(marker)!r}, "w").write("yes"))
        try:
            print("ready", flush=True)
            time.sleep(60)
        finally:
            open({str(marker)!r} + ".finally", "w").write("yes")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=20) == 128 + signal.SIGHUP
    assert marker.read_text() == "yes"
    assert (tmp_path / "cleaned.finally").read_text() == "yes"  # the stack unwound, finally blocks ran


@pytest.mark.parametrize("when", ["exit callbacks", "teardown", "last moment"])
def test_a_stop_signal_after_the_command_finished_gets_its_line(tmp_path: Path, when: str) -> None:
    """A SIGTERM just after a command's summary: raised into the interpreter's teardown it was
    said nowhere (exit 0), or came once Python had put the default action back (exit -15, no line):
    QA. As the exit callbacks run, main says it (the other callbacks still run); later, in the
    teardown, the process ends at once with its line, both exit 143; after the last atexit
    callback it is ignored and the finished command's own code stands."""
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    done = tmp_path / "other-callback-ran"
    stop = "os.kill(os.getpid(), signal.SIGTERM), time.sleep(1)"
    hook = {
        "exit callbacks": f"interrupts.on_exit(lambda: open({str(done)!r}, 'w').close())\n"
        f"interrupts.on_exit(lambda: ({stop}))\n",  # newest first: this one runs first
        # an atexit callback the teardown runs before harnessopt's last one
        "teardown": "real = interrupts.last_words\n"
        f"interrupts.last_words = lambda: (real(), atexit.register(lambda: ({stop})))\n",
        # one registered before harnessopt's first: it runs after harnessopt's last
        "last moment": f"atexit.register(lambda: ({stop}))\n",
    }[when]
    script = (
        "import atexit, os, runpy, signal, sys, time\n"
        "from harnessopt.util import interrupts\n"
        f"{hook}"
        f"sys.argv = ['harnessopt', 'status', {str(ws)!r}]\n"
        "runpy.run_module('harnessopt', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() and "Traceback" not in r.stderr, r  # the command's own output came first
    said = [x for x in r.stderr.splitlines() if x.startswith("harnessopt:")]
    if when == "last moment":
        assert r.returncode == 0 and said == [], r
        return
    assert r.returncode == 128 + signal.SIGTERM, (r.returncode, r.stdout, r.stderr)
    (line,) = said
    assert "stopped by SIGTERM" in line, r.stderr
    if when == "exit callbacks":
        assert done.exists()  # the stop did not cut the other callbacks short
    else:
        assert "the command had finished" in line
