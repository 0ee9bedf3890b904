"""The warm interpreter stub (``runner.py warm``) against a cold ``python3 script``, on the host.

Each test runs the same script both ways, in the same directory with the same argv and
environment, one after the other, and compares exit status, stdout, stderr and the files it
wrote, byte for byte. No Docker needed: this is the stub the local sandbox uses as it is.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harnessopt.sandbox.image.build import sandbox_source_dir

RUNNER = sandbox_source_dir() / "runner.py"
STATIC_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: bytes
    files: dict[str, bytes]


def _files(out: Path) -> dict[str, bytes]:
    found = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    shutil.rmtree(out)
    out.mkdir()
    return found


def _load_runner() -> Any:
    spec = importlib.util.spec_from_file_location("ho_runner_under_test", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


def start_stub(cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """``python3 runner.py warm`` as task mode starts it: a pipe on fd 3; it and the write end."""
    return runner.spawn_warm([sys.executable, str(RUNNER), "warm"], env, cwd=str(cwd))


def cold(cwd: Path, argv: list[str], env: dict[str, str]) -> Result:
    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60
    )
    return Result(done.returncode, done.stdout, done.stderr, _files(cwd / "out"))


def warm(cwd: Path, argv: list[str], env: dict[str, str], job_cwd: Path | None = None) -> Result:
    """The stub started in ``cwd`` (or chdir'ing to ``job_cwd`` from the job) runs ``argv``."""
    proc, w = start_stub(cwd, STATIC_ENV)
    time.sleep(0.3)  # the job comes once the stub has warmed up, as in a pool
    if job_cwd is None:
        assert runner.hand_job((proc, w), argv, env) is proc
    else:
        os.write(w, json.dumps({"argv": argv, "env": env, "cwd": str(job_cwd)}).encode() + b"\n")
        os.close(w)
    out, err = proc.communicate(timeout=60)
    return Result(proc.returncode, out, err, _files((job_cwd or cwd) / "out"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "out").mkdir()
    return tmp_path


def both(
    work: Path,
    source: str,
    args: tuple[str, ...] = ("--out", "out"),
    env: dict[str, str] | None = None,
    script: str = "run.py",
) -> tuple[Result, Result]:
    """Write ``source`` to ``work/script`` and run it cold, then warm; both results."""
    path = work / script
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    job_env = {**STATIC_ENV, "ANTHROPIC_API_KEY": "tok-123", **(env or {})}
    argv = [script, *args]
    return cold(work, argv, job_env), warm(work, argv, job_env)


def test_output_and_files_are_those_of_a_cold_start(work: Path) -> None:
    c, w = both(
        work,
        """
        import json, sys
        from pathlib import Path
        print("to stdout", "é")
        sys.stdout.write("no newline at the end")
        print("to stderr", file=sys.stderr)
        out = Path(sys.argv[sys.argv.index("--out") + 1])
        (out / "answer.json").write_text(json.dumps({"a": 1}))
        (out / "sub").mkdir()
        (out / "sub" / "raw.bin").write_bytes(bytes(range(256)))
        """,
    )
    assert c == w
    assert c.files["sub/raw.bin"] == bytes(range(256)) and c.stdout.startswith(b"to stdout")


def test_argv_path_file_name_and_globals(work: Path) -> None:
    """In a symlinked directory, as /ho/harness is: sys.path[0] is the resolved one."""
    src = """
        import sys
        print(sys.argv, sys.orig_argv[1:], sys.path, __file__, __name__)
        print([(k, type(v).__name__) for k, v in globals().items()], __loader__.path, __cached__)
        print("difflib" in sys.modules, file=sys.stderr)
    """
    (work / "copy" / "harness").mkdir(parents=True)
    (work / "copy" / "harness" / "run.py").write_text(textwrap.dedent(src))
    (work / "slot").mkdir()
    (work / "slot" / "harness").symlink_to(work / "copy" / "harness")
    for script in ("slot/harness/run.py", str(work / "slot/harness/run.py"), "./copy/harness/run.py"):
        argv = [script, "--task", "t.json", "--x", "a b"]
        env = {**STATIC_ENV}
        c, w = cold(work, argv, env), warm(work, argv, env)
        assert (c.code, c.stdout) == (w.code, w.stdout)
        assert str(work / "copy" / "harness") in c.stdout.decode()
        assert (c.stderr, w.stderr) == (b"False\n", b"True\n")  # the warm one really was warm


def test_uncaught_exception_traceback(work: Path) -> None:
    c, w = both(
        work,
        """
        def parse(x):
            return int(x)
        try:
            parse("nope")
        except ValueError as e:
            raise RuntimeError("could not parse") from e
        """,
    )
    assert c == w
    assert c.code == 1 and b'File "' + str(work / "run.py").encode() in c.stderr
    assert b"runner.py" not in w.stderr


def test_a_replaced_excepthook_and_its_own_failure(work: Path) -> None:
    c, w = both(
        work,
        """
        import sys
        def hook(t, v, tb):
            print("hook saw", t.__name__, tb.tb_frame.f_code.co_name)
            raise OSError("the hook broke")
        sys.excepthook = hook
        raise KeyError("k")
        """,
    )
    assert c == w and b"Error in sys.excepthook" in c.stderr and b"hook saw KeyError <module>" in c.stdout


@pytest.mark.parametrize("arg", ["3", "'a message'", "None", "0", ""])
def test_system_exit(work: Path, arg: str) -> None:
    c, w = both(work, f"import sys\nprint('before')\nsys.exit({arg})\n")
    assert c == w
    assert c.code == {"3": 3, "'a message'": 1}.get(arg, 0)


def test_keyboard_interrupt_dies_of_sigint_after_atexit(work: Path) -> None:
    c, w = both(work, "import atexit\natexit.register(print, 'bye')\nraise KeyboardInterrupt\n")
    assert c == w and c.code == -signal.SIGINT and c.stdout == b"bye\n"


def test_atexit_and_buffered_output(work: Path) -> None:
    c, w = both(
        work,
        """
        import atexit, sys, threading, time
        def late():
            time.sleep(0.2)
            print("thread done")
        threading.Thread(target=late).start()
        atexit.register(lambda: print("first registered, last run"))
        atexit.register(lambda: sys.stderr.write("atexit on stderr\\n"))
        print("buffered " * 1000, end="")
        """,
        env={},
    )
    assert c == w
    assert c.stdout.endswith(b"thread done\nfirst registered, last run\n")


def test_pickling_a_class_of_main(work: Path) -> None:
    c, w = both(
        work,
        """
        import copy, dataclasses, pickle, sys
        from pathlib import Path
        @dataclasses.dataclass
        class Point:
            x: int
            y: int = 2
        data = pickle.dumps(Point(1))
        print(data, pickle.loads(data), copy.deepcopy(Point(3)), Point.__module__)
        out = Path(sys.argv[sys.argv.index("--out") + 1])
        (out / "p.pickle").write_bytes(data)
        """,
    )
    assert c == w and b"Point(x=1, y=2)" in c.stdout


def test_environment_seen_by_a_child_process(work: Path) -> None:
    c, w = both(
        work,
        """
        import os, subprocess, sys
        print(sorted(os.environ.items()) == sorted(os.environ.items()))
        child = "import os; print(list(os.environ.items()))"
        subprocess.run([sys.executable, "-c", child], check=True)
        os.system("env | sort")
        print(os.environb.get(b"TASK_FLAG"), os.getenv("ANTHROPIC_API_KEY"), os.getcwd())
        """,
        env={"TASK_FLAG": "on", "HO_FLAG_X": "1"},
    )
    assert c == w and b"tok-123" in c.stdout and b"TASK_FLAG=on" in c.stdout


@pytest.mark.parametrize(
    "var", [{"PYTHONHASHSEED": "0"}, {"LC_ALL": "C"}, {"TZ": "Asia/Tokyo"}, {"OPENSSL_CONF": "/dev/null"}]
)
def test_a_startup_variable_the_stub_lacks_takes_a_real_cold_start(work: Path, var: dict[str, str]) -> None:
    c, w = both(
        work,
        """
        import os, sys, time
        seeded = "PYTHONHASHSEED" in os.environ  # a random seed differs run to run
        print(hash("abc") if seeded else "-", sys.flags.hash_randomization, sys.stdout.encoding, time.tzname)
        print("difflib" in sys.modules, sys.orig_argv[1:])
        """,
        env=var,
    )
    assert c == w and c.code == 0
    assert b"False" in w.stdout  # execve'd: nothing pre-imported


def test_a_changed_pythonpath_takes_a_real_cold_start(work: Path) -> None:
    (work / "lib").mkdir()
    (work / "lib" / "helper.py").write_text("VALUE = 'from lib'\n")
    src = "import sys, helper\nprint(helper.VALUE, sys.path[1:2], 'difflib' in sys.modules)\n"
    c, w = both(work, src, env={"PYTHONPATH": str(work / "lib")})
    assert c == w and b"from lib" in c.stdout and b"False" in c.stdout


@pytest.mark.parametrize(
    "source",
    ["print('ok'\n", "x = 1\n\0\n", "def f():\nreturn 1\n"],
    ids=["syntax", "null-byte", "indentation"],
)
def test_a_script_that_does_not_compile(work: Path, source: str) -> None:
    c, w = both(work, source)
    assert c == w and c.code == 1 and c.stderr


def test_a_missing_script(work: Path) -> None:
    argv = ["nowhere.py", "--out", "out"]
    c, w = cold(work, argv, dict(STATIC_ENV)), warm(work, argv, dict(STATIC_ENV))
    assert c == w and c.code == 2 and b"can't open file" in c.stderr


def test_eof_without_a_job_exits_silently(work: Path) -> None:
    proc, w = start_stub(work, STATIC_ENV)
    os.close(w)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (0, b"", b"")


def test_the_job_pipe_is_closed_before_the_script_runs(work: Path) -> None:
    c, w = both(work, "import os\nprint(sorted(os.listdir('/proc/self/fd')))\n")
    assert c == w


def test_the_jobs_cwd(work: Path) -> None:
    (work / "run.py").write_text(
        "import os, sys\nprint(os.getcwd(), sys.path[0], __file__)\nopen('out/f', 'w').write('x')\n"
    )
    (work / "elsewhere").mkdir()
    argv = [str(work / "run.py")]
    c = cold(work, argv, dict(STATIC_ENV))
    w = warm(work / "elsewhere", argv, dict(STATIC_ENV), job_cwd=work)
    assert c == w and c.files == {"f": b"x"}


def test_a_dead_stub_is_not_handed_the_job(work: Path) -> None:
    """The runner falls back to a cold start: hand_job says the stub is gone, drops its output."""
    proc, w = start_stub(work, {**STATIC_ENV, "PYTHONPATH": "/nonexistent"})
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert runner.hand_job((proc, w), ["run.py"], dict(STATIC_ENV)) is None
    assert proc.stdout is not None and proc.stdout.closed


@pytest.mark.parametrize("line", [b"not json\n", b'{"argv": ["run.py"]}\n', b'{"argv": 3, "env": {}}\n'])
def test_a_malformed_job_is_refused_in_one_line(work: Path, line: bytes) -> None:
    proc, w = start_stub(work, STATIC_ENV)
    os.write(w, line)
    os.close(w)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (2, b"")
    assert err.startswith(b"harnessopt runner: bad job for the warm interpreter: ") and err.count(b"\n") == 1
