"""Fixtures shared by every test folder: a live Docker engine with the sandbox image (required in CI),
and one temporary folder for the whole test run (``harnessopt.util.tmpdirs``, as the CLI claims
one a run): what a test leaves in ``tempfile``'s folders is removed with it, and a killed test run's
folder by the next."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import pytest

from harnessopt.util import tmpdirs

_session_tmp = contextlib.ExitStack()


def pytest_configure(config: pytest.Config) -> None:
    """Before collection, so that module-level ``tempfile.gettempdir()`` calls see it too; pytest's
    own ``tmp_path`` folders stay where they were (it keeps the last runs' for a look)."""
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    _session_tmp.enter_context(tmpdirs.claimed())


def pytest_unconfigure(config: pytest.Config) -> None:
    _session_tmp.close()


IMAGE = "harnessopt-sandbox:latest"


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must run the Docker tests: run .ci/docker_setup.sh)")
    pytest.skip(f"{why}; set CI=true to make this a failure")


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A live docker-py client with the sandbox image built; skip locally, FAIL in CI, if absent."""
    from harnessopt.errors import UserError
    from harnessopt.sandbox.image.build import build_image, docker_client, image_status

    try:
        client = docker_client(timeout=60)
    except UserError as e:
        _unavailable(f"Docker engine not reachable ({e})")
    if image_status(client, IMAGE) != "ok":
        try:
            build_image(None, IMAGE, announce=lambda _m: None)
        except UserError as e:
            _unavailable(f"sandbox image cannot be built ({e})")
    return client
