"""The ledger's index: what each round commit's message says, kept in ``.harnessopt/``.

Reading 200 rounds from git commit by commit costs a tenth of a second per call, and ``status``
reads them several times. The index maps a commit sha to its subject and its manifest data;
a commit's message never changes, so an entry cannot go stale. The refs that say which commits
are rounds are always listed from git (``ledger.store.rounds``), so git stays the source of truth:
an index that is missing, unreadable or of another version is rebuilt from git, and entries of
commits no ref names any more are dropped when it is saved.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

INDEX_FILE = "ledger-index.json"
"""In the workspace's ``.harnessopt/`` (git-ignored): commit sha -> [subject, manifest data]."""
_INDEX_VERSION = 1

Entry = tuple[str, dict[str, Any]]


@dataclass
class CommitIndex:
    """Subject and manifest data per commit sha; ``path`` None outside a workspace (no file)."""

    path: Path | None
    commits: dict[str, Entry]

    @classmethod
    def load(cls, repo: git.Repo) -> CommitIndex:
        """The saved index of ``repo``'s workspace, or an empty one when there is none to trust."""
        state = Path(str(repo.working_dir)) / ".harnessopt"
        path = state / INDEX_FILE if state.is_dir() else None
        commits: dict[str, Entry] = {}
        if path is not None and path.is_file():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                if raw.get("version") == _INDEX_VERSION:
                    commits = {str(sha): (str(v[0]), dict(v[1])) for sha, v in raw["commits"].items()}
            except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
                commits = {}  # unreadable: rebuilt from git by fill()
        return cls(path, commits)

    def fill(self, repo: git.Repo, shas: set[str], parse: Callable[[str], dict[str, Any]]) -> None:
        """Read the commits the index lacks from git (one ``git log --no-walk``), then save it
        holding exactly ``shas`` (entries of commits no longer named are dropped)."""
        missing = sorted(shas - self.commits.keys())
        if missing:
            out = repo.git.log("--no-walk=unsorted", "--format=%H%x00%B%x1e", *missing)
            for chunk in out.split("\x1e"):
                sha, sep, text = chunk.lstrip("\n").partition("\x00")
                if sep:
                    self.commits[sha] = (text.splitlines()[0] if text else "", parse(text))
        if self.path is not None and (missing or len(self.commits) != len(shas)):
            self.commits = {sha: self.commits[sha] for sha in shas if sha in self.commits}
            _write(self.path, self.commits)


def _write(path: Path, commits: dict[str, Entry]) -> None:
    """Atomically (a reader never sees half a file); a read-only workspace just goes unindexed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps({"version": _INDEX_VERSION, "commits": commits}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
