"""Feature flags of a harness: ``harness/flags.yaml``, the ``HO_FLAG_*`` environment, and what runs read.

A harness registers each flag it reads in ``harness/flags.yaml``, a list of entries::

    - name: self_check            # [a-z][a-z0-9_]*, exported as HO_FLAG_SELF_CHECK
      default: "1"                # the value when nothing overrides it (a string; "1"/"0" by habit)
      purpose: re-read the answer against the task before writing it   # one line

A task run gets ``HO_FLAG_<NAME>`` for every registered flag (its default), overridden by the
workspace's ``flags:`` in harnessopt.yaml, overridden by the candidate's own (``harnessopt
ablate`` runs one candidate with a flag on and one with it off). A harness reports the flags it
read as a ``flags_read`` object in any event of its ``trajectory.jsonl`` (docs/trajectories.md);
``adoption`` counts them across trajectories and ``read_in`` finds them in one run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harnessopt.errors import UserError, not_utf8

FLAGS_FILE = "flags.yaml"  # inside harness/
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
ENV_PREFIX = "HO_FLAG_"


@dataclass(frozen=True)
class Flag:
    name: str
    default: str
    purpose: str

    @property
    def env(self) -> str:
        return env_name(self.name)


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def registered(harness_dir: Path) -> list[Flag]:
    """The flags ``harness_dir/flags.yaml`` registers ([] without the file); a UserError naming
    the problem when it is malformed."""
    path = harness_dir / FLAGS_FILE
    if not path.is_file():
        return []
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(not_utf8(path, e)) from None
    except yaml.YAMLError as e:
        raise UserError(f"{path} is not valid YAML ({str(e).splitlines()[0]}); fix it") from None
    if isinstance(raw, dict) and "flags" in raw:
        raw = raw["flags"]
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UserError(f"{path} must be a list of flags, each with name, default and purpose")
    out: list[Flag] = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or not _NAME.match(str(entry.get("name", ""))):
            raise UserError(f"{path}: entry {i} needs a name like self_check (lower case, digits, _)")
        if "default" not in entry or not str(entry.get("purpose", "")).strip():
            raise UserError(f"{path}: flag {entry['name']} needs a default and a one-line purpose")
        default = entry["default"]
        value = ("1" if default else "0") if isinstance(default, bool) else str(default)
        out.append(Flag(str(entry["name"]), value, " ".join(str(entry["purpose"]).split())))
    names = [f.name for f in out]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        raise UserError(f"{path}: flag {dup[0]} is registered twice")
    return out


def lenient_defaults(harness_dir: Path) -> dict[str, str]:
    """Registered defaults, or {} when the file is malformed (a candidate's bad file must not
    crash the runner; ``harnessopt ablate`` and the docs name the problem)."""
    try:
        return {f.name: f.default for f in registered(harness_dir)}
    except UserError:
        return {}


def environment(
    harness_dir: Path, configured: Mapping[str, str], overrides: Iterable[tuple[str, str]] = ()
) -> dict[str, str]:
    """``HO_FLAG_*`` of one run: registered defaults < harnessopt.yaml ``flags`` < ``overrides``."""
    values = {**lenient_defaults(harness_dir), **{k.lower(): str(v) for k, v in configured.items()}}
    values.update((k.lower(), str(v)) for k, v in overrides)
    return {env_name(k): v for k, v in values.items()}


def read_in(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The flags one run reported reading (``flags_read`` of its events), names lower-cased."""
    out: dict[str, Any] = {}
    for event in events:
        got = event.get("flags_read") if isinstance(event, Mapping) else None
        if isinstance(got, Mapping):
            out.update({str(k).lower(): v for k, v in got.items()})
    return out
