"""Whitelist and read-only globs: gitignore lines anchored at the workspace root (``pathspec``)."""

from __future__ import annotations

from functools import lru_cache

import pathspec


def anchored(pattern: str) -> str | None:
    """A whitelist glob as a gitignore line anchored at the workspace root (None when empty).

    Unlike ``.gitignore``, a pattern without a slash does not match at any depth: ``SKILL.md``
    means the top-level file and ``skill`` the top-level directory, so a short pattern never
    widens the boundary (write ``**/SKILL.md`` for any depth). Empty and ``.`` segments are
    dropped (``./skill//**`` = ``skill/**``); a trailing ``/`` still means "directories only".
    """
    negate = pattern.startswith("!")
    body = pattern[1:] if negate else pattern
    parts = [p for p in body.split("/") if p not in ("", ".")]
    if not parts:
        return None
    return ("!" if negate else "") + "/" + "/".join(parts) + ("/" if body.endswith("/") else "")


@lru_cache(maxsize=64)
def spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    """The globs compiled; pathspec's own error, ``re.error`` or ``ValueError`` for an invalid one."""
    return pathspec.GitIgnoreSpec.from_lines([a for a in map(anchored, globs) if a is not None])


def glob_problem(globs: list[str]) -> str | None:
    """What is wrong with the first invalid glob of ``globs`` (``[z-a]``), or None."""
    for glob in globs:
        try:
            spec((glob,))
        except Exception as e:  # pathspec raises its own error, re.error or ValueError
            return f"{glob!r} is not a valid glob ({e})"
    return None
