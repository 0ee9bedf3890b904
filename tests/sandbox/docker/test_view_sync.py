"""view_sync: the host's side of the optimizer view's copy into its container and back."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

from harnessopt.sandbox.docker import view_sync


def _tar(members: dict[str, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_pack_keeps_files_and_directories_only(tmp_path: Path) -> None:
    view = tmp_path / "view"
    (view / "skill" / "empty").mkdir(parents=True)
    (view / "skill" / "SKILL.md").write_text("body")
    (view / "skill" / "run.sh").write_text("#!/bin/sh\n")
    (view / "skill" / "run.sh").chmod(0o700)
    (view / "skill" / "private.md").write_text("p")
    (view / "skill" / "private.md").chmod(0o600)
    (tmp_path / "secret").write_text("host secret")
    (view / "skill" / "link").symlink_to(tmp_path / "secret")
    (view / "linkdir").symlink_to(tmp_path)
    os.mkfifo(view / "skill" / "pipe")
    packed = view_sync.pack(view)
    with tarfile.open(fileobj=io.BytesIO(packed.data)) as tar:
        members = {m.name: (m.type, stat.S_IMODE(m.mode)) for m in tar.getmembers()}
    assert members == {
        "skill": (tarfile.DIRTYPE, 0o755),
        "skill/empty": (tarfile.DIRTYPE, 0o755),
        "skill/SKILL.md": (tarfile.REGTYPE, 0o644),
        "skill/private.md": (tarfile.REGTYPE, 0o644),
        "skill/run.sh": (tarfile.REGTYPE, 0o755),
    }
    assert (packed.entries, packed.size, packed.pages) == (5, 4 + 10 + 1, 3 * view_sync.PAGE)


def test_replace_swaps_the_contents_and_keeps_the_view_directory(tmp_path: Path) -> None:
    view = tmp_path / "view"
    (view / "old").mkdir(parents=True)
    (view / "old" / "gone.md").write_text("old")
    inode = view.stat().st_ino
    data = _tar({"./": None, "./skill": None, "./skill/SKILL.md": b"new", "./notes.md": b"n"})
    result = view_sync.replace(view, data, max_bytes=1 << 20, max_members=100)
    assert result.stopped is None and result.size == 4
    assert view.stat().st_ino == inode
    assert sorted(p.relative_to(view).as_posix() for p in view.rglob("*")) == [
        "notes.md",
        "skill",
        "skill/SKILL.md",
    ]
    assert (view / "skill" / "SKILL.md").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["view"]  # no fresh or old copy left


def test_a_broken_or_oversized_archive_leaves_the_view_as_it_was(tmp_path: Path) -> None:
    view = tmp_path / "view"
    view.mkdir()
    (view / "kept.md").write_text("kept")
    data = _tar({"a.md": b"x" * 5000, "b.md": b"y"})
    over = view_sync.replace(view, data, max_bytes=1000, max_members=100)
    assert over.over_cap and over.stopped
    broken = view_sync.replace(view, data[:1200], max_bytes=1 << 20, max_members=100)
    assert broken.stopped and not broken.over_cap
    assert sorted(p.name for p in view.iterdir()) == ["kept.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["view"]


def test_tmpfs_usage_reads_the_stat_line() -> None:
    usage = view_sync.TmpfsUsage.parse(b"4096 100 40 500 480")
    assert usage == view_sync.TmpfsUsage(used=60 * 4096, total=100 * 4096, inodes=20)
    assert view_sync.TmpfsUsage.parse(b"stat: cannot read") is None
