"""LocalSandbox: a subprocess per task, for machines without Docker. Weaker isolation.

What it does: skill/harness outside the workspace (with bwrap one copy per candidate bound
read-only into each task's dir, else a private copy per task; the workspace is never touched), a
scrubbed environment (nothing from the host but PATH and LANG: no real API key), its own session
and a wrapper chosen by ``isolation.detect()`` (``bwrap``: read-only host, workspace hidden, own
PID namespace; ``unshare``: own PID namespace; ``session``: a subreaper), so that nothing the
harness starts outlives its task; rlimits (address space, file size, CPU time, processes, no core
files), capped stdout/stderr. What it cannot do: hide the network; without bwrap, hide the host's
files. ``harnessopt.sandbox.local_sandbox`` warns about what is exposed.

With ``rollout.warm_interpreter`` the next tasks' sandboxes (task dir, wrapper, rlimits, and
``runner.py warm`` waiting for its job) are started ahead while the current tasks wait on the
model (``sandbox.local.pool``); each still serves one task, and its results are those of a cold start.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.errors import UserError
from harnessopt.protocols import AgentResult, GatewayLease, RunOutput, RunSpec, Sandbox, ShellResult
from harnessopt.sandbox.image.build import sandbox_source_dir
from harnessopt.sandbox.local import isolation
from harnessopt.sandbox.local.pool import Key, Slot, WarmPool, copy_out, job_line, static_env
from harnessopt.sandbox.prepared import PreparedCopies
from harnessopt.util.proc import Finished, Prestarted, kill_marked, kill_session, run_in_session

RUNNER = sandbox_source_dir() / "runner.py"  # its ``edit`` mode is the one editor implementation
EDIT_TIMEOUT_S = 20.0  # deadline of one editor operation
EDIT_REPLY_CAP = 8 << 20  # a 1 MiB file of control characters is ~6 MiB of JSON
TERM_GRACE_S = 0.2  # leftovers of a task get SIGTERM, then this long before SIGKILL
OUTPUT_CAP = 30_000  # bytes of a shell command's output shown to the optimizer
FSIZE_LIMIT_KB = 256 * 1024  # largest file one shell command may write (``ulimit -f``)
# RLIMIT_NPROC counts every process and thread of the uid, so a task's limit is what the uid runs
# when it starts plus ``rollout.pids``, plus this much room for the host's own new threads.
NPROC_SLACK = 64
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


class LocalSandbox(Sandbox):
    """Runs ``python harness/run.py`` in a subprocess with limits; thread-safe.

    ``isolation_mode``: ``bwrap``, ``unshare`` or ``session`` (default: the strongest available
    here). ``announce`` hears the warning, once, when the optimizer's bash is first put on the host.
    """

    name = "local"
    task_python = sys.executable  # tasks run with this interpreter, on this host

    def __init__(
        self,
        cfg: RolloutConfig,
        *,
        isolation_mode: str | None = None,
        announce: Callable[[str], None] | None = None,
    ):
        self.cfg = cfg
        self.isolation = isolation_mode or isolation.detect()
        if not isolation.available(self.isolation):
            raise UserError(f"local isolation {self.isolation!r} does not work on this machine")
        self._announce = announce
        self._shell_warned = False
        self._live: set[int] = set()  # sessions of running tasks, killed by close()
        self._lock = threading.Lock()
        self._closed = False
        self._copies: PreparedCopies | None = None  # bwrap: one read-only copy per candidate
        # rollout.warm_interpreter: the next tasks' sandboxes started ahead (sandbox.local.pool)
        self._pool = WarmPool(cfg.concurrency, self._prestart) if cfg.warm_interpreter else None
        self._tmp_dev = os.stat(tempfile.gettempdir()).st_dev

    @property
    def exposure(self) -> str:
        """What a harness run by this sandbox can reach (for the warning printed when it is chosen)."""
        reach = isolation.HARNESS_REACH[self.isolation]
        return f"each harness runs on this host ({self.isolation}) as uid {os.getuid()} and can reach {reach}"

    def run(self, spec: RunSpec, out_dir: Path) -> RunOutput:
        """Run the harness on ``spec.task``; its ``--out`` directory is ``out_dir`` (with a warm
        interpreter, a directory made ahead, renamed or copied to ``out_dir`` afterwards)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        key = self._warm_key(spec, out_dir)
        slot = self._pool.take(key, spec) if self._pool is not None and key is not None else None
        if slot is not None:
            return self._run_warm(slot, spec, out_dir)
        with tempfile.TemporaryDirectory(prefix="ho-local-") as tmp, self._candidate(spec, Path(tmp)) as ro:
            root = Path(tmp).resolve()
            (root / "task.json").write_text(json.dumps(spec.task))
            (root / "home").mkdir()
            out = out_dir.resolve()
            argv = isolation.wrap(
                [sys.executable, str(root / "harness" / "run.py"), "--task", str(root / "task.json")]
                + ["--skill", str(root / "skill"), "--out", str(out)],
                self.isolation,
                writable=[root, out],
                hide=isolation.workspace_roots([spec.skill_dir, spec.harness_dir, out]),
                cwd=root,
                grace_s=TERM_GRACE_S,
                readonly=ro,
            )
            with self._tracked() as started:
                done = run_in_session(
                    argv,
                    timeout_s=spec.timeout_s,
                    cap=self.cfg.output_cap_kb * 1024,
                    cwd=root,
                    env=self._env(spec, root),
                    preexec_fn=self._limits(tasks_of_uid(os.getuid()) + self.cfg.pids + NPROC_SLACK),
                    started=started,
                    term_grace_s=TERM_GRACE_S,
                )
            if self.isolation == "bwrap" and (done.returncode is None or done.returncode < 0):
                # killed (deadline, close): a namespace that left the session, orphaned at its start
                kill_marked({str(root)})
            return self._output(done, out_dir)

    @contextlib.contextmanager
    def _tracked(self) -> Iterator[Callable[[int], None]]:
        """``started(pid)`` for a task's session: close() kills it while the block runs."""
        pids: list[int] = []

        def started(pid: int) -> None:
            with self._lock:
                self._live.add(pid)
                pids.append(pid)
                closed = self._closed
            if closed:  # close() ran while this task was starting: do not let it run on
                kill_session(pid)

        try:
            yield started
        finally:
            with self._lock:
                self._live.difference_update(pids)

    def _warm_key(self, spec: RunSpec, out_dir: Path) -> Key | None:
        """What a pre-started sandbox must have been made for to run this task; None when the
        task cannot use one (``out_dir`` not empty)."""
        if self._pool is None or any(out_dir.iterdir()):
            return None
        env = static_env(self._env(spec, Path("/")))
        env.pop("HOME", None), env.pop("TMPDIR", None)
        return Key(
            skill=spec.skill_dir.resolve(),
            harness=spec.harness_dir.resolve(),
            signature=self._prepared().signature(spec.skill_dir, spec.harness_dir),
            hide=tuple(isolation.workspace_roots([spec.skill_dir, spec.harness_dir, out_dir])),
            env=tuple(sorted(env.items())),
        )

    def _prestart(self, key: Key, spec: RunSpec) -> Slot:
        """A task's sandbox made ahead for ``key`` (``spec``: a task of that candidate, for its
        environment's static part): task dir, wrapper, rlimits, and the stub waiting for its job."""
        stack = contextlib.ExitStack()
        try:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ho-local-")))
            root = tmp.resolve()
            ro = stack.enter_context(self._candidate(spec, tmp))
            if self._prepared().signature(key.skill, key.harness) != key.signature:
                raise RuntimeError("the candidate changed while its sandbox was prepared")
            (root / "home").mkdir()
            # --out: its own dir beside the task dir (as a cold task's is), renamed to the caller's
            out = Path(tempfile.mkdtemp(prefix="ho-out-")).resolve()
            stack.callback(shutil.rmtree, out, ignore_errors=True)
            argv = isolation.wrap(
                [sys.executable, str(RUNNER), "warm"],
                self.isolation,
                writable=[root, out],
                hide=key.hide,
                cwd=root,
                grace_s=TERM_GRACE_S,
                # bwrap's private /tmp or a hidden workspace may cover the runner (a checkout in
                # /tmp, a venv in the workspace): bound read-only where it is, it stays visible
                readonly=[*ro, (RUNNER, RUNNER)],
            )
            child = Prestarted(
                argv,
                cap=self.cfg.output_cap_kb * 1024,
                cwd=root,
                env=static_env(self._env(spec, root)),
                preexec_fn=self._limits(tasks_of_uid(os.getuid()) + self.cfg.pids + NPROC_SLACK),
                term_grace_s=TERM_GRACE_S,
            )
            stack.callback(kill_marked, {str(root)})  # then whatever left the session (bwrap's)
            stack.callback(child.discard)  # first on close: the session, then the dirs
            return Slot(key, root, out, child, stack.close)
        except BaseException:
            stack.close()
            raise

    def _run_warm(self, slot: Slot, spec: RunSpec, out_dir: Path) -> RunOutput:
        """The task in a pre-started sandbox: job written (its deadline starts), /out moved in place."""
        try:
            root = slot.root
            (root / "task.json").write_text(json.dumps(spec.task))
            slot.out.chmod(stat.S_IMODE(out_dir.stat().st_mode))  # as the caller made it
            argv = [str(root / "harness" / "run.py"), "--task", str(root / "task.json")]
            argv += ["--skill", str(root / "skill"), "--out", str(slot.out)]
            with self._tracked() as started:
                started(slot.child.pid)
                env = {**self._env(spec, root), **isolation.wrapper_env(self.isolation, root)}
                done = slot.run(job_line(argv, env), spec.timeout_s)
            # Nothing the harness left there (a FIFO, a symlink) is opened or followed: a rename
            # over the empty out_dir, or on another file system a copy that takes care of it.
            if out_dir.stat().st_dev == self._tmp_dev:
                os.rename(slot.out, out_dir)
            else:
                copy_out(slot.out, out_dir)
        finally:
            slot.child.discard()  # if the run did not get to kill the session
            if self._pool is not None:  # (slots come from it) dirs removed off the task's path
                self._pool.retire(slot)
        return self._output(done, out_dir)

    @contextlib.contextmanager
    def _candidate(self, spec: RunSpec, tmp: Path) -> Iterator[list[tuple[Path, Path]]]:
        """skill/ and harness/ of the task dir ``tmp``: with ``bwrap``, the candidate's one prepared
        copy bound read-only over two empty dirs (the pairs yielded); otherwise a private copy,
        since without a mount namespace a shared copy could be changed by one task for the next."""
        root = tmp.resolve()
        if self.isolation != "bwrap":
            for part, src in (("skill", spec.skill_dir), ("harness", spec.harness_dir)):
                shutil.copytree(src, root / part, ignore=shutil.ignore_patterns(".git"))
            yield []
            return
        with self._prepared().use(spec.skill_dir, spec.harness_dir) as copy:
            (root / "skill").mkdir()
            (root / "harness").mkdir()
            yield [(copy / "skill", root / "skill"), (copy / "harness", root / "harness")]

    def shell(self, view: Path) -> LocalShell:
        """The optimizer's bash on the host, in ``view``, wrapped like the tasks; warns once."""
        if self._announce is not None and not self._shell_warned:
            self._shell_warned = True
            self._announce(
                f"optimizer: its bash tool runs on this host ({self.isolation}) as uid {os.getuid()}; "
                f"isolation is weaker: it can reach {isolation.SHELL_REACH[self.isolation]}"
            )
        return LocalShell(view, isolation_mode=self.isolation)

    def close(self) -> None:
        """Kill the sessions of tasks still running (Ctrl-C, a crash): nothing outlives the run."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        if self._pool is not None:
            self._pool.close()
        for leader in live:
            kill_session(leader)
        with self._lock:
            copies, self._copies = self._copies, None
        if copies is not None:
            copies.close()

    def _prepared(self) -> PreparedCopies:
        """The candidates' prepared copies (bwrap binds them; every mode reads their signature).
        Once closed, none: a task that starts after close() (a run stopping) would make a folder
        nothing removes."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox is closed")
            if self._copies is None:
                self._copies = PreparedCopies(_copy_tree, skip=(".git",), group=None)
            return self._copies

    def _env(self, spec: RunSpec, root: Path) -> dict[str, str]:
        # Built from nothing: the host's ANTHROPIC_API_KEY and the rest of its environment stay out.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(root / "home"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(root / "home"),
        }
        env.update(spec.env)
        env["ANTHROPIC_BASE_URL"] = spec.gateway.base_url
        env["ANTHROPIC_API_KEY"] = spec.gateway.token
        env["OPENAI_BASE_URL"] = spec.gateway.base_url + "/v1"  # the gateway's Chat Completions API
        env["OPENAI_API_KEY"] = spec.gateway.token
        return env

    def _limits(self, nproc: int) -> Callable[[], None]:
        """What the child runs before exec: rlimits (the session comes from start_new_session).

        ``nproc``: RLIMIT_NPROC, counted per uid by the kernel, and ignored for root.
        """
        mem = self.cfg.memory_mb * 1024 * 1024
        fsize = self.cfg.out_mb * 1024 * 1024
        # CPU seconds: the wall limit bounds it anyway; this stops a spinning orphan.
        cpu = int(max(self.cfg.timeout_s, 1) * 2) + 5
        limits = (
            (resource.RLIMIT_AS, mem),
            (resource.RLIMIT_FSIZE, fsize),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NPROC, nproc),
        )

        def apply() -> None:
            for which, value in limits:
                with contextlib.suppress(ValueError, OSError):  # a lower hard limit already applies
                    resource.setrlimit(which, (value, value))

        return apply

    def _output(self, done: Finished, out_dir: Path) -> RunOutput:
        fsize = self.cfg.out_mb * 1024 * 1024
        sizes = [p.stat().st_size for p in out_dir.rglob("*") if p.is_file() and not p.is_symlink()]
        sizes += [done.stdout_bytes, done.stderr_bytes]
        # RLIMIT_FSIZE stops each file at the cap (Python gets EFBIG, others SIGXFSZ); the total is
        # only checked afterwards, the local sandbox cannot bound it.
        code = done.returncode
        # A signal comes back as -N, or as 128+N through a namespace's init (bwrap, unshare).
        xfsz = (-signal.SIGXFSZ,) if self.isolation == "session" else (-signal.SIGXFSZ, 128 + signal.SIGXFSZ)
        capped = code in xfsz or max(sizes) >= fsize or sum(sizes) > fsize
        if done.timed_out:
            error, note = "timeout", f"killed after the {done.wall_s:.0f}s wall-clock limit"
        elif capped:
            error, note = "output_cap", f"output cap hit ({self.cfg.out_mb} MB per file or in total)"
        elif code != 0:
            error, note = "crash", f"harness exited with code {code}"
        else:
            error, note = None, ""
        notes = [isolation.NOTES[self.isolation]] + ([note] if note else [])
        return RunOutput(code, done.wall_s, out_dir, done.stdout.rstrip("\n"), done.stderr, error, notes)


class LocalShell:
    """The optimizer's ``bash`` on the host: ``bash -c`` in the view, in its own session.

    The environment is scrubbed to PATH, HOME (= the view) and LANG, so API keys of the host never
    reach the command. The command and everything it started are killed when it returns or at
    its timeout; ``ulimit -f`` bounds each file it writes. ``isolation_mode`` wraps it like a local
    task (default ``session``: a subreaper; ``bwrap`` makes the host read-only but the view): no
    network isolation, and no file-system isolation without bwrap.
    """

    def __init__(self, root: Path, *, output_cap: int = OUTPUT_CAP, isolation_mode: str = "session"):
        self.root = Path(root).resolve()
        self.isolation = isolation_mode
        self.view_root = str(self.root)
        self.output_cap = output_cap
        self.env = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ litter in the view
            "TERM": "dumb",
        }

    def run(self, command: str, timeout_s: float) -> ShellResult:
        """Run ``bash -c command`` in the view; stdout and stderr together, head and tail kept."""
        script = f"ulimit -f {FSIZE_LIMIT_KB} 2>/dev/null\n{command}"
        argv = isolation.wrap(
            ["bash", "-c", script], self.isolation, writable=[self.root], hide=[], cwd=self.root
        )
        done = run_in_session(
            argv,
            timeout_s=timeout_s,
            cap=self.output_cap,
            cwd=self.root,
            env=self.env,
            merge_stderr=True,
        )
        return ShellResult(output=done.stdout, exit_code=done.returncode, timed_out=done.timed_out)

    def edit(self, request: dict[str, Any]) -> dict[str, Any]:
        """One editor operation by the runner's ``edit`` mode in a subprocess (deadline, no links)."""
        done = run_in_session(
            [sys.executable, str(RUNNER), "edit", "--root", str(self.root)],
            timeout_s=EDIT_TIMEOUT_S,
            cap=EDIT_REPLY_CAP,
            env={"PATH": self.env["PATH"], "LANG": "C.UTF-8"},
            stdin=json.dumps(request).encode("utf-8"),
        )
        return parse_edit_reply(done.stdout, done.timed_out)

    def agent(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes,
        env: Mapping[str, str],
        timeout_s: float,
        gateway: GatewayLease | None,
    ) -> AgentResult:
        """A CLI agent on the host, in the view, wrapped like this shell's commands (``sandbox.agent``)."""
        from harnessopt.sandbox.local.agent import run_on_host

        return run_on_host(
            self.root,
            argv,
            stdin=stdin,
            env=env,
            timeout_s=timeout_s,
            gateway=gateway,
            isolation_mode=self.isolation,
        )


def _copy_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git"))


def parse_edit_reply(raw: str, timed_out: bool) -> dict[str, Any]:
    """The runner's JSON reply, or an error reply saying what went wrong with the call."""
    if timed_out:
        return {"ok": False, "error": f"the editor did not finish within {EDIT_TIMEOUT_S:.0f}s"}
    try:
        reply = json.loads(raw)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        return {"ok": False, "error": "the editor gave no answer (its reply was cut or broken)"}
    return reply


def tasks_of_uid(uid: int) -> int:
    """Processes and threads whose real uid is ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in os.scandir("/proc") if os.path.isdir("/proc/self") else ():
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    count += int(fields.get("Threads", "1"))
            except (OSError, KeyError, ValueError):
                continue
    return count
