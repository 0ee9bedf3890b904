"""Cached val outcomes of accepted states, keyed by the content of skill/ + harness/.

The incumbent's val scores are reused across rounds unless ``gate.rerun_incumbent`` is set.
The cache lives in ``.harnessopt/`` (git-ignored): losing it only costs a re-run.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import git

from harnessopt import vcs
from harnessopt.config import Config
from harnessopt.protocols import Outcome, Outcomes


class ValCache:
    def __init__(self, state_dir: Path):
        self.path = state_dir / "val_cache.json"

    def key(self, repo: git.Repo, rev: str, cfg: Config) -> str:
        content = vcs.tree_id(repo, rev, ("skill", "harness"))
        flags = ",".join(f"{k}={v}" for k, v in sorted(cfg.flags.items()))
        return f"{content}|{cfg.model.provider}:{cfg.model.target}|epochs={cfg.gate.epochs}|{flags}"

    def get(self, key: str) -> Outcomes | None:
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return {tid: [Outcome(**o) for o in runs] for tid, runs in entry.items()}
        except TypeError:
            return None  # written by another version: measure again

    def put(self, key: str, got: Outcomes) -> None:
        data = self._load()
        data[key] = {tid: [asdict(o) for o in runs] for tid, runs in got.items()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(self.path)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}
