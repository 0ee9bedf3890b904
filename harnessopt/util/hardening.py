"""Hardening of the harnessopt process itself: the real API key stays out of reach of its children.

Two measures, both called once per CLI process. ``make_non_dumpable`` sets ``PR_SET_DUMPABLE``
to 0 (Linux; elsewhere a no-op): another process of the same uid (a local harness, the
optimizer's bash on the host) can then no longer read ``/proc/<pid>/environ`` or ``/proc/<pid>/mem``
of harnessopt, nor ``ptrace`` it; root still can. ``drop_secrets_from_environ`` removes the
upstream key variables from ``os.environ`` once the model holds the key, so no child started
later inherits them by accident. ``/proc/self/environ`` still shows the block harnessopt was
started with; being non-dumpable is what keeps other processes from reading it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from collections.abc import MutableMapping

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4

# Upstream credentials: ANTHROPIC_API_KEY, OPENAI_API_KEY, any other *_API_KEY, ANTHROPIC_AUTH_TOKEN.
SECRET_VARIABLE = re.compile(r"^(?:[A-Z0-9_]+_API_KEY|ANTHROPIC_AUTH_TOKEN)$")


def _prctl(option: int, arg: int = 0) -> int | None:
    """``prctl(option, arg)``; None where there is no prctl (not Linux) or it failed."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    result = int(libc.prctl(option, arg, 0, 0, 0))
    return None if result < 0 else result


def make_non_dumpable() -> bool:
    """Make this process non-dumpable (no core dumps, no same-uid ``/proc/<pid>/environ``, ``mem``,
    ``ptrace``); True when it took effect. A no-op returning False where ``prctl`` does not exist.
    """
    return _prctl(PR_SET_DUMPABLE, 0) is not None and is_dumpable() is False


def is_dumpable() -> bool | None:
    """Whether this process is dumpable; None where it cannot be asked (not Linux)."""
    value = _prctl(PR_GET_DUMPABLE)
    return None if value is None else value != 0


def drop_secrets_from_environ(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Remove credential variables (``*_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``) from ``os.environ``.

    Call it once the upstream model has read its key: children started afterwards inherit none
    of them, whatever ``env`` they are given by default. Returns the names removed, sorted.
    """
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    names = sorted(k for k in env if SECRET_VARIABLE.match(k))
    for name in names:
        env.pop(name, None)  # os.environ.pop also unsetenv()s, so the C-level environ loses it too
    return names
