"""DockerShell: the optimizer's ``bash`` tool inside one container per round.

The view directory is the only host path it mounts (read-write at ``/view``, the working
directory); no network, read-only root, the rollout limits, no capabilities. Each command is one
``exec`` of the in-image runner's ``shell`` mode, which runs ``bash -c`` in its own session, caps
the output and kills the whole group on timeout; the host also bounds the wait and, should the
runner not answer, kills the container (a new one is made for the next command).
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.protocols import ShellResult
from harnessopt.sandbox.image import docker_client
from harnessopt.sandbox.pool import LABEL, container_kwargs, register_live, remove_container

OUTPUT_CAP = 30_000
HOST_GRACE_S = 15.0  # beyond the command's own timeout, before the host gives up on the exec


class DockerShell:
    """A ``Shell`` whose commands run in a container that mounts the view at ``/view``."""

    view_root = "/view"

    def __init__(self, view: Path, cfg: RolloutConfig, *, client: Any = None, output_cap: int = OUTPUT_CAP):
        self.view = Path(view).resolve()
        self.cfg = cfg
        self.client = client or docker_client()
        self.output_cap = output_cap
        self.run_id = secrets.token_hex(6)
        self._container: Any = None
        self._lock = threading.Lock()

    def run(self, command: str, timeout_s: float) -> ShellResult:
        """Run ``bash -c command`` in /view: output (capped), exit code, timeout flag."""
        with self._lock:
            container = self._ensure()
            argv = [
                "python3",
                "/opt/ho/runner.py",
                "shell",
                "--timeout",
                str(timeout_s),
                "--cap",
                str(self.output_cap),
                "--",
                command,
            ]
            result: dict[str, Any] = {}
            worker = threading.Thread(target=self._exec, args=(container, argv, result), daemon=True)
            worker.start()
            worker.join(timeout_s + HOST_GRACE_S)
            if worker.is_alive() or "error" in result:
                # The runner did not come back: drop the container, the next command gets a new one.
                self._drop()
                msg = result.get("error", f"command did not finish within {timeout_s:.0f}s")
                return ShellResult(output=str(msg), exit_code=None, timed_out="error" not in result)
        code = result["code"]
        text = result["output"].decode("utf-8", "replace")
        if code == 124:
            return ShellResult(
                output=text + f"\n[killed after {timeout_s:.0f}s]", exit_code=None, timed_out=True
            )
        return ShellResult(output=text, exit_code=code, timed_out=False)

    def close(self) -> None:
        """Remove the container."""
        with self._lock:
            self._drop()

    def _exec(self, container: Any, argv: list[str], result: dict[str, Any]) -> None:
        try:
            api = self.client.api
            exec_id = api.exec_create(container.id, argv, workdir="/view", user=self._user())["Id"]
            kept = bytearray()
            for chunk in api.exec_start(exec_id, stream=True):
                if len(kept) < 2 * self.output_cap + 4096:  # the runner caps; this bounds a broken one
                    kept += chunk
            result["output"] = bytes(kept)
            result["code"] = api.exec_inspect(exec_id).get("ExitCode")
        except Exception as e:
            result["error"] = f"sandbox error: {type(e).__name__}: {e}"

    def _ensure(self) -> Any:
        if self._container is not None:
            return self._container
        kwargs = container_kwargs(self.cfg, self.run_id)
        kwargs["user"] = self._user()
        kwargs["labels"] = {LABEL: "1", f"{LABEL}.run": self.run_id, f"{LABEL}.role": "optimizer-shell"}
        kwargs["tmpfs"] = {"/tmp": f"size={max(64, self.cfg.out_mb)}m,mode=1777"}
        kwargs["environment"] = {
            "HOME": "/view",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        kwargs["working_dir"] = "/view"
        container = self.client.containers.create(
            self.cfg.image,
            command=["python3", "/opt/ho/runner.py", "idle"],
            volumes={str(self.view): {"bind": "/view", "mode": "rw"}},
            **kwargs,
        )
        register_live(container)
        try:
            container.start()
        except Exception:
            remove_container(container)
            raise
        self._container = container
        return container

    def _drop(self) -> None:
        if self._container is not None:
            remove_container(self._container)
            self._container = None

    @staticmethod
    def _user() -> str:
        # Files the optimizer creates in the view belong to the host user, as with the local shell.
        return f"{os.getuid()}:{os.getgid()}"
