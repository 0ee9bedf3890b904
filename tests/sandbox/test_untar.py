"""harnessopt.sandbox.untar against hand-built hostile archives (no Docker needed)."""

from __future__ import annotations

import io
import os
import stat
import sys
import tarfile
import time
from pathlib import Path

import pytest

from harnessopt.sandbox.untar import extract

CAPS = dict(max_bytes=1 << 20, max_members=100)


def build(*members: tuple, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """members: (name, type, data_or_linkname[, mode]) -> uncompressed tar bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, kind, payload, *mode in members:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.mode = mode[0] if mode else 0o644
            if kind == tarfile.REGTYPE:
                ti.size = len(payload)
                tar.addfile(ti, io.BytesIO(payload))
            else:
                ti.linkname = payload
                tar.addfile(ti)
    return buf.getvalue()


def listing(root: Path) -> dict[str, str]:
    """relative path -> 'dir 755' / 'file 644 <content>' / anything else by lstat, never following links."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            perm = oct(stat.S_IMODE(st.st_mode))[2:]
            if stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {perm}"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = f"file {perm} {Path(p).read_bytes().decode()}"
            else:
                out[rel] = f"other {oct(st.st_mode)}"
    return out


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, Path]:
    """(dest, outside): a destination, and a sibling directory nothing may reach."""
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    return dest, outside


def test_regular_files_and_dirs_round_trip_with_modes(box):
    dest, _ = box
    data = build(
        ("d", tarfile.DIRTYPE, "", 0o777),
        ("d/run.py", tarfile.REGTYPE, b"print(1)", 0o4775),  # setuid, group write: dropped
        ("d/notes.md", tarfile.REGTYPE, b"hi", 0o666),
        ("./a//b/./c.txt", tarfile.REGTYPE, b"c"),  # normalised
        ("long/" + "n" * 150 + "/" + "é" * 60 + ".txt", tarfile.REGTYPE, b"pax name"),
    )
    result = extract(data, dest, **CAPS)
    assert result.skipped == [] and result.stopped is None
    assert (result.files, result.size) == (4, 19)
    got = listing(dest)
    assert got["d"] == "dir 755"
    assert got["d/run.py"] == "file 755 print(1)"
    assert got["d/notes.md"] == "file 644 hi"
    assert got["a/b/c.txt"] == "file 644 c"
    assert got["long/" + "n" * 150 + "/" + "é" * 60 + ".txt"] == "file 644 pax name"


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_links_devices_fifos_absolute_and_dotdot_are_skipped(box, fmt):
    dest, outside = box
    data = build(
        ("ok.txt", tarfile.REGTYPE, b"ok"),
        ("../outside/dotdot.txt", tarfile.REGTYPE, b"x"),
        ("a/../../outside/mid.txt", tarfile.REGTYPE, b"x"),
        (str(outside / "abs.txt"), tarfile.REGTYPE, b"x"),
        ("link", tarfile.SYMTYPE, str(outside)),
        ("link/through.txt", tarfile.REGTYPE, b"inside"),  # 'link' was skipped: a real dir now
        ("rel", tarfile.SYMTYPE, "../outside"),
        ("hard", tarfile.LNKTYPE, str(outside / "target")),
        ("hard2", tarfile.LNKTYPE, "ok.txt"),
        ("chr", tarfile.CHRTYPE, ""),
        ("blk", tarfile.BLKTYPE, ""),
        ("fifo", tarfile.FIFOTYPE, ""),
        ("skill/.git/hooks/../../../../outside/post-checkout", tarfile.REGTYPE, b"#!/bin/sh\n"),
        fmt=fmt,
    )
    result = extract(data, dest, **CAPS)
    assert listing(outside) == {}
    assert listing(dest) == {
        "ok.txt": "file 644 ok",
        "link": "dir 755",
        "link/through.txt": "file 644 inside",
    }
    reasons = "\n".join(result.skipped)
    for name, why in [
        ("../outside/dotdot.txt", "'..'"),
        ("a/../../outside/mid.txt", "'..'"),
        ("abs.txt", "absolute path"),
        ("link", "symbolic link"),
        ("rel", "symbolic link"),
        ("hard", "hard link"),
        ("hard2", "hard link"),
        ("chr", "device"),
        ("blk", "device"),
        ("fifo", "FIFO"),
        ("post-checkout", "'..'"),
    ]:
        assert any(name in line and why in line for line in result.skipped), (name, reasons)
    assert result.stopped is None and result.files == 2


def test_links_already_in_dest_are_never_followed(box):
    dest, outside = box
    (dest / "evil").symlink_to(outside)
    (dest / "file-link").symlink_to(outside / "target.txt")
    data = build(
        ("evil/planted.txt", tarfile.REGTYPE, b"x"),
        ("evil", tarfile.DIRTYPE, ""),
        ("file-link", tarfile.REGTYPE, b"x"),
    )
    result = extract(data, dest, **CAPS)
    assert listing(outside) == {}
    assert len(result.skipped) == 3 and result.files == 0, result.skipped


def test_duplicates_and_file_dir_clashes_keep_the_first(box):
    dest, _ = box
    data = build(
        ("a", tarfile.REGTYPE, b"first"),
        ("a", tarfile.REGTYPE, b"second"),
        ("a/b.txt", tarfile.REGTYPE, b"under a file"),
        ("d", tarfile.DIRTYPE, ""),
        ("d", tarfile.REGTYPE, b"file over dir"),
    )
    result = extract(data, dest, **CAPS)
    assert listing(dest) == {"a": "file 644 first", "d": "dir 755"}
    assert len(result.skipped) == 3


def test_member_count_cap_stops_early(box):
    dest, _ = box
    data = build(*[(f"f{i:04d}", tarfile.REGTYPE, b"") for i in range(500)])
    result = extract(data, dest, max_bytes=1 << 20, max_members=100)
    assert result.over_cap and "more than 100 members" in (result.stopped or "")
    assert len(os.listdir(dest)) == 100


def test_size_cap_stops_before_writing_the_member_that_crosses_it(box):
    dest, _ = box
    data = build(
        ("a", tarfile.REGTYPE, b"x" * 600),
        ("b", tarfile.REGTYPE, b"y" * 600),
        ("c", tarfile.REGTYPE, b"z"),
    )
    result = extract(data, dest, max_bytes=1000, max_members=100)
    assert result.over_cap and result.size == 600
    assert sorted(os.listdir(dest)) == ["a"]


def test_a_huge_declared_size_is_refused_without_reading(box):
    dest, _ = box
    ti = tarfile.TarInfo("bomb")
    ti.size = 64 << 30
    header = ti.tobuf(format=tarfile.PAX_FORMAT)  # a header claiming 64 GiB, followed by nothing
    result = extract(header + b"\0" * 1024, dest, **CAPS)
    assert result.over_cap and os.listdir(dest) == []


def test_truncated_garbage_and_compressed_input_stop_cleanly(box):
    dest, _ = box
    whole = build(("a.txt", tarfile.REGTYPE, b"a" * 3000), ("b.txt", tarfile.REGTYPE, b"b"))
    result = extract(whole[:1500], dest, **CAPS)
    assert result.stopped and "truncated" in result.stopped
    assert extract(os.urandom(4096), dest, **CAPS).stopped
    import gzip

    gz = extract(gzip.compress(build(("z.txt", tarfile.REGTYPE, b"z"))), dest, **CAPS)
    assert gz.stopped and not (dest / "z.txt").exists()  # never decompressed


def test_nul_and_overlong_names_are_skipped(box):
    dest, _ = box
    pax = io.BytesIO()
    with tarfile.open(fileobj=pax, mode="w", format=tarfile.PAX_FORMAT) as tar:
        ti = tarfile.TarInfo("plain")
        ti.pax_headers = {"path": "evil\0name"}
        tar.addfile(ti, io.BytesIO(b""))
        tar.addfile(tarfile.TarInfo("x" * 5000), io.BytesIO(b""))
    result = extract(pax.getvalue(), dest, **CAPS)
    assert os.listdir(dest) == [] and result.files == 0 and result.stopped is None
    assert ["NUL" in s for s in result.skipped] == [True, False] and "too long" in result.skipped[1]


# CVE-2025-4517 style: a chain of symlinks that makes os.path.realpath() give up past PATH_MAX, so
# tarfile's filter="data" approves a link that the kernel resolves outside the destination.
def path_max_chain(outside: Path) -> bytes:
    comp, steps = "d" * 247, "abcdefghijklmnop"
    members: list[tuple] = []
    path = ""
    for step in steps:
        members.append((os.path.join(path, comp), tarfile.DIRTYPE, ""))
        members.append((os.path.join(path, step), tarfile.SYMTYPE, comp))
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * 254)
    members.append((linkpath, tarfile.SYMTYPE, os.path.join(*[".."] * len(steps))))
    members.append(("escape", tarfile.SYMTYPE, linkpath + "/" + "../" * (len(steps) + 1) + str(outside)[1:]))
    members.append(("escape/post-checkout", tarfile.REGTYPE, b"#!/bin/sh\ntouch /tmp/pwned\n", 0o755))
    return build(*members)


@pytest.mark.skipif(sys.version_info >= (3, 11, 13), reason="tarfile's data filter is fixed here")
def test_the_chain_does_escape_tarfiles_data_filter_on_this_python(box):
    dest, outside = box  # proves the next test's archive is a real attack, not a strawman
    with tarfile.open(fileobj=io.BytesIO(path_max_chain(outside))) as tar:
        tar.extractall(dest, filter="data")
    assert (outside / "post-checkout").exists()


def test_the_chain_stays_inside_with_ours(box):
    dest, outside = box
    result = extract(path_max_chain(outside), dest, **CAPS)
    assert listing(outside) == {}
    assert all(os.path.islink(p) is False for p in (dest / "escape", dest / "a"))
    assert listing(dest)["escape/post-checkout"].startswith("file 755")  # a plain dir, inside
    assert sum("symbolic link" in s for s in result.skipped) == 18


def pax_header(body: bytes) -> bytes:
    ti = tarfile.TarInfo("PaxHeader")
    ti.type, ti.size = tarfile.XHDTYPE, len(body)
    return ti.tobuf(format=tarfile.USTAR_FORMAT) + body + b"\0" * (-len(body) % 512)


def test_a_pax_header_built_to_backtrack_ends_the_archive_at_once(box):
    dest, _ = box
    # CPython 3.11.7's tarfile spends 45 s on this 400 KB header (re.search over the digits is
    # quadratic, CVE-2024-6232); at the 64 MiB an /out archive may reach, it would never finish.
    body = b"9" * 200_000 + b" hdrcharset" + b"9 " * 100_000
    t0 = time.monotonic()
    result = extract(pax_header(body) + build(("after.txt", tarfile.REGTYPE, b"a")), dest, **CAPS)
    assert time.monotonic() - t0 < 2
    assert result.stopped and os.listdir(dest) == []


@pytest.mark.parametrize(
    "body",
    [b"13 path=abc\n", b"11 path=abc\n", b"999 path=abc\n", b"x path=abc\n", b"13 pathabcde\n"],
)
def test_malformed_pax_records_end_the_archive(box, body):
    dest, _ = box
    result = extract(pax_header(body) + build(("after.txt", tarfile.REGTYPE, b"a")), dest, **CAPS)
    assert result.stopped and os.listdir(dest) == []


def test_well_formed_pax_records_rename_the_next_member_only(box):
    dest, _ = box
    body = b"16 path=renamed\n" + b"20 comment=whatever\n"
    data = pax_header(body) + build(("orig", tarfile.REGTYPE, b"1"), ("second", tarfile.REGTYPE, b"2"))
    result = extract(data, dest, **CAPS)
    assert listing(dest) == {"renamed": "file 644 1", "second": "file 644 2"} and not result.stopped
