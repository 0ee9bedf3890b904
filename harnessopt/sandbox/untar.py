"""Unpack an untrusted tar archive: regular files and directories only, never outside ``dest``.

Neither ``tarfile``'s extraction nor its parser is used. On the CPython we run (3.11.7) its
``filter="data"`` can be bypassed with symlink chains longer than PATH_MAX (fixed in 3.11.13 /
3.12.11 / 3.13.4), and its pax parser backtracks quadratically on a crafted header (45 s for
400 KB here). This module reads the small subset that ``tarfile`` (the in-container runner) and
``git archive`` write, strictly and in linear time, and writes every member itself:

* headers: ustar, GNU and pax (``path`` and ``size`` used, other keys ignored), checksums checked,
  base-256 numbers, over-long headers and malformed pax records end the archive;
* only regular files and directories; links (symbolic and hard), devices, FIFOs, sparse and
  contiguous members are skipped with a note;
* a name is split on ``/``, ``.`` and empty parts dropped; absolute names and ``..`` are refused;
* every parent directory is opened from a directory fd of ``dest``, one component at a time,
  with ``O_NOFOLLOW | O_DIRECTORY``, so a symlink already in ``dest`` (or made by a racing
  process) is never followed; files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``;
* modes are 0644 or 0755 (executable when the owner-execute bit was set), nothing else;
* a total size cap and a member-count cap stop extraction early (``UntarResult.stopped``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 512
MAX_DEPTH = 64  # path components in one member name
MAX_NAME = 4096  # bytes in one member name
MAX_HEADER = 64 * 1024  # bytes in one pax or GNU long-name header
MAX_NOTED = 20  # skipped members listed one by one in notes(); the rest are counted
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "device",
    b"4": "device",
    b"6": "FIFO",
    b"7": "contiguous file",
}


class _Refused(Exception):
    """This member is not written; the message says why."""


class _Broken(Exception):
    """The archive cannot be read past this point."""


@dataclass
class _Member:
    name: str
    kind: str  # "file", "dir" or what else it is
    size: int
    mode: int
    mtime: int
    offset: int  # where its data starts in the archive


@dataclass
class UntarResult:
    """What ``extract`` wrote, what it skipped, and why it stopped early (if it did)."""

    files: int = 0
    dirs: int = 0
    size: int = 0
    skipped: list[str] = field(default_factory=list)  # "name: reason", one per member not written
    skipped_names: list[str] = field(default_factory=list)  # their names, as paths below ``dest``
    stopped: str | None = None  # set when members after some point were not even looked at
    over_cap: bool = False  # stopped by the size or member-count cap (not by a broken archive)

    def notes(self, prefix: str = "") -> list[str]:
        """Short lines for a report: the first skipped members, a count of the rest, the stop reason."""
        out = [f"skipped {prefix}{s}" for s in self.skipped[:MAX_NOTED]]
        if len(self.skipped) > MAX_NOTED:
            out.append(f"skipped {len(self.skipped) - MAX_NOTED} more members")
        if self.stopped:
            out.append(self.stopped)
        return out


def extract(data: bytes, dest: Path, *, max_bytes: int, max_members: int) -> UntarResult:
    """Unpack the uncompressed tar ``data`` into the existing directory ``dest`` (see the module doc)."""
    result = UntarResult()
    view = memoryview(data)
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for count, member in enumerate(_members(view), start=1):
            if count > max_members:
                result.stopped = f"more than {max_members} members; the rest was not unpacked"
                result.over_cap = True
                break
            if member.kind == "file" and result.size + member.size > max_bytes:
                result.stopped = f"more than {max_bytes} bytes; the rest was not unpacked"
                result.over_cap = True
                break
            if member.offset + member.size > len(view):
                raise _Broken(f"{_printable(member.name)} is cut short")
            try:
                _one(view, member, root, result)
            except _Refused as e:
                result.skipped.append(f"{_printable(member.name)}: {e}")
                result.skipped_names.append(_printable("/".join(_components(member.name))))
    except _Broken as e:
        result.stopped = f"archive broken or truncated ({e}); the rest was not unpacked"
    finally:
        os.close(root)
    return result


def _members(data: memoryview) -> Iterator[_Member]:
    """The members of a ustar/GNU/pax archive, in order; pax and long-name headers applied."""
    pos = 0
    pax: dict[str, bytes] = {}
    long_name: bytes | None = None
    while pos < len(data):
        block = bytes(data[pos : pos + BLOCK])
        if len(block) < BLOCK:
            raise _Broken("truncated header")
        if block == bytes(BLOCK):
            return  # end-of-archive blocks
        if _number(block[148:156]) != sum(block[:148]) + 8 * 32 + sum(block[156:]):
            raise _Broken(f"bad header checksum at byte {pos}")
        flag, size = block[156:157], _number(block[124:136])
        offset = pos + BLOCK
        pos = offset + -(-size // BLOCK) * BLOCK
        if flag in (b"x", b"g", b"L", b"K"):
            if size > MAX_HEADER or offset + size > len(data):
                raise _Broken("extended header too long or cut short")
            body = bytes(data[offset : offset + size])
            if flag == b"x":
                pax.update(_pax_records(body))
            elif flag == b"L":
                long_name = body.split(b"\0", 1)[0]
            continue  # 'g' (global) and 'K' (long link name) carry nothing we use
        name = long_name or pax.get("path") or _ustar_name(block)
        if "size" in pax:
            size = _decimal(pax["size"])
            pos = offset + -(-size // BLOCK) * BLOCK
        text = name.decode("utf-8", "surrogateescape")
        regular = flag in (b"0", b"\0")
        if flag == b"5" or (regular and text.endswith("/")):
            kind = "dir"
        elif regular and not any(k.startswith("GNU.sparse") for k in pax):
            kind = "file"
        elif regular or flag == b"S":
            kind = "sparse file"
        else:
            kind = _KINDS.get(flag, f"member of type {flag!r}")
        yield _Member(text, kind, size, _number(block[100:108]), _number(block[136:148]), offset)
        pax, long_name = {}, None


def _ustar_name(block: bytes) -> bytes:
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    if block[257:265] == b"ustar\x0000" and prefix:  # POSIX ustar: a prefix; GNU uses the field otherwise
        return prefix + b"/" + name
    return name


def _number(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:
        raise _Broken("base-256 number (a member over 8 GiB or a negative value)")
    digits = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise _Broken(f"bad octal field {digits[:20]!r}") from None


def _decimal(value: bytes) -> int:
    if not value.isdigit() or len(value) > 20:
        raise _Broken(f"bad pax number {value[:20]!r}")
    return int(value)


def _pax_records(body: bytes) -> dict[str, bytes]:
    """``"%d %s=%s\\n" % (length, key, value)`` records, each checked; linear in ``len(body)``."""
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(body) and body[pos] != 0:
        space = body.find(b" ", pos, pos + 21)
        length = _decimal(body[pos:space]) if space > pos else 0
        record = body[pos : pos + length]
        if length <= space - pos or len(record) != length or not record.endswith(b"\n"):
            raise _Broken("malformed pax record")
        key, eq, value = record[space - pos + 1 : -1].partition(b"=")
        if not eq:
            raise _Broken("malformed pax record")
        out[key.decode("utf-8", "replace")] = value
        pos += length
    return out


def _one(data: memoryview, member: _Member, root: int, result: UntarResult) -> None:
    parts = _parts(member.name)
    if member.kind == "dir":
        os.close(_open_dirs(root, parts))
        result.dirs += 1
        return
    if member.kind != "file":
        raise _Refused(f"{member.kind}, only regular files and directories are kept")
    if not parts:
        raise _Refused("a file cannot be the destination directory itself")
    parent = _open_dirs(root, parts[:-1])
    try:
        mode = 0o755 if member.mode & 0o100 else 0o644
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, mode, dir_fd=parent)
        except OSError as e:
            raise _Refused(f"cannot create it ({e.strerror})") from None
        try:
            os.fchmod(fd, mode)  # exactly 0644/0755, whatever the umask
            _write_all(fd, data[member.offset : member.offset + member.size])
            result.size += member.size
            if 0 <= member.mtime < 1 << 33:
                os.utime(fd, (member.mtime, member.mtime))
        except OSError as e:  # a full disk: this member is incomplete, the next ones would be too
            raise _Broken(f"writing {_printable(member.name)}: {e.strerror}") from None
        finally:
            os.close(fd)
    finally:
        os.close(parent)
    result.files += 1


def _parts(name: str) -> list[str]:
    if "\0" in name:
        raise _Refused("NUL byte in the name")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME:
        raise _Refused(f"name too long (over {MAX_NAME} bytes)")
    if name.startswith("/"):
        raise _Refused("absolute path")
    parts = _components(name)
    if ".." in parts:
        raise _Refused("'..' in the path")
    if len(parts) > MAX_DEPTH:
        raise _Refused(f"nested deeper than {MAX_DEPTH} directories")
    return parts


def _components(name: str) -> list[str]:
    """A member name's path components, the empty and ``.`` ones dropped."""
    return [p for p in name.split("/") if p not in ("", ".")]


def _open_dirs(root: int, parts: list[str]) -> int:
    """A new fd of ``root/parts...``, creating missing directories (0755), never following a link."""
    fd = os.dup(root)
    try:
        for part in parts:
            made = False
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
                made = True
            except FileExistsError:
                pass
            except OSError as e:
                raise _Refused(f"cannot create directory {part!r} ({e.strerror})") from None
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:  # ELOOP: a symlink; ENOTDIR: a file
                raise _Refused(f"{part!r} is not a directory ({e.strerror})") from None
            if made:
                os.fchmod(child, 0o755)  # whatever the umask
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data[: 1 << 20]) :]


def _printable(name: str) -> str:
    text = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)[:200]
