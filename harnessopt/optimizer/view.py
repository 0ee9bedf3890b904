"""The optimizer's view directory, and the whitelist copy-back that is the only way out of it.

``build_view`` copies ``skill/``, ``harness/`` and the train ``trajectories/`` of a workspace into
a fresh directory and writes ``history.md`` and ``OPTIMIZE.md``; nothing else of the workspace
(``tasks/``, ``scorer.py``, ``harnessopt.yaml``, ``.git``, ``.harnessopt``) is ever copied. It
returns a ``ViewSnapshot``: the hash of every file as it was handed out, kept in memory where the
optimizer cannot touch it.

``copy_back`` compares the view with that snapshot and writes to the workspace only the changes
whose path matches a whitelist glob. Everything else is reported, never applied.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TypeVar

import pathspec

from harnessopt.config import ALWAYS_READ_ONLY
from harnessopt.errors import UserError
from harnessopt.protocols import discarded_list
from harnessopt.util.globs import spec as globs_spec
from harnessopt.util.text import FrontMatterError, parse_front_matter

# Directories of the workspace the optimizer reads. Everything else stays hidden.
VIEW_DIRS = ("skill", "harness", "trajectories")
HISTORY_NAME = "history.md"
BRIEF_NAME = "OPTIMIZE.md"
MAX_FILE_BYTES = 1 << 20  # a copied-back file above 1 MiB is a violation: skills are text
MAX_HASHED_BYTES = 64 << 20  # a larger file is hashed to see that it did not change, up to this
T = TypeVar("T")
MAX_CHANGED_FILES = 256  # files one copy-back writes or deletes; the rest are violations
MAX_CHANGED_BYTES = 8 << 20  # bytes one copy-back writes; the rest are violations
MAX_VIEW_ENTRIES = 50_000  # a view with more files and directories is refused as a whole
# Paths that never leave the view, whatever the whitelist says (a too-broad ``**`` included).
PROTECTED = (
    "tasks",
    "scorer.py",
    "perturb.py",
    "harnessopt.yaml",
    ".git",
    ".harnessopt",
    "trajectories",
    "best_skill.md",
)
# Editor and interpreter droppings: neither a change nor a violation.
JUNK_PARTS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
JUNK_NAMES = re.compile(r"(.*\.py[co]|.*\.sw[op]|.*~|\.#.*|\.DS_Store|4913)$")


@dataclass(frozen=True)
class ViewSnapshot:
    """What ``build_view`` handed out: view-relative posix path -> sha256 of the content."""

    view: Path
    hashes: dict[str, str]
    skipped: list[str] = field(default_factory=list)  # ws files not copied (symlinks, non-train)


@dataclass
class CopyBackResult:
    """What ``copy_back`` did. Paths are workspace-relative, posix style, sorted."""

    changed: list[str] = field(default_factory=list)  # written or deleted in the workspace
    violations: list[str] = field(default_factory=list)  # outside the whitelist: discarded
    ignored: list[str] = field(default_factory=list)  # history.md, OPTIMIZE.md, trajectories/, junk


# --------------------------------------------------------------------------- globs


def _whitelist_spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    try:
        return globs_spec(globs)
    except Exception as e:  # config validation refuses these: a Config built around it may not
        raise UserError(
            f"whitelist pattern list {list(globs)!r} has an invalid glob ({e}); "
            "fix 'whitelist' in harnessopt.yaml (see docs/optimizer.md)"
        ) from e


def matches_any(rel: str, globs: list[str]) -> bool:
    """True when the posix relative path ``rel`` is covered by the whitelist ``globs``.

    Gitignore-style globs (``pathspec``), anchored at the workspace root: ``*``, ``?`` and
    ``[...]`` stay inside one segment, ``**`` spans segments (``skill/**``, ``**/*.md``), a
    pattern naming a directory covers what is below it, and a later ``!pattern`` takes paths
    back out. An invalid glob is a ``UserError``.
    """
    return _whitelist_spec(tuple(globs)).match_file(rel)


# --------------------------------------------------------------------------- build


def transcript_stem(view: Path, round_no: int) -> str:
    """``optimizer-round-K``, with the candidate's name when the round has several (its view is
    ``view-cI``), so that one candidate's transcript never overwrites another's."""
    return f"optimizer-round-{round_no}{view.name.removeprefix('view')}"


def build_view(ws: Path, view: Path, *, history_md: str, brief_md: str) -> ViewSnapshot:
    """Fill a fresh ``view`` directory from workspace ``ws``; return the pristine snapshot.

    ``view`` is created (an existing one is emptied first). Symlinks in the workspace are not
    followed or copied; trajectory files whose front matter does not say ``split: train`` are
    skipped, although ``trajectories/`` holds only train rollouts by construction.
    """
    ws, view = ws.resolve(), view.resolve()
    if view == ws or ws.is_relative_to(view):
        raise ValueError(f"view {view} must not contain the workspace {ws}")
    if view.exists():
        shutil.rmtree(view)
    view.mkdir(parents=True)
    hashes: dict[str, str] = {}
    skipped: list[str] = []
    for top in VIEW_DIRS:
        src_top = ws / top
        (view / top).mkdir()
        if src_top.is_symlink() or not src_top.is_dir():
            continue
        for src in _walk_files(src_top, skipped, ws):
            rel = src.relative_to(ws).as_posix()
            if top == "trajectories" and not _is_train_trajectory(src):
                skipped.append(rel)
                continue
            dest = view / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            _copy_file(src, dest)
            hashes[rel] = _sha256(dest)
    for name, text in ((HISTORY_NAME, history_md), (BRIEF_NAME, brief_md)):
        (view / name).write_text(text, encoding="utf-8")
        hashes[name] = _sha256(view / name)
    return ViewSnapshot(view=view, hashes=hashes, skipped=sorted(skipped))


def _walk_files(top: Path, skipped: list[str], ws: Path) -> list[Path]:
    """Regular files below ``top``; symlinks and special files are recorded as skipped."""
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        d = Path(dirpath)
        for name in list(dirnames):
            if (d / name).is_symlink():
                dirnames.remove(name)
                skipped.append((d / name).relative_to(ws).as_posix())
        for name in filenames:
            p = d / name
            if p.is_symlink() or not stat.S_ISREG(p.lstat().st_mode):
                skipped.append(p.relative_to(ws).as_posix())
            else:
                files.append(p)
    return sorted(files)


def _is_train_trajectory(path: Path) -> bool:
    """True only when the file's YAML front matter says ``split: train``."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(65536)
    except OSError:
        return False
    try:
        meta = parse_front_matter(head)
    except FrontMatterError:
        return False
    return str(meta.get("split", "")).strip() == "train"


# --------------------------------------------------------------------------- copy back


def copy_back(
    view: Path,
    ws: Path,
    allowed: list[str],
    *,
    snapshot: ViewSnapshot,
    read_only: Sequence[str] = ALWAYS_READ_ONLY,
) -> CopyBackResult:
    """Apply the view's whitelisted changes to ``ws``; report the rest.

    A change is a file whose content differs from the snapshot, a new file, or a deleted one.
    Changes to ``history.md``, ``OPTIMIZE.md``, ``trajectories/`` and editor/interpreter junk
    are ``ignored``. Changes outside ``allowed`` (globs, see ``matches_any``), inside ``read_only``
    (globs that win over ``allowed``), under a protected path, to symlinks or special files, or to files over 1 MiB are ``violations`` and discarded,
    as are the changes past ``MAX_CHANGED_FILES`` files or ``MAX_CHANGED_BYTES`` bytes (in path
    order). Files are ``lstat``-ed before they are read, opened without following links, and
    written from the bytes that were hashed; nothing is copied with more than mode 0755/0644.
    """
    view, ws = view.resolve(), ws.resolve()
    result = CopyBackResult()
    present = _scan_view(view, result)
    if present is None:  # a flood of files: apply nothing
        result.violations.append(f"(the view holds more than {MAX_VIEW_ENTRIES} files: nothing applied)")
        return result
    for rel in _listed_discarded(view):  # what a container's copy out left behind
        (result.ignored if _is_junk(rel) else result.violations).append(rel)
    writes: list[str] = []
    for rel, (digest, size) in present.items():
        if snapshot.hashes.get(rel) != digest:
            _classify(rel, allowed, result, writes, size=size, read_only=read_only)
    deletes: list[str] = []
    for rel in snapshot.hashes:
        if rel not in present and rel not in result.violations:
            _classify(rel, allowed, result, deletes, size=0, read_only=read_only)
    budget = _Budget()
    for rel in sorted(deletes):
        if budget.take(0) and _safe_dest(ws, rel, result):
            (ws / rel).unlink(missing_ok=True)
            _prune_empty_dirs(ws, (ws / rel).parent)
            result.changed.append(rel)
        elif rel not in result.violations:
            result.violations.append(rel)
    for rel in sorted(writes):
        if not budget.take(present[rel][1]) or not _safe_dest(ws, rel, result):
            result.violations.append(rel)
            continue
        read = _read_regular(view / rel)
        if read is None or _digest(*read) != present[rel][0]:  # changed since the scan: not what we checked
            result.violations.append(rel)
            continue
        try:
            _write_file(ws / rel, *read)
        except OSError:  # e.g. a directory of untracked files sits where the file goes
            result.violations.append(rel)
            continue
        result.changed.append(rel)
    result.changed.sort()
    result.violations = sorted(set(result.violations))
    result.ignored = sorted(set(result.ignored))
    return result


def _listed_discarded(view: Path) -> list[str]:
    """The view's paths its shell could not keep (``protocols.discarded_list``: the Docker shell's
    symlinks and FIFOs), or none."""
    try:
        text = discarded_list(view).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line]


class _Budget:
    """What one copy-back may still change: ``MAX_CHANGED_FILES`` files, ``MAX_CHANGED_BYTES`` bytes."""

    def __init__(self) -> None:
        self.files, self.bytes = MAX_CHANGED_FILES, MAX_CHANGED_BYTES

    def take(self, size: int) -> bool:
        if self.files < 1 or size > self.bytes:
            return False
        self.files, self.bytes = self.files - 1, self.bytes - size
        return True


def _scan_view(view: Path, result: CopyBackResult) -> dict[str, tuple[str, int]] | None:
    """Hash every regular file in the view: rel -> (digest, size).

    Symlinks and special files become violations; a file over ``MAX_FILE_BYTES`` is not read
    (its digest is a marker that never equals a snapshot's). ``None`` past ``MAX_VIEW_ENTRIES``.
    """
    present: dict[str, tuple[str, int]] = {}
    entries = 0
    for dirpath, dirnames, filenames in os.walk(view, followlinks=False):
        entries += len(dirnames) + len(filenames)
        if entries > MAX_VIEW_ENTRIES:
            return None
        d = Path(dirpath)
        for name in list(dirnames):
            rel = (d / name).relative_to(view).as_posix()
            if (d / name).is_symlink():
                dirnames.remove(name)
                result.violations.append(rel)
            elif _is_junk(rel):
                dirnames.remove(name)
                result.ignored.append(rel)
        for name in filenames:
            p = d / name
            rel = p.relative_to(view).as_posix()
            if _is_junk(rel):
                result.ignored.append(rel)
                continue
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode):
                result.violations.append(rel)
            elif st.st_size > MAX_FILE_BYTES:  # unchanged (the snapshot's digest), else a violation
                present[rel] = (_large_digest(p) or f"over-{MAX_FILE_BYTES}-bytes", st.st_size)
            elif (read := _read_regular(p)) is None:
                result.violations.append(rel)  # swapped for something else, or unreadable
            else:
                present[rel] = (_digest(*read), len(read[0]))
    return present


def _with_regular(path: Path, limit: int, use: Callable[[IO[bytes], bool], T]) -> T | None:
    """``use(file, executable)`` on a regular file of at most ``limit`` bytes, opened without
    following a link or blocking on a FIFO; ``None`` for anything else or an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return use(f, bool(st.st_mode & stat.S_IXUSR))
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_regular(path: Path) -> tuple[bytes, bool] | None:
    """(content, executable) of a regular file of at most ``MAX_FILE_BYTES``; ``None`` for
    anything else (``_with_regular``)."""

    def read(f: IO[bytes], executable: bool) -> tuple[bytes, bool] | None:
        data = f.read(MAX_FILE_BYTES + 1)  # it may have grown since the fstat
        return (data, executable) if len(data) <= MAX_FILE_BYTES else None

    return _with_regular(path, MAX_FILE_BYTES, read) or None


def _large_digest(path: Path) -> str | None:
    """The digest of a regular file over ``MAX_FILE_BYTES`` (never copied back), read in chunks,
    so one the skill brought and nobody changed matches its snapshot; None above
    ``MAX_HASHED_BYTES`` or for anything but a regular file."""

    def digest(f: IO[bytes], executable: bool) -> str:
        h = hashlib.sha256()
        while (chunk := f.read(1 << 16)) and f.tell() <= MAX_HASHED_BYTES:
            h.update(chunk)
        h.update(b"x" if executable else b"-")
        return h.hexdigest()

    return _with_regular(path, MAX_HASHED_BYTES, digest)


def _digest(data: bytes, executable: bool) -> str:
    """The same digest as ``_sha256`` of a file with this content and executable bit."""
    h = hashlib.sha256()
    h.update(data)
    h.update(b"x" if executable else b"-")
    return h.hexdigest()


def _write_file(dest: Path, data: bytes, executable: bool) -> None:
    # Content and the executable bit only: no owner, no setuid, no timestamps to diff on.
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink():
        dest.unlink()
    dest.write_bytes(data)
    dest.chmod(0o755 if executable else 0o644)


def _classify(
    rel: str,
    allowed: list[str],
    result: CopyBackResult,
    bucket: list[str],
    size: int,
    read_only: Sequence[str] = ALWAYS_READ_ONLY,
) -> None:
    top = PurePosixPath(rel).parts[0]
    if rel in (HISTORY_NAME, BRIEF_NAME) or top == "trajectories":
        result.ignored.append(rel)
    elif _odd_name(rel):  # listed by its bytes, escaped: what git, JSON and a terminal can all carry
        result.violations.append(ascii(os.fsencode(rel))[2:-1])
    elif (
        top in PROTECTED
        or _is_git_meta(rel)
        or matches_any(rel, [*ALWAYS_READ_ONLY, *read_only])
        or not matches_any(rel, allowed)
        or size > MAX_FILE_BYTES
    ):
        result.violations.append(rel)
    else:
        bucket.append(rel)


def _odd_name(rel: str) -> bool:
    """A name that is not UTF-8 (its bytes came in as surrogates) or holds a control character:
    no skill needs one, and the manifest, git and the terminal would each read it differently."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return any(ord(c) < 32 or ord(c) == 127 for c in rel)


def _is_git_meta(rel: str) -> bool:
    """``.git``, ``.gitignore``, ``.gitattributes``, ``.gitmodules``... at any depth: a nested
    repository becomes a gitlink that empties the directory on accept, and ignore or attribute
    files make the committed or audited tree differ from the evaluated one."""
    return any(part.startswith(".git") for part in PurePosixPath(rel).parts)


def _safe_dest(ws: Path, rel: str, result: CopyBackResult) -> bool:
    """Refuse to write through a symlink that sits in the workspace on the way to ``rel``."""
    p = ws
    for part in PurePosixPath(rel).parts:
        p = p / part
        if p.is_symlink():
            result.violations.append(rel)
            return False
    return True


def _prune_empty_dirs(ws: Path, d: Path) -> None:
    # Keep the top-level skill/ and harness/ directories even when the agent emptied them.
    while d != ws and d.parent != ws and d.is_dir() and not any(d.iterdir()):
        d.rmdir()
        d = d.parent


def _is_junk(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return any(p in JUNK_PARTS for p in parts) or bool(JUNK_NAMES.match(parts[-1]))


def _copy_file(src: Path, dest: Path) -> None:
    # Content and the executable bit only: no owner, no setuid, no timestamps to diff on.
    if dest.is_symlink():
        dest.unlink()
    shutil.copyfile(src, dest)
    dest.chmod(0o755 if src.stat().st_mode & stat.S_IXUSR else 0o644)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    # The executable bit is part of the file's identity: chmod +x on a script is a change.
    h.update(b"x" if path.stat().st_mode & stat.S_IXUSR else b"-")
    return h.hexdigest()
