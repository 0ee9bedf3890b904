"""Cached val outcomes of accepted states, keyed by everything that changes a rollout or a score.

The incumbent's val scores are reused across rounds unless ``gate.rerun_incumbent`` is set. The
key (``key_parts``) covers the skill, the harness, ``scorer.py``, the val task file, the target
model (and a scripted model's script), the sandbox kind and image, the template, the rollout
limits, the epochs and the flags: change any of them and the incumbent is measured again, never
compared from stale scores. The part without skill and harness (``environment_key``) says when
the noise floor must be measured again. The cache lives in ``.harnessopt/`` (git-ignored):
losing it only costs a re-run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import git

from harnessopt.config import Config
from harnessopt.ledger import vcs
from harnessopt.protocols import Outcome, Outcomes, Sandbox
from harnessopt.sandbox.image.build import docker_image_id

CONTENT_PARTS = ("skill", "harness")  # what a round changes; the rest is the environment


def key_parts(
    repo: git.Repo, rev: str, cfg: Config, sandbox: Sandbox | None = None, setup: str | None = None
) -> dict[str, str]:
    """Every input of a val rollout and its score, each as a short text: the candidate's skill and
    harness at ``rev``, the tasks, scorer and scripts it runs with at ``setup`` (default ``rev``;
    ``replay`` runs a past round's state with the workspace's current ones: ``HEAD``)."""
    r = cfg.rollout
    at = setup or rev
    parts = {p: vcs.tree_id(repo, rev, (p,)) for p in CONTENT_PARTS}
    parts.update(
        scorer=vcs.tree_id(repo, at, ("scorer.py",)),
        val_tasks=vcs.tree_id(repo, at, ("tasks/val.jsonl",)),
        val_subset=f"holdout:{cfg.gate.holdout_share}" if cfg.gate.confirm == "holdout" else "all",
        model=f"{cfg.model.provider}:{cfg.model.target}",
        base_url=cfg.model.base_url or "",
        model_script=vcs.tree_id(repo, at, (cfg.model.script,)) if cfg.model.script else "",
        server_tools=str(cfg.model.allow_server_tools),
        sandbox=sandbox_identity(cfg, sandbox),
        template=cfg.template,
        limits=(
            f"timeout={r.timeout_s},memory={r.memory_mb},cpus={r.cpus},pids={r.pids},out={r.out_mb},"
            f"output_cap={r.output_cap_kb},scorer_timeout={r.scorer_timeout_s},"
            f"scorer_memory={r.scorer_memory_mb},warm_interpreter={r.warm_interpreter},"
            f"max_output_tokens={cfg.budget.target_max_output_tokens}"
        ),
        epochs=f"{cfg.gate.epochs}/{cfg.gate.banked_epochs}",
        flags=",".join(f"{k}={v}" for k, v in sorted(cfg.flags.items())),
    )
    if cfg.objective != "task":  # which val tasks run, and the skills trigger runs install beside it
        parts.update(objective=cfg.objective, distractors=vcs.tree_id(repo, at, (cfg.trigger.distractors,)))
    return parts


def sandbox_identity(cfg: Config, sandbox: Sandbox | None = None) -> str:
    """The sandbox kind, and for Docker the image name and id: ``docker:IMAGE@sha256:...``.

    Asks the running sandbox when there is one (its ``identity``); without one (a projection
    before a run) the config's choice, with the engine asked for the image id when the choice may
    be Docker.
    """
    if sandbox is not None:
        return sandbox.identity
    image = cfg.rollout.image
    choice = cfg.rollout.sandbox
    if choice not in ("docker", "auto"):
        return choice
    image_id = docker_image_id(None, image)
    if image_id == "unavailable" and choice == "auto":
        return "local"  # what auto falls back to
    return f"docker:{image}@{image_id}"


def digest(parts: dict[str, str], leave_out: tuple[str, ...] = ()) -> str:
    """A short stable id of the parts (those in ``leave_out`` excluded)."""
    kept = {k: v for k, v in sorted(parts.items()) if k not in leave_out}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:24]


def environment_key(parts: dict[str, str]) -> str:
    """The key of everything but the skill and the harness: a change here re-measures the noise floor."""
    return digest(parts, CONTENT_PARTS)


def changed(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Names of the key parts that differ."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


class ValCache:
    def __init__(self, state_dir: Path):
        self.path = state_dir / "val_cache.json"

    def key(
        self, repo: git.Repo, rev: str, cfg: Config, sandbox: Sandbox | None = None, setup: str | None = None
    ) -> str:
        return digest(key_parts(repo, rev, cfg, sandbox, setup))

    def get(self, key: str) -> Outcomes | None:
        entry = self._load().get(key)
        if not isinstance(entry, dict) or not isinstance(entry.get("outcomes"), dict):
            return None  # absent, or written by a version with an incomplete key: measure again
        try:
            return {tid: [Outcome(**o) for o in runs] for tid, runs in entry["outcomes"].items()}
        except TypeError:
            return None  # written by another version: measure again

    def put(self, key: str, got: Outcomes) -> None:
        data = self._load()
        data[key] = {"outcomes": {tid: [asdict(o) for o in runs] for tid, runs in got.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, sort_keys=True))
        tmp.replace(self.path)

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: measured afresh
            return {}
        return data if isinstance(data, dict) else {}
