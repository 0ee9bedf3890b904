"""One temporary folder a process: made inside while it lives, removed after, swept when it was killed."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harnessopt.util import tmpdirs

OLD = time.time() - 10 * tmpdirs.YOUNG_S


def _claimer(base: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that claims its folder under ``base``, makes a temporary folder in it and waits."""
    script = f"""
        import sys, tempfile, time
        from pathlib import Path
        from harnessopt.util import tmpdirs
        with tmpdirs.claimed(Path({str(base)!r})) as root:
            Path(tempfile.mkdtemp(prefix="ho-slot-"), "trajectory.jsonl").write_text("{{}}")
            print(root, flush=True)
            time.sleep(600)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


@pytest.fixture
def base() -> Iterator[Path]:
    """A short folder to claim in (pytest's ``base`` is longer than ``MAX_BASE``)."""
    path = Path(tempfile.mkdtemp(prefix="ho-t-"))
    assert len(str(path)) <= tmpdirs.MAX_BASE
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _age(path: Path) -> None:
    os.utime(path, (OLD, OLD))


def test_temporary_folders_are_made_inside_and_removed_after(base: Path) -> None:
    before = tempfile.tempdir
    with tmpdirs.claimed(base) as root:
        assert root is not None and root.parent == base and root.name.startswith(tmpdirs.PREFIX)
        made = Path(tempfile.mkdtemp(prefix="ho-view-"))
        assert made.parent == root
        with tempfile.TemporaryDirectory() as t:  # the libraries' too
            assert Path(t).parent == root
    assert tempfile.tempdir == before
    assert not root.exists()


def test_removed_also_when_the_block_raises(base: Path) -> None:
    with pytest.raises(KeyboardInterrupt), tmpdirs.claimed(base) as root:
        raise KeyboardInterrupt
    assert root is not None and not root.exists()


def test_a_killed_process_folder_is_swept_and_a_live_ones_is_not(base: Path) -> None:
    dead, dead_root = _claimer(base)
    live, live_root = _claimer(base)
    try:
        dead.send_signal(signal.SIGKILL)  # no way out runs
        dead.wait(timeout=30)
        assert list(dead_root.glob("ho-slot-*/trajectory.jsonl"))  # what SIGKILL leaves
        _age(dead_root), _age(live_root)
        with tmpdirs.claimed(base) as mine:
            assert not dead_root.exists()
            assert list(live_root.glob("ho-slot-*/trajectory.jsonl"))  # its lock is held: left alone
            assert mine is not None and mine.exists()
    finally:
        live.kill()
        live.wait(timeout=30)
    live_root and _age(live_root)
    assert tmpdirs.sweep(base) == [live_root]  # once its process is gone


def test_young_folders_and_other_names_are_left_alone(base: Path) -> None:
    unlocked = base / f"{tmpdirs.PREFIX}young"  # its maker may be about to lock it
    unlocked.mkdir()
    stale = base / f"{tmpdirs.PREFIX}stale"  # its maker died before it locked
    stale.mkdir()
    _age(stale)
    other = base / "ho-slot-abc"  # not a run's folder
    other.mkdir()
    _age(other)
    assert tmpdirs.sweep(base) == [stale]
    assert unlocked.exists() and other.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_folder_is_left_alone(base: Path) -> None:
    theirs = base / f"{tmpdirs.PREFIX}theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    _age(theirs)
    assert tmpdirs.sweep(base) == []
    assert theirs.exists()


def test_a_long_base_claims_nothing(base: Path) -> None:
    long = base / ("x" * tmpdirs.MAX_BASE)
    long.mkdir()
    before = tempfile.tempdir
    with tmpdirs.claimed(long) as root:
        assert root is None and tempfile.tempdir == before
    assert list(long.iterdir()) == []


def test_a_base_that_takes_no_folder_claims_nothing(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_a: object, **_k: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    before = tempfile.tempdir
    with tmpdirs.claimed(base) as root:  # status must still run on a full disk
        assert root is None and tempfile.tempdir == before
