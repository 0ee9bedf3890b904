"""Tamper check: what scores a round must not change while the round runs.

At round start ``seal`` hashes the scorer (``scorer.py``), the perturbation hook
(``perturb.py``, ``round.memorised``), every task file under ``tasks/``,
``harnessopt.yaml`` and the model script as they are on disk, and the run's locked settings as
the running code holds them: the target model and its upstream, the rollout limits and sandbox
image (with the engine's image id), the gate, the flags and the checks. ``broken`` hashes them
again before the round's decision is recorded: any difference voids the round (recorded as
``failed`` with the names of what changed; main keeps the incumbent). The optimizer never sees
these files, but a host-side optimizer, a plugin running in this process, or a person editing
the workspace mid-run could change them; a decision scored under a changed scorer or task set
is no evidence.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessopt.config import CONFIG_NAME, Config
from harnessopt.rollout.val_cache import sandbox_identity

VOID_PREFIX = "round void"
LOCKED_SECTIONS = ("model", "rollout", "gate", "budget", "flags", "checks")


@dataclass(frozen=True)
class Seal:
    """Hashes of everything a round's scores depend on but the round must not change."""

    parts: dict[str, str]


def _file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"unreadable:{e.errno}"


def _settings_hash(cfg: Config) -> dict[str, str]:
    data = cfg.model_dump(mode="json")
    out = {}
    for section in LOCKED_SECTIONS:
        blob = json.dumps(data.get(section), sort_keys=True).encode()
        out[f"settings.{section}"] = hashlib.sha256(blob).hexdigest()[:16]
    return out


def seal(root: Path, cfgs: dict[str, Config], sandbox: object | None) -> Seal:
    """The round-start hashes (module docstring). ``cfgs`` names each config object a part of the
    run holds (the run's, the runner's): a plugin replacing either one's settings is seen."""
    parts = {
        "scorer.py": _file_hash(root / "scorer.py"),
        "perturb.py": _file_hash(root / "perturb.py"),
        CONFIG_NAME: _file_hash(root / CONFIG_NAME),
    }
    tasks = root / "tasks"
    if tasks.is_dir():
        for path in sorted(tasks.rglob("*")):
            if path.is_file():
                parts[str(path.relative_to(root))] = _file_hash(path)
    for holder, cfg in cfgs.items():
        parts.update({f"{holder}.{k}": v for k, v in _settings_hash(cfg).items()})
        if cfg.model.script:
            parts[f"{holder}.model.script"] = _file_hash(root / cfg.model.script)
    first = next(iter(cfgs.values()))
    parts["sandbox"] = sandbox_identity(first, sandbox)
    return Seal(parts)


def broken(before: Seal, root: Path, cfgs: dict[str, Config], sandbox: object | None) -> str | None:
    """Why the round is void (what changed since ``before``), or None when nothing did."""
    now = seal(root, cfgs, sandbox).parts
    changed = sorted(k for k in set(before.parts) | set(now) if before.parts.get(k) != now.get(k))
    if not changed:
        return None
    return (
        f"{VOID_PREFIX}: {', '.join(changed[:8])} changed during the round; its scores are no "
        "evidence and the incumbent stays (git diff shows edits to the workspace: undo them, run again)"
    )


def _configs(svc: Any) -> dict[str, Config]:
    cfgs = {"run": svc.cfg}
    runner_cfg = getattr(getattr(svc, "runner", None), "cfg", None)
    if isinstance(runner_cfg, Config) and runner_cfg is not svc.cfg:
        cfgs["runner"] = runner_cfg
    return cfgs


def seal_run(root: Path, svc: Any) -> Seal:
    """``seal`` of a run's services (``services.Services``): its config, its runner's, its sandbox."""
    return seal(root, _configs(svc), svc.sandbox)


def void_reason(before: Seal, root: Path, svc: Any) -> str | None:
    """``broken`` for a run's services: why the round is void, or None."""
    return broken(before, root, _configs(svc), svc.sandbox)
