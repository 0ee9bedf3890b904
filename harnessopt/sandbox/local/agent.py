"""A CLI agent (the ``command`` optimizer) run on the host by ``LocalShell.agent``.

Only with ``--unsafe-host-optimizer`` (``harnessopt.optimizer.check_placement``): on the host
the agent runs as harnessopt's uid, wrapped like the local sandbox's tasks
(``isolation.wrap``: under ``bwrap`` the host is read-only but the view and a fresh HOME),
with cwd = the view, its own session, a fresh HOME, and an environment built from nothing
but PATH, LANG, ``env`` and the gateway lease, so no key of the host's environment reaches it.
Under Docker the same call is ``DockerShell.agent``, in the optimizer's container.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from harnessopt.protocols import AgentResult, GatewayLease
from harnessopt.sandbox.local import isolation
from harnessopt.util.proc import run_in_session

AGENT_OUTPUT_CAP = 4 << 20  # bytes of stdout (the agent's transcript) and of stderr kept, head and tail
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def run_on_host(
    view: Path,
    argv: Sequence[str],
    *,
    stdin: bytes,
    env: Mapping[str, str],
    timeout_s: float,
    gateway: GatewayLease | None,
    isolation_mode: str = "session",
) -> AgentResult:
    """Run ``argv`` in ``view`` on this host; the whole session is killed when it returns."""
    home = Path(tempfile.mkdtemp(prefix="ho-agent-home-"))
    try:
        full_env = {
            "PATH": os.environ.get("PATH", _DEFAULT_PATH),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "HOME": str(home),
            "TMPDIR": str(home),
            **env,
        }
        if gateway is not None:
            full_env["ANTHROPIC_BASE_URL"] = gateway.base_url
            full_env["ANTHROPIC_API_KEY"] = gateway.token
        wrapped = isolation.wrap(list(argv), isolation_mode, writable=[view, home], hide=[], cwd=view)
        done = run_in_session(
            wrapped, timeout_s=timeout_s, cap=AGENT_OUTPUT_CAP, cwd=view, env=full_env, stdin=stdin
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    code = None if done.timed_out else done.returncode
    return AgentResult(done.stdout, done.stderr, code, done.timed_out)
