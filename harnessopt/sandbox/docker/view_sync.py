"""The optimizer's view between the host and its container's size-limited ``/view`` (a tmpfs).

``pack`` makes the tar that seeds the container: the host view's directories and regular files
only, read without following a link. ``replace`` unpacks the tar the container sends back with
the strict reader (``untar``: regular files and directories, modes 0644/0755, size and member
caps) into a fresh directory next to the view, then moves it in place of the view's contents:
the view's path and directory stay (callers hold them), and it never holds what the container
made but a file or a directory. ``TmpfsUsage`` reads the ``stat -f`` line the container prints.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harnessopt.sandbox import untar

PAGE = 4096  # a tmpfs file takes whole pages
# Printed by the container before its tar: fragment size, blocks, free blocks, inodes, free inodes.
STATFS = 'stat -f -c "%S %b %f %c %d" /view'
TAR_IN = ["sh", "-c", f"tar -C /view -xpf - && {STATFS}"]  # seeds /view, as the container's uid
OVER = 3  # tar_out's exit code when the view is over a cap (then it sends no tar)


@dataclass(frozen=True)
class Packed:
    """A tar of the view, with what it will take on a tmpfs (bytes in pages) and its entries."""

    data: bytes
    pages: int
    entries: int
    size: int  # bytes of file content


@dataclass(frozen=True)
class TmpfsUsage:
    """``/view``'s file system as ``stat -f`` saw it: bytes used and total, inodes used."""

    used: int
    total: int
    inodes: int

    @classmethod
    def parse(cls, line: bytes) -> TmpfsUsage | None:
        """From the ``STATFS`` line; None when it is not one."""
        try:
            frsize, blocks, free, files, ffree = (int(x) for x in line.split())
        except ValueError:
            return None
        return cls((blocks - free) * frsize, blocks * frsize, files - ffree)


def pack(view: Path) -> Packed:
    """The directories and regular files below ``view`` as a tar (anything else is left out)."""
    buf = io.BytesIO()
    pages = entries = size = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(view):
            rel_dir = os.path.relpath(dirpath, view)
            for name in sorted(dirnames) + sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                st = os.lstat(path)
                info = tarfile.TarInfo(rel)
                info.mode = 0o755 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o100 else 0o644
                info.mtime = int(st.st_mtime)
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif stat.S_ISREG(st.st_mode):
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                    with os.fdopen(fd, "rb") as f:
                        info.size = os.fstat(fd).st_size
                        tar.addfile(info, f)
                    pages += -(-info.size // PAGE) * PAGE
                    size += info.size
                else:
                    continue
                entries += 1
    return Packed(buf.getvalue(), pages, entries, size)


def replace(view: Path, data: bytes, *, max_bytes: int, max_members: int) -> untar.UntarResult:
    """Unpack ``data`` into a fresh directory and move it in place of ``view``'s contents.

    The view is left as it was when the archive is broken or over a cap (``result.stopped``)."""
    fresh = Path(tempfile.mkdtemp(prefix=f".{view.name}.sync-", dir=view.parent))
    try:
        result = untar.extract(data, fresh, max_bytes=max_bytes, max_members=max_members)
        if result.stopped:
            return result
        trash = Path(tempfile.mkdtemp(prefix=f".{view.name}.old-", dir=view.parent))
        try:
            for name in os.listdir(view):
                os.rename(view / name, trash / name)
            for name in os.listdir(fresh):
                os.rename(fresh / name, view / name)
        finally:
            shutil.rmtree(trash, ignore_errors=True)
        return result
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def tar_out(max_used: int, max_entries: int, max_bytes: int) -> list[str]:
    """The container's side of copying the view out: its ``stat -f`` line, then, unless the view
    takes more than ``max_used`` bytes, holds more than ``max_entries`` entries or its files'
    sizes (holes count, and every name of a hard link: tar writes each in full) add up to more
    than ``max_bytes``, a tar of it (else exit ``OVER``).
    Everything in /view belongs to the container's uid: ``u+rwX`` first lets tar read it all."""
    script = (
        f'chmod -R u+rwX /view 2>/dev/null; s=$({STATFS}) && echo "$s" && set -- $s || exit 2; '
        f"[ $((($2 - $3) * $1)) -le {max_used} ] && [ $(($4 - $5)) -le {max_entries} ] "
        f"&& [ $(du -s -l -B1 --apparent-size /view | cut -f1) -le {max_bytes + (1 << 20)} ] || exit {OVER}; "
        "exec tar -C /view --format=gnu --hard-dereference -cf - ."
    )
    return ["sh", "-c", script]


def require_private_parent(view: Path) -> None:
    """The view must sit in a directory that only the host user can enter (ValueError otherwise)."""
    st = view.parent.stat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise ValueError(
            f"the optimizer's view {view} must be inside a directory only you can enter (mode 0700), "
            "e.g. Path(tempfile.mkdtemp()) / 'view': the view's copies are made and swapped there"
        )
