"""Optimizer backend ``command``: any CLI coding agent (``codex exec``, ``claude -p``, ...) run in the view.

The agent runs where the sandbox's shell runs (``Shell.agent``): under Docker in the optimizer's
container, by exec, with only the view mounted, no network but a loopback port bridged to the
gateway, the optimizer's lease as its key, and every process of it killed at the end; on the
host (``LocalShell``) only with ``optimizer.unsafe_host`` (``check_placement``). The brief goes
on its stdin; its stdout is the round's transcript.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.optimizer.view import transcript_stem
from harnessopt.protocols import AgentResult, GatewayLease, Proposal, Shell, SupportsClose

_SUMMARY_LINES = 20
PROBE_TIMEOUT_S = 60.0

# How a preset turns the agent's output into a Proposal (``claude_code.proposal``).
Report = Callable[[AgentResult], Proposal]

# The presets of this backend, which build their own argv, and the executable each runs.
PRESETS = {"claude-code": "claude", "codex": "codex"}


def executable_of(backend: str, command: list[str] | None) -> str | None:
    """The executable the agent of ``backend`` runs (None: not a command backend, or no argv)."""
    if backend == "command":
        return command[0] if command else None
    return PRESETS.get(backend)


def check_command(backend: str, command: list[str] | None) -> None:
    """What ``optimizer.command`` must be for ``backend``, from the config alone (``run --dry-run``
    asks it too): the ``command`` backend's argv, unset for a preset that builds its own."""
    if backend == "command" and not command:
        raise UserError("optimizer.command is empty; set it to an agent's argv, e.g. [codex, exec]")
    if backend in PRESETS and command:
        raise UserError(
            f"optimizer.command is the command backend's argv; {backend} builds its own: "
            "unset optimizer.command, or use --optimizer command"
        )


class CommandOptimizer:
    """Runs ``argv`` with cwd = the view and the brief on stdin; the summary is its stdout's tail.

    ``lease_factory(round_no)`` gives the optimizer's gateway lease of that round (the agent's
    ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY); ``shell_factory(view)`` the shell it runs in
    (default: the host's ``LocalShell``). ``env`` is added to the agent's environment (nothing of
    harnessopt's own environment is). ``report`` reads a preset's output; the default takes the
    last 20 lines of stdout as the summary. The executable is looked for in the shell at once,
    so a missing one is a ``UserError`` (ending with ``missing_hint``) before any round runs;
    ``executable`` names it when ``argv`` starts with a wrapper (``sh -c``).
    """

    def __init__(
        self,
        argv: list[str],
        wall_s: float,
        *,
        lease_factory: Callable[[int], GatewayLease] | None = None,
        shell_factory: Callable[[Path], Shell] | None = None,
        env: Mapping[str, str] | None = None,
        transcript_dir: Path | None = None,
        report: Report | None = None,
        name: str = "command",
        missing_hint: str | tuple[str, str] = "install it or fix the setting",
        executable: str | None = None,
    ):
        check_command("command", argv)
        if shell_factory is None:
            from harnessopt.sandbox.local.sandbox import LocalShell

            shell_factory = LocalShell
        self.argv = list(argv)
        self.wall_s = wall_s
        self.lease_factory = lease_factory
        self.shell_factory = shell_factory
        self.env = dict(env or {})
        self.transcript_dir = transcript_dir
        self.report = report or _tail_report
        self.name = name
        self.executable = executable or self.argv[0]  # what must be on the shell's PATH (a preset's agent)
        self._probe(missing_hint)

    def propose(self, view: Path, brief: str, round_no: int) -> Proposal:
        """Run the agent once in ``view``; its exit code and output decide the Proposal."""
        lease = self.lease_factory(round_no) if self.lease_factory is not None else None
        shell = self.shell_factory(view)
        try:
            result = shell.agent(
                self.argv,
                stdin=brief.encode("utf-8"),
                env={**self.env, "HARNESSOPT_ROUND": str(round_no)},
                timeout_s=self.wall_s,
                gateway=lease,
            )
        finally:
            if isinstance(shell, SupportsClose):
                shell.close()
        proposal = self.report(result)
        proposal.transcript_path = self._save(Path(view), round_no, result)
        return proposal

    def _save(self, view: Path, round_no: int, result: AgentResult) -> Path:
        """The agent's stdout (a preset's JSONL transcript), stderr after it when there is any."""
        name = f"{transcript_stem(view, round_no)}.{'jsonl' if self.report is not _tail_report else 'log'}"
        if self.transcript_dir is not None:
            path = Path(self.transcript_dir) / name
        else:
            path = view.parent / f"{view.name}.{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.stdout, encoding="utf-8")
        if result.stderr.strip() or result.note:
            err = path.with_name(path.name + ".stderr")
            err.write_text(result.stderr + (f"\n[{result.note}]\n" if result.note else ""), encoding="utf-8")
        return path

    def _probe(self, missing_hint: str | tuple[str, str]) -> None:
        """UserError unless ``argv[0]`` is an executable in the shell the agent will run in;
        ``missing_hint``: what to do, or (in a container, on this host) where they differ."""
        private = Path(tempfile.mkdtemp(prefix="ho-probe-"))  # 0700: a DockerShell insists on it
        try:
            (private / "view").mkdir()
            shell = self.shell_factory(private / "view")
            in_container = shell.view_root != str(private / "view")  # a container sees it elsewhere
            try:
                found = shell.run(f"command -v -- {shlex.quote(self.executable)}", PROBE_TIMEOUT_S)
            finally:
                if isinstance(shell, SupportsClose):
                    shell.close()
        finally:
            shutil.rmtree(private, ignore_errors=True)
        if found.exit_code != 0:
            if isinstance(missing_hint, tuple):  # the image lacks it, or this host does
                missing_hint = missing_hint[0] if in_container else missing_hint[1]
            private_tmp = Path(self.executable).is_relative_to("/tmp") and Path(self.executable).is_file()
            where = " (/tmp is the sandbox's own there: put the agent elsewhere)" if private_tmp else ""
            raise UserError(
                f"optimizer {self.name}: {self.executable!r} is not an executable where the agent runs "
                f"(its sandbox's PATH){where}; {missing_hint}"
            )


def preset(
    name: str,
    argv: list[str],
    cfg_command: list[str] | None,
    wall_s: float,
    **kw: Any,
) -> CommandOptimizer:
    """A named preset of this backend (``claude-code``, ``codex``): it builds its own argv, so
    ``optimizer.command`` must be unset; ``kw`` go to ``CommandOptimizer``."""
    check_command(name, cfg_command)
    return CommandOptimizer(argv, wall_s, name=name, **kw)


def _tail_report(result: AgentResult) -> Proposal:
    """A generic agent: the last 20 lines of stdout are its summary; a non-zero exit is an error."""
    if result.timed_out:
        return Proposal(summary=_last_lines(result.stdout) or "agent timed out", stopped_by="wall_clock")
    if result.exit_code != 0:
        detail = _last_lines(result.stderr, 5) or _last_lines(result.stdout, 5) or result.note
        return Proposal(
            summary=f"agent exited with code {result.exit_code}: {detail}".strip(), stopped_by="error"
        )
    return Proposal(summary=_last_lines(result.stdout) or "(the agent printed no summary)", stopped_by="done")


def _last_lines(text: str, n: int = _SUMMARY_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-n:]).strip()
