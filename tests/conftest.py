"""Fixtures shared by every test folder: a live Docker engine with the sandbox image (required in CI)."""

from __future__ import annotations

import os
from typing import Any

import pytest

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
