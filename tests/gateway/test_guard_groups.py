"""gateway.guard's socket groups where this process may not chown: a user namespace without a group
mapping (a rootless container, ``unshare -U``) refuses chown even to our own group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SNIPPET = """
import os, socket, sys
from pathlib import Path
from harnessopt.gateway.guard import secure_socket, secure_socket_dir
d = Path(sys.argv[1]) / "sockets"
d.mkdir()
secure_socket_dir(d, os.getgid(), 0o710)
s = socket.socket(socket.AF_UNIX)
s.bind(str(d / "gw.sock"))
secure_socket(d / "gw.sock", os.getgid())
print(oct(d.stat().st_mode & 0o777), oct((d / "gw.sock").stat().st_mode & 0o777))
"""


def test_the_socket_dir_is_secured_in_a_user_namespace_without_a_group_mapping(tmp_path: Path) -> None:
    """As nobody in a fresh user namespace (how the gateway's group is ours when not root): the
    directory and socket get their modes; before, ``os.chown`` to our own group raised EINVAL and
    every run there failed at the gateway's start."""
    work = tmp_path / "w"
    work.mkdir(mode=0o777)
    work.chmod(0o777)
    r = subprocess.run(
        ["unshare", "-U", sys.executable, "-c", SNIPPET, str(work)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0o710", "0o660"]
