"""The copy-back rule of ``objective: trigger``: only the description fields of SKILL.md change.

``copy_back`` has already applied the whitelist (``skill/SKILL.md`` only, ``Config.allowed_globs``).
Here the candidate's SKILL.md is rebuilt field by field from the incumbent's: the description
fields (``DESCRIPTION_FIELDS``) are taken from the optimizer's file, everything else (the body,
every other front matter key) stays the incumbent's, and each part that the optimizer changed and
that is not a description field becomes a discarded write (``skill/SKILL.md: body``,
``skill/SKILL.md: front matter 'name'``), listed among the round's violations as every other
discarded write is. Enforced on the host, after the optimizer returned.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from harnessopt.optimizer.view import CopyBackResult
from harnessopt.util.text import FrontMatterError, load_yaml, split_front_matter

SKILL_PATH = "skill/SKILL.md"
DESCRIPTION_FIELDS = ("description", "when_to_use")  # what the runtime reads to decide loading
_KEY_LINE = re.compile(r"^([A-Za-z0-9_-]+)\s*:")


def restrict(objective: str, incumbent_root: Path, cand_root: Path, copied: CopyBackResult) -> CopyBackResult:
    """In a trigger round, keep of the candidate's SKILL.md only its description fields."""
    if objective != "trigger":
        return copied
    changed = [p for p in copied.changed if p != SKILL_PATH]
    discarded = [f"{p} (trigger objective: only SKILL.md's description fields)" for p in changed]
    for p in changed:  # not SKILL.md: the whitelist lets none through, but never trust one layer
        _restore(incumbent_root, cand_root, p)
    if SKILL_PATH not in copied.changed:
        return dataclasses.replace(copied, changed=[], violations=sorted({*copied.violations, *discarded}))
    old = (incumbent_root / SKILL_PATH).read_text(encoding="utf-8")
    new_path = cand_root / SKILL_PATH
    new = new_path.read_text(encoding="utf-8") if new_path.is_file() else ""
    merged, refused = merge_description(old, new)
    new_path.write_text(merged, encoding="utf-8")
    discarded += [f"{SKILL_PATH}: {what}" for what in refused]
    kept = [SKILL_PATH] if merged != old else []
    return dataclasses.replace(copied, changed=kept, violations=sorted({*copied.violations, *discarded}))


def merge_description(old: str, new: str) -> tuple[str, list[str]]:
    """``old`` with the description fields of ``new``; and what else ``new`` changed (discarded)."""
    try:
        old_fm, old_body = _parts(old)
        new_fm, new_body = _parts(new)
        old_meta, new_meta = _mapping(old_fm), _mapping(new_fm)
    except (FrontMatterError, ValueError) as e:  # said as init says it, not as a bare discard (QA)
        why = " ".join(str(e).split())[:200]
        return old, [f"the whole file: its front matter is not valid YAML ({why}); none of it was kept"]
    refused = ["body"] if new_body != old_body else []
    refused += [
        f"front matter '{k}'"
        for k in sorted({*old_meta, *new_meta} - set(DESCRIPTION_FIELDS), key=str)
        if old_meta.get(k) != new_meta.get(k)
    ]
    old_blocks, new_blocks = _blocks(old_fm), _blocks(new_fm)
    out: list[str] = []
    for key, lines in old_blocks:
        if key in DESCRIPTION_FIELDS:
            out += dict(new_blocks).get(key, [])  # a description field removed stays removed
        else:
            out += lines
    names = {k for k, _ in old_blocks}
    for key, lines in new_blocks:  # a description field the incumbent did not have
        if key in DESCRIPTION_FIELDS and key not in names:
            out += lines
    merged = "---\n" + "\n".join(out) + "\n---\n" + old_body
    want = {**{k: v for k, v in old_meta.items() if k not in DESCRIPTION_FIELDS}}
    want.update({k: new_meta[k] for k in DESCRIPTION_FIELDS if k in new_meta})
    try:
        ok = _mapping(_parts(merged)[0]) == want
    except (FrontMatterError, ValueError):
        ok = False
    if not ok:  # a layout this line-level merge cannot split (anchors, flow mappings): apply nothing
        return old, [*refused, "front matter layout (the description could not be taken alone)"]
    return merged, refused


def _parts(text: str) -> tuple[str, str]:
    fm, body = split_front_matter(text.replace("\r\n", "\n"))
    if fm is None:
        raise ValueError("no front matter")
    return fm, body


def _mapping(fm: str) -> dict[Any, Any]:
    meta = load_yaml(fm) or {}
    if not isinstance(meta, dict):
        raise ValueError("front matter is not a mapping")
    return meta


def _blocks(fm: str) -> list[tuple[str | None, list[str]]]:
    """Top-level keys of the front matter with their lines (continuations and comments included)."""
    blocks: list[tuple[str | None, list[str]]] = []
    for line in fm.split("\n"):
        m = _KEY_LINE.match(line)
        if m:
            blocks.append((m.group(1), [line]))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            blocks.append((None, [line]))
    return blocks


def _restore(incumbent_root: Path, cand_root: Path, rel: str) -> None:
    src, dst = incumbent_root / rel, cand_root / rel
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    else:
        dst.unlink(missing_ok=True)
