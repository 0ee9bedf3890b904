"""The workspace scorer in its own processes: a crash, a leak or a hang costs one task's score.

``ScorerProcess(path)`` starts children of ``python -m harnessopt.workspace.scorer_proc PATH`` that import
``scorer.py`` once and then score one request a line (JSON on stdin, JSON on stdout). The host
holds a deadline per call and an address-space limit per child: a scorer that hangs is killed
at the deadline, one that segfaults, exhausts its memory or calls ``os._exit`` just dies, and in
every case that task scores 0 with the reason recorded (``ScoreResult.error``); the next call gets
a fresh child. What the scorer returned is checked on the host (``scoring.interpret``), never
trusted as it comes.

The child interpreter is started isolated and without the ``site`` module (``python -I -S``): no
``.pth`` file, ``sitecustomize`` or ``usercustomize`` runs in it, and no ``PYTHON*`` variable
steers it. A harness in the local sandbox without ``bwrap`` can write wherever the user can,
site-packages and the user site included; what it plants there after harnessopt started does
not run in the scorer. Its ``sys.path`` is the one harnessopt's own process had when it started
(``KNOWN_PATHS``), before any harness ran (docs/sandbox.md says what remains).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from harnessopt.errors import UserError
from harnessopt.workspace.scoring import ScoreResult, failed, interpret

MAX_REPLY_BYTES = 4 * 1024 * 1024
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# The import path of this process as it started (site dirs and .pth files processed then, before
# any harness ran): the scorer's child gets exactly it, and processes no site dir itself.
KNOWN_PATHS = [_PACKAGE_ROOT, *(p for p in sys.path if os.path.isabs(p) and p != _PACKAGE_ROOT)]
_BOOT = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from harnessopt.workspace.scorer_proc import _child_main; sys.exit(_child_main(sys.argv[2]))"
)


class _Child:
    def __init__(self, path: Path, memory_mb: int):
        limit = memory_mb * 1024 * 1024

        def limits() -> None:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self.proc = subprocess.Popen(
            # -I: no PYTHON* variable, no user site, no script dir; -S: no site dir, so no .pth
            # and no sitecustomize; -B: no bytecode written next to anything
            [sys.executable, "-I", "-S", "-B", "-c", _BOOT, json.dumps(KNOWN_PATHS), str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=limits,
        )
        self.buf = b""
        self.eof = False  # its stdout closed: it died (or closed it), as opposed to too slow

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message, default=str).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """One reply, or None at the deadline or when the child died (EOF)."""
        out: IO[bytes] | None = self.proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(out.fileno(), 65536)
                if not chunk or len(self.buf) > MAX_REPLY_BYTES:
                    self.eof = True
                    return None
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        data = json.loads(line)
        return data if isinstance(data, dict) else None

    def why_dead(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)
        code = self.proc.returncode
        if code is None:
            return "sent no reply"
        if code < 0:
            return f"was killed by signal {-code} (a crash, or its memory limit)"
        return f"exited with code {code}"

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[union-attr]


class ScorerProcess:
    """Scores answers with ``scorer.py`` in child processes; thread-safe; ``close()`` ends them."""

    def __init__(self, path: Path, *, timeout_s: float, memory_mb: int = 2048, start_timeout_s: float = 60):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self._closed = False
        first = _Child(self.path, memory_mb)  # import it once now: a broken scorer stops the run here
        hello = first.receive(start_timeout_s)
        if hello is None or "ready" not in hello:
            first.kill()
            if error := (hello or {}).get("error"):  # load_scorer's own line: it names the scorer and the fix
                raise UserError(error)
            raise UserError(
                f"scorer {self.path} failed to load: its process {first.why_dead()}; fix scorer.py"
            )
        self._idle.append(first)

    def score(self, task: dict[str, Any], answer: str, out_dir: Path) -> ScoreResult:
        child = self._take()
        try:
            child.send({"task": task, "answer": answer, "out_dir": str(out_dir)})
            reply = child.receive(self.timeout_s)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            if not child.eof:
                child.kill()
                return failed(f"scorer did not return within {self.timeout_s:g} s")
            why = child.why_dead()
            child.kill()
            return failed(f"scorer process {why}")
        self._give_back(child)
        if "error" in reply:
            return failed(f"scorer raised {reply['error']}")
        try:
            return interpret(reply.get("raw"))
        except ValueError as e:
            return failed(str(e))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()

    def _take(self) -> _Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        child = _Child(self.path, self.memory_mb)
        hello = child.receive(60)
        if hello is None or "ready" not in hello:
            return child  # the call fails and reports why; the scorer loaded once already
        return child

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(child)
                return
        child.kill()


def _child_main(path: str) -> int:
    """In the child: import the scorer once, then one JSON request a line until stdin closes."""
    from harnessopt.workspace.scoring import describe, load_scorer

    out = sys.stdout
    sys.stdout = sys.stderr  # a scorer's print() must not corrupt the protocol
    try:
        fn = load_scorer(Path(path))
    except UserError as e:
        out.write(json.dumps({"error": str(e)}) + "\n")
        out.flush()
        return 2
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            raw = fn(req["task"], req["answer"], Path(req["out_dir"]))
            reply: dict[str, Any] = {"raw": raw}
        except (Exception, SystemExit) as e:
            reply = {"error": describe(e, path)}
        out.write(json.dumps(reply, default=lambda v: f"<{type(v).__name__}>") + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1]))
