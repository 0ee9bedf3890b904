"""Nothing paid twice: what a round finished is kept on disk until the round is recorded.

Two things survive a crash, a SIGKILL or Ctrl-C of ``harnessopt run``, under
``.harnessopt/resume/round-K/`` (git-ignored):

* every finished rollout (its trajectory, answer, score and usage), keyed by the candidate's
  content, the task (id and content), the epoch and the settings that change a rollout; a rerun
  of the same round reuses each one instead of calling the model again;
* the optimizer's proposal and the candidate it produced, keyed by the incumbent commit and the
  settings that shape a proposal (``proposal_settings``: what the optimizer may change and is
  asked for, and the optimizer itself): a rerun of the same round with the same settings does not
  pay the optimizer again; one that narrows the whitelist or changes the optimizer asks anew,
  so no candidate copied back under other rules reaches the gate.

Keys are per round on purpose: a later round's rerun of a task (the gate's flip confirmation)
must be a fresh sample, never a replay of an earlier round's. ``clear(k)`` runs once round k
is recorded in git, the source of truth.

Within a round a run is (candidate, task, epoch). The measured runs are epochs 0, 1, ...; every
other kind of run numbers its epochs from a base of its own (below), so no two share a key and a
resumed round finds each one again. The epoch is identity only: a run's phase is passed with its
batch (``Runner.run(..., phase=)``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import stat
import threading
from pathlib import Path
from typing import Any

from harnessopt.config import Config
from harnessopt.protocols import Exchange, Proposal, Task, TaskResult

RERUN_EPOCH = 1000  # the gate's reruns (flip confirmation, second look), numbered up from here
SMOKE_RERUN_EPOCH = 10**6  # the rerun of a crashed smoke task (after the gate's reruns' epochs)
CONFIRM_EPOCH = 2 * 10**6  # the confirmation runs of an accepted round
PROBE_EPOCH = 3 * 10**6  # the incumbent's smoke rerun made while the optimizer works
CRASH_RERUN_EPOCH = 5 * 10**6  # the rerun of a crashed banked run of the incumbent (plus its epoch)
STEP_EPOCH = 6 * 10**6  # an explore step's runs after the first, base and step (plus the step's number)
CHECKPOINT_EPOCH = 7 * 10**6  # a chain's checkpoints (search.checkpoints): a state's runs on the fixed tasks

RESUME_DIR = "resume"


def content_id(root: Path, parts: tuple[str, ...] = ("skill", "harness")) -> str:
    """sha256 over the names, bytes and executable bits of every file below ``root/parts``."""
    h = hashlib.sha256()
    for part in parts:
        base = root / part
        for path in sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink()):
            rel = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts:
                continue
            h.update(os.fsencode(rel) + b"\0")  # a name that is not UTF-8 is its bytes
            h.update(b"x" if path.stat().st_mode & stat.S_IXUSR else b"-")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def rollout_settings(cfg: Config, root: Path) -> str:
    """Everything besides the candidate and the task that changes a rollout or its score."""
    scorer = root / "scorer.py"
    parts = {
        "model": cfg.model.model_dump(mode="json"),
        # where and how many at once do not change a run: a rerun on another executor reuses it
        "rollout": cfg.rollout.model_dump(mode="json", exclude={"executor", "concurrency"}),
        "flags": cfg.flags,
        "template": cfg.template,
        "feedback": cfg.optimizer.feedback,
        "scorer": hashlib.sha256(scorer.read_bytes()).hexdigest() if scorer.is_file() else None,
    }
    return json.dumps(parts, sort_keys=True)


def proposal_settings(cfg: Config) -> str:
    """What a saved proposal was made under: what the optimizer may change (mode, objective,
    whitelist, read-only set) and which optimizer, with which settings, made it."""
    parts = {
        "mode": cfg.mode,
        "objective": cfg.objective,
        "allowed": cfg.allowed_globs(),
        "read_only": cfg.read_only_globs(),
        "optimizer": cfg.optimizer.model_dump(mode="json"),
    }
    return json.dumps(parts, sort_keys=True)


def task_id_of(task: Task) -> str:
    data = json.dumps([task.id, task.input, task.answer, task.split], sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


class RoundStore:
    """Finished rollouts and the optimizer's candidate of round k, on disk as they happen."""

    def __init__(self, state_dir: Path, settings: str, proposing: str = ""):
        self.root = Path(state_dir) / RESUME_DIR
        self.settings = hashlib.sha256(settings.encode()).hexdigest()[:16]
        self.proposing = hashlib.sha256(proposing.encode()).hexdigest()[:12]  # proposal_settings
        self._ids: dict[Path, str] = {}
        self._lock = threading.Lock()
        self._written: set[Path] = set()  # this process's runs: a round's later reads of one are no resume
        self._resumed: set[Path] = set()

    def resumed(self, round_no: int) -> int:
        """Finished runs of round ``round_no`` taken from an interrupted run of it (written by
        another process), each counted once; a run this process made and read again is not one."""
        top = self.root / f"round-{round_no}"
        with self._lock:
            return sum(path.is_relative_to(top) for path in self._resumed)

    # ------------------------------------------------------------------ rollouts

    def candidate_id(self, root: Path) -> str:
        with self._lock:
            if root not in self._ids:
                self._ids[root] = content_id(root)
            return self._ids[root]

    def _rollout_path(self, round_no: int, root: Path, task: Task, epoch: int) -> Path:
        cand = self.candidate_id(root)[:24]
        name = f"{task_id_of(task)}.{epoch}.json"
        return self.root / f"round-{round_no}" / "rollouts" / self.settings / cand / name

    def get(self, round_no: int, root: Path, task: Task, epoch: int) -> TaskResult | None:
        path = self._rollout_path(round_no, root, task, epoch)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data["exchanges"] = [Exchange(**x) for x in data.get("exchanges", [])]
            result = TaskResult(**data)
        except (OSError, ValueError, TypeError):
            return None  # absent, torn by a crash, or written by another version: run it again
        with self._lock:
            if path not in self._written:
                self._resumed.add(path)
        return result

    def put(self, round_no: int, root: Path, task: Task, epoch: int, result: TaskResult) -> None:
        path = self._rollout_path(round_no, root, task, epoch)
        _write_atomic(path, json.dumps(dataclasses.asdict(result), default=str))
        with self._lock:
            self._written.add(path)

    def seed(self, round_no: int, name: str) -> bytes:
        """A random seed of round ``round_no`` for ``name``, made once and kept with its runs: a
        rerun of the round draws what it drew (the memorised-answer check's perturbed variants, so
        their finished runs are found), and nothing outside the round can foresee it."""
        path = self.root / f"round-{round_no}" / f"seed-{name}"
        with self._lock:
            try:
                kept = bytes.fromhex(path.read_text(encoding="utf-8"))
                if len(kept) == 16:
                    return kept
            except (OSError, ValueError):
                pass  # none yet, or torn by a crash before it was whole: a new one (nothing drew it)
            made = os.urandom(16)
            _write_atomic(path, made.hex())
            return made

    # ------------------------------------------------------------------ the optimizer's candidate

    def _proposal_dir(self, round_no: int, parent: str, name: str = "") -> Path:
        folder = f"candidate-{parent[:16]}-{self.proposing}" + (f"-{name}" if name else "")
        return self.root / f"round-{round_no}" / folder

    def save_candidate(
        self,
        round_no: int,
        parent: str,
        proposal: Proposal,
        copied: dict[str, Any],
        cand_root: Path,
        name: str = "",
    ) -> None:
        """Keep the proposal and the candidate tree; written last is ``done``, so a torn save is none.
        ``name``: which of the round's several candidates (``search``), "" for the only one."""
        d = self._proposal_dir(round_no, parent, name)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for part in ("skill", "harness"):
            if (cand_root / part).exists():
                shutil.copytree(cand_root / part, d / "tree" / part, symlinks=True)
        info = {"proposal": dataclasses.asdict(proposal), "copied": copied}
        _write_atomic(d / "proposal.json", json.dumps(info, default=str))
        _write_atomic(d / "done", "")

    def load_candidate(
        self, round_no: int, parent: str, name: str = ""
    ) -> tuple[Proposal, dict[str, Any], Path] | None:
        """(proposal, copy-back result, candidate tree) saved by an interrupted run of this round."""
        d = self._proposal_dir(round_no, parent, name)
        if not (d / "done").exists():
            return None
        try:
            info = json.loads((d / "proposal.json").read_text(encoding="utf-8"))
            p = info["proposal"]
            if p.get("transcript_path"):
                p["transcript_path"] = Path(p["transcript_path"])
            return Proposal(**p), dict(info["copied"]), d / "tree"
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def clear(self, round_no: int) -> None:
        top = self.root / f"round-{round_no}"
        shutil.rmtree(top, ignore_errors=True)
        with self._lock:
            self._written = {path for path in self._written if not path.is_relative_to(top)}
            self._resumed = {path for path in self._resumed if not path.is_relative_to(top)}


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
