"""LocalSandbox with pre-started, warm interpreters (``rollout.warm_interpreter``, issue 15).

The same harness runs cold (warm_interpreter off) and warm in every isolation mode available
here; RunOutput and the /out files must be the same bytes once the per-task temp paths are
named alike. The pool's life: what it pre-starts, what a candidate change and close() leave.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harnessopt.protocols import RunOutput, RunSpec
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.sandbox import LocalSandbox
from tests.support.proc import live_in_session

MODES = [
    pytest.param(m, marks=pytest.mark.skipif(not isolation.available(m), reason=f"{m} cannot run here"))
    for m in isolation.MODES
]

# One harness, its behaviour chosen by the task's input, so one pool serves every case.
BEHAVIOURS = """
import atexit, pickle, signal, subprocess

class Point:
    def __init__(self, x):
        self.x = x

def observe():
    print("name", __name__, "file", __file__)
    print("argv", sys.argv, "orig_argv", sys.orig_argv[1:])
    print("fds", sorted(os.listdir("/proc/self/fd")))
    print("path", sys.path)
    print("cwd", os.getcwd(), "flags", sys.flags)
    print("env", sorted(os.environ.items()))
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.environ.items()))"],
                           capture_output=True, text=True)
    print("child env", child.stdout.strip(), child.returncode)
    shell = subprocess.run(["sh", "-c", "env | sort"], capture_output=True, text=True)
    print("shell env", shell.stdout.replace(chr(10), " "))
    print("pickle", pickle.dumps(Point(3), protocol=4).hex())
    print("home", sorted(os.listdir(os.environ["HOME"])), "cwd entries", sorted(os.listdir(".")))
    sys.stderr.write("to stderr\\n")
    atexit.register(lambda: print("atexit ran"))
    answer("the answer")
    os.makedirs(os.path.join(OUT, "sub"))
    with open(os.path.join(OUT, "sub", "data.bin"), "wb") as f:
        f.write(bytes(range(256)))
    os.symlink("answer.txt", os.path.join(OUT, "link"))
    os.symlink("/etc/hostname", os.path.join(OUT, "outside"))
    os.symlink("/etc", os.path.join(OUT, "sub", "etc"))  # a directory outside: not walked into
    os.mkfifo(os.path.join(OUT, "fifo"))
    print("no newline at the end", end="")

def deep(n):
    if n == 0:
        raise ValueError("boom " + ARGS.task)
    deep(n - 1)

case = json.load(open(ARGS.task))["input"]
if case == "observe":
    observe()
elif case == "traceback":
    print("before the crash")
    deep(3)
elif case == "exit-int":
    sys.exit(3)
elif case == "exit-str":
    sys.exit("a message to stderr")
elif case == "exit-none":
    atexit.register(lambda: print("bye"))
    sys.exit(None)
elif case == "os-exit":
    print("unflushed?", end="")
    os._exit(5)
elif case == "signal":
    print("dying")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
elif case == "interrupt":
    raise KeyboardInterrupt
elif case == "leftover":
    subprocess.Popen(["sleep", "30"], start_new_session=True)
    open(os.path.join(os.environ["HOME"], "mark"), "w").write("x")
    answer(sorted(os.listdir(os.environ["HOME"])))
"""
CASES = ["observe", "traceback", "exit-int", "exit-str", "exit-none", "os-exit", "signal", "interrupt"]


TMP_ROOT = re.compile(re.escape(tempfile.gettempdir()) + r"/ho-local-[A-Za-z0-9_]+")
TMP_OUT = re.compile(re.escape(tempfile.gettempdir()) + r"/ho-out-[A-Za-z0-9_]+")  # a warm task's --out


def _spec(skill: Path, harness: Path, lease: Any, case: str, timeout_s: float = 20.0) -> RunSpec:
    task = {"id": "t1", "input": case, "split": "train", "metadata": {}}
    return RunSpec(task, skill, harness, {"HARNESSOPT_TARGET_MODEL": "m"}, lease, timeout_s)


def _seen(out: RunOutput, out_dir: Path) -> dict[str, Any]:
    """What the harness left, per-task temp paths named alike: RunOutput fields and /out's files."""

    def norm(text: str) -> str:
        text = text.replace(str(out_dir.resolve()), "<OUT>")
        return TMP_OUT.sub("<OUT>", TMP_ROOT.sub("<ROOT>", text))

    files: dict[str, Any] = {}
    for path in sorted(out_dir.rglob("*")):
        rel = str(path.relative_to(out_dir))
        if path.is_symlink():
            files[rel] = ("link", os.readlink(path))
        elif path.is_fifo():
            files[rel] = "fifo"
        elif path.is_file():
            files[rel] = path.read_bytes()
        else:
            files[rel] = ("dir", oct(path.stat().st_mode))
    return {
        "exit_code": out.exit_code,
        "error_class": out.error_class,
        "stdout": norm(out.stdout_tail),
        "stderr": norm(out.stderr_tail),
        "notes": out.notes,
        "out_dir": out.out_dir == out_dir,
        "out_mode": oct(out_dir.stat().st_mode),
        "files": files,
    }


def _differences(cold: dict[str, Any], warm: dict[str, Any]) -> str:
    """The fields (and, in text, the lines) where the two runs differ."""
    out = []
    for k in cold:
        if cold[k] != warm.get(k):
            if isinstance(cold[k], str):
                pairs = zip(cold[k].splitlines(), warm[k].splitlines(), strict=False)
                out += [f"{k}: cold {a!r} warm {b!r}" for a, b in pairs if a != b]
            else:
                out.append(f"{k}: cold {cold[k]!r} warm {warm.get(k)!r}")
    return "; ".join(out)


def _ready(sb: LocalSandbox, n: int = 1, within: float = 20.0) -> None:
    assert sb._pool is not None
    deadline = time.monotonic() + within
    while len(sb._pool.idle()) < n:
        assert time.monotonic() < deadline, "the pool did not pre-start a sandbox"
        time.sleep(0.02)


def _warmed(sb: LocalSandbox, spec: RunSpec, tmp_path: Path) -> None:
    """Two tasks of the candidate (the second arms the pool), then wait for a slot."""
    for i in range(2):
        assert sb.run(spec, tmp_path / f"seed-{i}").error_class is None
    _ready(sb)


def _gone(sids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(live_in_session(s) for s in sids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _runner() -> Any:
    """sandbox/runner.py as a module (the stub the local sandbox runs), for its constants."""
    import importlib.util

    from harnessopt.sandbox.local.sandbox import RUNNER

    spec = importlib.util.spec_from_file_location("ho_runner_for_test", RUNNER)
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner


def _removed(paths: list[Path], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(p.exists() for p in paths):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("mode", MODES)
def test_warm_runs_give_the_bytes_of_cold_runs(mode, candidate, gateway, tmp_path, small_cfg):
    skill, harness = candidate(BEHAVIOURS)
    cold = LocalSandbox(small_cfg(warm_interpreter=False), isolation_mode=mode)
    warm = LocalSandbox(small_cfg(warm_interpreter=True), isolation_mode=mode)
    try:
        assert cold._pool is None
        _warmed(warm, _spec(skill, harness, gateway.lease(), "exit-none"), tmp_path)
        assert warm._pool is not None
        for i, case in enumerate([*CASES, "observe"]):  # observe twice: the slot's first user left nothing
            (tmp_path / str(i)).mkdir()
            seen = []
            for name, sb in (("cold", cold), ("warm", warm)):
                if sb is warm:
                    _ready(warm)
                    taken = warm._pool.taken
                out_dir = tmp_path / str(i) / name
                out = sb.run(_spec(skill, harness, gateway.lease(f"tok-{case}"), case), out_dir)
                seen.append(_seen(out, out_dir))
            assert warm._pool.taken == taken + 1, f"{case}: the warm run did not use a pre-started sandbox"
            assert seen[0] == seen[1], f"{case}: {_differences(*seen)}"
            expected = {"observe": 0, "exit-int": 3, "exit-str": 1, "exit-none": 0, "os-exit": 5}
            assert seen[0]["exit_code"] == expected.get(case, seen[0]["exit_code"]), case
            if case == "traceback":
                assert 'raise ValueError("boom " + ARGS.task)' in seen[0]["stderr"]
            if case == "observe":
                assert "atexit ran" in seen[0]["stdout"] and len(seen[0]["files"]) == 7
    finally:
        cold.close()
        warm.close()


@pytest.mark.parametrize("mode", MODES)
def test_the_deadline_starts_with_the_job_not_with_the_pre_start(
    mode, candidate, gateway, tmp_path, small_cfg
):
    skill, harness = candidate("time.sleep(float(json.load(open(ARGS.task))['input'])); answer('done')\n")
    sb = LocalSandbox(small_cfg(), isolation_mode=mode)
    try:
        _warmed(sb, _spec(skill, harness, gateway.lease(), "0"), tmp_path)
        time.sleep(2.5)  # the slot waits longer than the task may run
        ok = sb.run(_spec(skill, harness, gateway.lease(), "0.5", timeout_s=2.0), tmp_path / "ok")
        assert ok.error_class is None and (tmp_path / "ok" / "answer.txt").read_text() == "done"
        _ready(sb)
        t0 = time.monotonic()
        late = sb.run(_spec(skill, harness, gateway.lease(), "30", timeout_s=1.0), tmp_path / "late")
        assert late.error_class == "timeout" and late.exit_code is None
        assert 1.0 <= late.wall_s < 3.0 and time.monotonic() - t0 < 4.0
        assert sb._pool is not None and sb._pool.taken == 2
    finally:
        sb.close()


@pytest.mark.parametrize("mode", MODES)
def test_nothing_of_a_task_reaches_the_next(mode, candidate, gateway, tmp_path, small_cfg):
    """Each slot serves one task: the next task's home is fresh and the first one's leftovers died."""
    skill, harness = candidate(BEHAVIOURS)
    sb = LocalSandbox(small_cfg(concurrency=2), isolation_mode=mode)
    try:
        _warmed(sb, _spec(skill, harness, gateway.lease(), "exit-none"), tmp_path)
        for i in range(2):
            _ready(sb)
            assert sb._pool is not None
            used = sb._pool.idle()[0]  # the one the next task takes
            out = sb.run(_spec(skill, harness, gateway.lease(), "leftover"), tmp_path / f"left-{i}")
            assert out.error_class is None
            assert (tmp_path / f"left-{i}" / "answer.txt").read_text() == "['mark']"
            assert _gone([used.child.pid])  # the background sleep too
            assert _removed([used.root]), "a used slot's dir was left"  # by the pool's thread
        assert sb._pool is not None and sb._pool.taken == 2
    finally:
        sb.close()


@pytest.mark.parametrize("mode", MODES)
def test_another_candidate_discards_the_slots_and_close_leaves_nothing(
    mode, candidate, gateway, tmp_path, small_cfg
):
    skill, harness = candidate("answer('first')\n")
    sb = LocalSandbox(small_cfg(concurrency=2), isolation_mode=mode)
    try:
        _warmed(sb, _spec(skill, harness, gateway.lease(), "x"), tmp_path)
        _ready(sb, 2)
        assert sb._pool is not None
        first = sb._pool.idle()
        assert len(first) == 2 and all(s.root.is_dir() and live_in_session(s.child.pid) for s in first)

        # The candidate changed in place: its slots are not used, the task sees the new harness.
        candidate("answer('second')\n")
        taken = sb._pool.taken
        out = sb.run(_spec(skill, harness, gateway.lease(), "x"), tmp_path / "second")
        assert out.error_class is None and (tmp_path / "second" / "answer.txt").read_text() == "second"
        assert sb._pool.taken == taken
        assert _gone([s.child.pid for s in first]) and _removed(
            [s.root for s in first] + [s.out for s in first]
        )

        sb.run(_spec(skill, harness, gateway.lease(), "x"), tmp_path / "again")
        _ready(sb, 2)
        now = sb._pool.idle()
        copies = sb._copies.root if sb._copies is not None else None
    finally:
        sb.close()
    assert _gone([s.child.pid for s in now]) and not any(s.root.exists() for s in now)
    assert sb._pool.idle() == [] and (copies is None or not copies.exists())


def test_close_kills_a_running_warm_task_and_its_slot(candidate, gateway, tmp_path, small_cfg):
    skill, harness = candidate("""
        if json.load(open(ARGS.task))["input"] == "slow":
            open(os.path.join(OUT, "up"), "w").close()
            time.sleep(60)
    """)
    sb = LocalSandbox(small_cfg())
    _warmed(sb, _spec(skill, harness, gateway.lease(), "quick"), tmp_path)
    slot = sb._pool.idle()[0] if sb._pool is not None else None
    assert slot is not None
    done: list[RunOutput] = []
    runner = threading.Thread(
        target=lambda: done.append(sb.run(_spec(skill, harness, gateway.lease(), "slow"), tmp_path / "o"))
    )
    runner.start()
    deadline = time.monotonic() + 10
    while not (slot.out / "up").exists():
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.02)
    t0 = time.monotonic()
    sb.close()
    runner.join(10)
    assert not runner.is_alive() and time.monotonic() - t0 < 5
    assert done and done[0].error_class == "crash" and (tmp_path / "o" / "up").exists()
    assert _gone([slot.child.pid]) and not slot.root.exists() and not slot.out.exists()


def test_warm_off_starts_nothing_ahead(candidate, gateway, tmp_path, small_cfg):
    skill, harness = candidate("answer('x')\n")
    sb = LocalSandbox(small_cfg(warm_interpreter=False))
    for i in range(3):
        assert sb.run(_spec(skill, harness, gateway.lease(), "x"), tmp_path / f"o{i}").error_class is None
    assert sb._pool is None
    sb.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_warm_run_skips_the_interpreter_start_and_imports(mode, candidate, gateway, tmp_path, small_cfg):
    """What a harness can tell apart (docs/sandbox.md): modules the stub imported ahead."""
    ahead = next(m for m in _runner().WARM_IMPORTS if m in ("http.client", "urllib.parse", "difflib"))
    skill, harness = candidate(f"answer({ahead!r} in sys.modules)\n")
    sb = LocalSandbox(small_cfg(), isolation_mode=mode)
    try:
        _warmed(sb, _spec(skill, harness, gateway.lease(), "x"), tmp_path)
        assert (tmp_path / "seed-0" / "answer.txt").read_text() == "False"  # cold
        sb.run(_spec(skill, harness, gateway.lease(), "x"), tmp_path / "warm")
        assert (tmp_path / "warm" / "answer.txt").read_text() == "True"
        # A task whose interpreter-start environment differs from the slots' starts cold.
        _ready(sb)
        spec = _spec(skill, harness, gateway.lease(), "x")
        spec = RunSpec(spec.task, skill, harness, {**spec.env, "PYTHONHASHSEED": "7"}, spec.gateway, 20.0)
        sb.run(spec, tmp_path / "other-env")
        assert (tmp_path / "other-env" / "answer.txt").read_text() == "False"
    finally:
        sb.close()


def test_a_runner_under_tmp_is_reached_under_bwrap(candidate, gateway, tmp_path, small_cfg, monkeypatch):
    """bwrap gives each task a private /tmp: a harnessopt checked out under /tmp (a CI clone) has
    its runner.py there, bound read-only where it is, so its warm runs still happen."""
    import shutil
    import tempfile

    from harnessopt.sandbox.local import sandbox as local

    if not isolation.available("bwrap"):
        pytest.skip("bwrap is not installed")
    where = Path(tempfile.mkdtemp(prefix="ho-runner-in-tmp-"))
    try:
        shutil.copy(local.RUNNER, where / "runner.py")
        monkeypatch.setattr(local, "RUNNER", where / "runner.py")
        ahead = next(m for m in _runner().WARM_IMPORTS if m in ("http.client", "urllib.parse", "difflib"))
        skill, harness = candidate(f"answer({ahead!r} in sys.modules)\n")
        sb = LocalSandbox(small_cfg(), isolation_mode="bwrap")
        try:
            _warmed(sb, _spec(skill, harness, gateway.lease(), "x"), tmp_path)
            out = sb.run(_spec(skill, harness, gateway.lease(), "x"), tmp_path / "warm")
            assert out.error_class is None, out
            assert (tmp_path / "warm" / "answer.txt").read_text() == "True"  # the stub ran it
        finally:
            sb.close()
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_slots_start_with_every_variable_the_stub_compares():
    """local_pool.static_env keeps all that runner.py's startup_env compares (else every job with
    such a variable would be started cold by the stub), and nothing secret."""
    from harnessopt.sandbox.local.pool import static_env

    runner = _runner()
    names = ["PATH", "HOME", "LANG", "LANGUAGE", "TZ", "GLIBC_TUNABLES", "TMPDIR", "PYTHONPATH", "LC_ALL"]
    names += ["LD_PRELOAD", "MALLOC_ARENA_MAX", "OPENSSL_CONF", "SSL_CERT_FILE", "HO_FLAG_X", "USER"]
    env = {n: "v" for n in [*names, "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HARNESSOPT_TARGET_MODEL"]}
    assert set(runner.startup_env(env)) <= set(static_env(env))
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HO_FLAG_X"} & set(static_env(env))


OTHER_FS = Path("/dev/shm")


@pytest.mark.skipif(
    not OTHER_FS.is_dir() or os.stat(OTHER_FS).st_dev == os.stat(tempfile.gettempdir()).st_dev,
    reason="no second file system to put the out dir on",
)
def test_an_out_dir_on_another_file_system_gets_the_same_files(candidate, gateway, tmp_path, small_cfg):
    """Where a rename cannot move /out, the copy makes the same tree: files, a binary, a subdir,
    symlinks (one pointing outside, not followed) and a FIFO (not opened)."""
    skill, harness = candidate(BEHAVIOURS)
    cold = LocalSandbox(small_cfg(warm_interpreter=False))
    warm = LocalSandbox(small_cfg(warm_interpreter=True))
    where = Path(tempfile.mkdtemp(prefix="ho-test-outs-", dir=OTHER_FS))
    try:
        _warmed(warm, _spec(skill, harness, gateway.lease(), "exit-none"), tmp_path)
        seen = []
        for name, sb in (("cold", cold), ("warm", warm)):
            out = sb.run(_spec(skill, harness, gateway.lease("tok"), "observe"), where / name)
            seen.append(_seen(out, where / name))
        assert warm._pool is not None and warm._pool.taken == 1
        assert seen[0] == seen[1], _differences(*seen)
        assert seen[1]["files"]["fifo"] == "fifo" and seen[1]["files"]["outside"] == ("link", "/etc/hostname")
        assert seen[1]["files"]["sub/etc"] == ("link", "/etc") and len(seen[1]["files"]) == 7
    finally:
        cold.close()
        warm.close()
        shutil.rmtree(where, ignore_errors=True)
