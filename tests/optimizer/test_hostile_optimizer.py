"""A hostile optimizer against the host, without Docker: the editor and copy-back must hold.

Each test is an attack from the adversarial review (issue 8): the editor racing a background
process that swaps a view directory for a symlink to a host directory (8.1), a FIFO and a huge
sparse file handed to the editor (8.1), and copy-back flooded with files or fed a 1 GiB file (8.11).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from harnessopt.optimizer import view as view_mod
from harnessopt.optimizer.tools import EditorTool
from harnessopt.optimizer.view import build_view, copy_back

SECRET = "HOST-SECRET-0b6d"


@pytest.fixture
def view(ws: Path, tmp_path: Path) -> Path:
    v = tmp_path / "private" / "view"
    build_view(ws, v, history_md="# History\n", brief_md="# Brief\n")
    return v


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    d = tmp_path / "host-secrets"
    d.mkdir()
    (d / "secret.md").write_text(SECRET)
    return d


def _call_with_deadline(
    ed: EditorTool, tool_input: dict[str, Any], seconds: float
) -> tuple[str, bool] | None:
    out: list[tuple[str, bool]] = []
    worker = threading.Thread(target=lambda: out.append(ed(tool_input)), daemon=True)
    worker.start()
    worker.join(seconds)
    return out[0] if out else None


# A process the optimizer left behind (on the host, nothing stops one that escaped its shell)
# waits until the editor opens skill/hold (a FIFO) for reading, swaps skill/ for a symlink to a
# host directory, then feeds the editor what it expects: str_replace writes the file back through
# the symlink, i.e. into the host directory (a .git/config with core.fsmonitor, say).
SWAPPER = """
import os, sys
target = sys.argv[1]
os.symlink(target, "lnk")
fd = os.open("skill/hold", os.O_WRONLY)  # blocks until a reader opens the FIFO
os.rename("skill", "real")
os.rename("lnk", "skill")
os.write(fd, b"[core]\\n\\tfsmonitor = HOLD\\n")
os.close(fd)
"""


def test_editor_cannot_be_raced_into_a_host_dir_by_a_symlink_swap(view: Path, host_dir: Path) -> None:
    os.mkfifo(view / "skill" / "hold")
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(host_dir)], cwd=view, start_new_session=True
    )
    try:
        tool_input = {
            "command": "str_replace",
            "path": "skill/hold",
            "old_str": "HOLD",
            "new_str": "touch /tmp/pwned",
        }
        result = _call_with_deadline(EditorTool(view), tool_input, 15)
    finally:
        swapper.kill()
        swapper.wait()
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret.md"], "an edit landed in the host dir"
    assert result is not None and result[1] and "regular file" in result[0], result


def test_editor_refuses_a_symlinked_component_to_a_host_dir(view: Path, host_dir: Path) -> None:
    (view / "skill" / "etc").symlink_to(host_dir)
    ed = EditorTool(view)
    text, err = ed({"command": "view", "path": "skill/etc/secret.md"})
    assert err and SECRET not in text
    assert ed({"command": "create", "path": "skill/etc/new.md", "file_text": "x"})[1]
    assert ed({"command": "str_replace", "path": "skill/etc/secret.md", "old_str": "HOST", "new_str": "X"})[1]
    assert sorted(p.name for p in host_dir.iterdir()) == ["secret.md"]
    assert (host_dir / "secret.md").read_text() == SECRET


def test_a_fifo_in_the_view_does_not_block_the_editor(view: Path) -> None:
    fifo = view / "skill" / "notes.md"
    os.mkfifo(fifo)
    try:
        for tool_input in (
            {"command": "view", "path": "skill/notes.md"},
            {"command": "str_replace", "path": "skill/notes.md", "old_str": "a", "new_str": "b"},
            {"command": "create", "path": "skill/notes.md", "file_text": "x"},
        ):
            result = _call_with_deadline(EditorTool(view), tool_input, 15)
            assert result is not None, f"the editor blocked on a FIFO: {tool_input}"
            assert result[1] and "regular file" in result[0]
    finally:  # release a reader blocked in open() (the code before the fix)
        for _ in range(3):
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_a_huge_sparse_file_is_refused_without_reading_it(view: Path) -> None:
    huge = view / "skill" / "huge.md"
    with huge.open("wb") as f:
        f.truncate(512 << 20)
    started = time.monotonic()
    text, err = EditorTool(view)({"command": "view", "path": "skill/huge.md"})
    assert err and "bytes" in text and len(text) < 1000
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------- copy-back caps (8.11)


def test_copy_back_caps_the_number_of_changed_files(ws: Path, view: Path) -> None:
    snap = build_view(ws, view, history_md="h", brief_md="b")
    for i in range(300):
        (view / "skill" / f"f{i:03}.md").write_text(f"file {i}\n" * 100)
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert len(res.changed) == view_mod.MAX_CHANGED_FILES
    assert len(list((ws / "skill").glob("f*.md"))) == view_mod.MAX_CHANGED_FILES
    assert len([v for v in res.violations if v.startswith("skill/f")]) == 300 - view_mod.MAX_CHANGED_FILES


def test_copy_back_caps_the_total_bytes_of_changed_files(ws: Path, view: Path) -> None:
    snap = build_view(ws, view, history_md="h", brief_md="b")
    for i in range(12):
        (view / "skill" / f"big{i:02}.bin").write_bytes(bytes([65 + i]) * ((1 << 20) - 1))
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    written = sum((ws / rel).stat().st_size for rel in res.changed)
    assert 0 < written <= view_mod.MAX_CHANGED_BYTES
    assert len(res.changed) == view_mod.MAX_CHANGED_BYTES // ((1 << 20) - 1)
    assert len(res.violations) == 12 - len(res.changed)


def test_copy_back_never_hashes_a_huge_file_or_opens_a_fifo(
    ws: Path, view: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = build_view(ws, view, history_md="h", brief_md="b")
    with (view / "skill" / "huge.md").open("wb") as f:
        f.truncate(1 << 30)
    os.mkfifo(view / "skill" / "pipe.md")
    hashed = [0]
    real_sha256 = hashlib.sha256

    class Counting:
        def __init__(self, data: bytes = b"") -> None:
            self.h = real_sha256(data)
            hashed[0] += len(data)

        def update(self, data: bytes) -> None:
            hashed[0] += len(data)
            self.h.update(data)

        def hexdigest(self) -> str:
            return self.h.hexdigest()

    monkeypatch.setattr(view_mod.hashlib, "sha256", Counting)
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert {"skill/huge.md", "skill/pipe.md"} <= set(res.violations)
    assert hashed[0] < 16 << 20, f"copy-back hashed {hashed[0]} bytes"
    assert not (ws / "skill" / "huge.md").exists() and not (ws / "skill" / "pipe.md").exists()


def test_copy_back_carries_no_setuid_or_group_bits(ws: Path, view: Path) -> None:
    snap = build_view(ws, view, history_md="h", brief_md="b")
    tool = view / "skill" / "scripts" / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o6777)
    res = copy_back(view, ws, ["skill/**"], snapshot=snap)
    assert "skill/scripts/tool.sh" in res.changed
    assert stat.S_IMODE((ws / "skill" / "scripts" / "tool.sh").stat().st_mode) == 0o755
