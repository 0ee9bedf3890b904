"""The harnessopt process keeps the real key out of reach: non-dumpable, and no key left in os.environ."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anthropic
import pytest
import yaml

from harnessopt.gateway.models.scripted import ScriptedModel
from harnessopt.util import hardening
from tests.support.cli import upstream_script, write_example
from tests.support.fake_anthropic import FakeAnthropicServer

REAL_KEY = "sk-ant-REAL-hardening-5be1"
NOBODY = 65534
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _libc_dumpable() -> int:
    """PR_GET_DUMPABLE asked directly, not through the module under test."""
    return int(ctypes.CDLL(None, use_errno=True).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


def _fork(body: Callable[[], int]) -> int:
    """Run ``body`` in a forked child; its return value is the child's exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _as_nobody_can_read(target: int) -> dict[str, bool]:
    """From a child dropped to uid 65534: which of /proc/<target>/{environ,mem} it can open."""
    r, w = os.pipe()

    def attacker() -> int:
        os.close(r)
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        bits = ""
        for name in ("environ", "mem"):
            try:
                with open(f"/proc/{target}/{name}", "rb") as f:
                    f.read(1) if name == "environ" else None
                bits += "1"
            except PermissionError:
                bits += "0"
        os.write(w, bits.encode())
        return 0

    pid = _fork(attacker)
    os.close(w)
    bits = os.read(r, 16).decode()
    os.close(r)
    assert _exit_code(pid) == 0 and len(bits) == 2, bits
    return {"environ": bits[0] == "1", "mem": bits[1] == "1"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run both sides as uid 65534 (root bypasses the check)"
)
def test_a_same_uid_process_reads_environ_before_hardening_and_not_after() -> None:
    # The target stands in for harnessopt: uid 65534, like its attacker (a local harness of the same uid).
    to_target_r, to_target_w = os.pipe()
    from_target_r, from_target_w = os.pipe()

    def target() -> int:
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        # A uid change clears the flag; a process exec'd as 65534 would start dumpable, so set it back.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.write(from_target_w, b"u")  # up, dumpable like any process
        os.read(to_target_r, 1)  # harden now
        ok = hardening.make_non_dumpable()
        os.write(from_target_w, b"h" if ok else b"x")
        os.read(to_target_r, 1)  # done
        return 0

    pid = _fork(target)
    try:
        assert os.read(from_target_r, 1) == b"u"
        before = _as_nobody_can_read(pid)
        os.write(to_target_w, b"1")
        assert os.read(from_target_r, 1) == b"h"
        after = _as_nobody_can_read(pid)
    finally:
        os.write(to_target_w, b"1")
        _exit_code(pid)
    assert before == {"environ": True, "mem": True}
    assert after == {"environ": False, "mem": False}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_the_cli_makes_harnessopt_non_dumpable_first_thing(tmp_path: Path) -> None:
    def run_cli() -> int:
        from harnessopt import cli

        assert _libc_dumpable() == 1
        code = cli.main(["status", str(tmp_path / "no-workspace")])  # a UserError: exit 2
        return 10 + _libc_dumpable() if code == 2 else 99

    assert _exit_code(_fork(run_cli)) == 10  # PR_GET_DUMPABLE == 0 after main()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")
def test_is_dumpable_and_make_non_dumpable_agree_with_prctl() -> None:
    def harden() -> int:
        seen = (hardening.is_dumpable(), hardening.make_non_dumpable(), _libc_dumpable())
        return 0 if seen == (True, True, 0) else 1

    assert _exit_code(_fork(harden)) == 0


def test_drop_secrets_unsets_every_key_variable_for_later_children(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "ANTHROPIC_API_KEY": REAL_KEY,
        "OPENAI_API_KEY": "sk-openai-x",
        "MY_VENDOR_API_KEY": "v",
        "ANTHROPIC_AUTH_TOKEN": "t",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "API_KEYS_DOC": "not a key",
    }.items():
        monkeypatch.setenv(name, value)
    dropped = hardening.drop_secrets_from_environ()
    assert dropped == ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "MY_VENDOR_API_KEY", "OPENAI_API_KEY"]
    child_env = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout  # inherits
    assert REAL_KEY not in child_env and "OPENAI_API_KEY" not in child_env and "AUTH_TOKEN" not in child_env
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:1" in child_env and "API_KEYS_DOC" in child_env


def test_open_services_takes_the_key_out_of_the_environment_and_upstream_still_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harnessopt.round.services import open_services
    from harnessopt.workspace.core import Workspace, init_workspace

    skill, tasks = write_example(tmp_path)
    ws_path = init_workspace(tmp_path / "ws", skill, tasks, announce=lambda _: None)
    cfg = yaml.safe_load((ws_path / "harnessopt.yaml").read_text())
    cfg["model"]["provider"] = "anthropic"
    (ws_path / "harnessopt.yaml").write_text(yaml.safe_dump(cfg))
    ws = Workspace.open(ws_path, {"rollout.sandbox": "local"})
    with FakeAnthropicServer(ScriptedModel.from_dict(upstream_script())) as upstream:
        monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-y")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", upstream.base_url)
        with open_services(ws.root, ws.cfg, lambda _: None, with_optimizer=False) as svc:
            assert "ANTHROPIC_API_KEY" not in os.environ and "OPENAI_API_KEY" not in os.environ
            child_env = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
            assert REAL_KEY not in child_env
            # The model read the key before it left: a call through the gateway still reaches upstream with it.
            lease = svc.gateway.lease("target", 1)
            client = anthropic.Anthropic(base_url=lease.base_url, api_key=lease.token, max_retries=0)
            client.messages.create(
                model=ws.cfg.model.target,
                max_tokens=16,
                messages=[{"role": "user", "content": "Say the word: apple"}],
            )
        headers = upstream.requests[-1]["headers"]
        sent = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
        assert REAL_KEY in sent  # the SDK sends it as x-api-key or as a bearer token, by version
