"""Optimizer backend ``command``: any CLI coding agent (``claude -p``, ``codex exec``, ...) run in the view."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from harnessopt.errors import UserError
from harnessopt.proc import run_in_session
from harnessopt.protocols import Proposal

# Host variables that look like credentials never reach the agent; the caller adds the gateway lease.
_SECRET = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)|^(ANTHROPIC|AWS|OPENAI|GOOGLE|AZURE)_",
    re.I,
)
_SUMMARY_LINES = 20
_OUTPUT_CAP = 1 << 20  # bytes of stdout/stderr read back (head and tail; the summary is the tail)


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host environment minus anything that looks like a secret, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not _SECRET.search(k)}
    env.update(extra or {})
    return env


class CommandOptimizer:
    """Runs ``argv`` with cwd = the view and the brief on stdin; the summary is its stdout's tail.

    ``env_factory`` returns the variables that let the agent reach the model gateway
    (``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` = the optimizer's lease for round K); it is
    called once per round. A timeout kills the agent's whole process group (``harnessopt.proc``).
    """

    name = "command"

    def __init__(
        self,
        argv: list[str],
        wall_s: float,
        *,
        env_factory: Callable[[int], Mapping[str, str]] | None = None,
    ):
        if not argv:
            raise UserError("optimizer.command is empty; set it to an agent's argv, e.g. [claude, -p]")
        if shutil.which(argv[0]) is None:
            raise UserError(
                f"optimizer.command: {argv[0]!r} is not an executable on PATH; install it or fix the setting"
            )
        self.argv = list(argv)
        self.wall_s = wall_s
        self.env_factory = env_factory

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal:
        """Run the agent once in ``view``; its exit code and output tail decide the Proposal."""
        env = scrubbed_env(self.env_factory(round_no) if self.env_factory else None)
        env["HARNESSOPT_ROUND"] = str(round_no)
        done = run_in_session(
            self.argv,
            timeout_s=self.wall_s,
            cap=_OUTPUT_CAP,
            cwd=view,
            env=env,
            stdin=brief.encode("utf-8"),
        )
        stdout, stderr = done.stdout, done.stderr
        if done.timed_out:
            return Proposal(
                summary=_last_lines(stdout) or f"agent timed out after {done.wall_s:.0f} s",
                stopped_by="wall_clock",
            )
        if done.returncode != 0:
            detail = _last_lines(stderr, 5) or _last_lines(stdout, 5)
            return Proposal(
                summary=f"agent exited with code {done.returncode}: {detail}".strip(), stopped_by="error"
            )
        return Proposal(summary=_last_lines(stdout) or "(the agent printed no summary)", stopped_by="done")


def _last_lines(text: str, n: int = _SUMMARY_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-n:]).strip()
