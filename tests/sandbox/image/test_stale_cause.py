"""The stale-image warning names what actually differs (real Docker images with altered labels)."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest

from harnessopt.config import RolloutConfig
from harnessopt.sandbox import auto_sandbox
from harnessopt.sandbox.image.build import RUNNER_LABEL, SDKS_LABEL, installed_sdks, runner_digest

BASE = "harnessopt-sandbox:latest"


@pytest.fixture
def relabel(docker_client: Any) -> Iterator[Any]:
    """Tag a copy of the sandbox image carrying the given labels; removed after the test."""
    made: list[str] = []

    def build(**labels: str) -> str:
        tag = f"harnessopt-test-stale:{os.getpid()}-{len(made)}"
        dockerfile = f"FROM {BASE}\n".encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
        buf.seek(0)
        docker_client.images.build(fileobj=buf, custom_context=True, tag=tag, labels=labels, rm=True)
        made.append(tag)
        return tag

    yield build
    for tag in made:
        docker_client.images.remove(tag, force=True)


def _warning(tag: str) -> str:
    said: list[str] = []
    auto_sandbox(RolloutConfig(image=tag), announce=said.append)
    return "\n".join(said)


def test_same_runner_other_sdk_set_does_not_blame_the_runner(relabel: Any) -> None:
    sdks = ",".join([*installed_sdks(), "fancysdk==1.0"])
    tag = relabel(**{RUNNER_LABEL: runner_digest(), SDKS_LABEL: sdks})
    said = _warning(tag)
    assert "runner" not in said and "carries the fancysdk SDK that this host lacks" in said
    assert "no rebuild needed" in said


def test_an_image_lacking_a_host_sdk_says_which(relabel: Any) -> None:
    sdks = installed_sdks()
    if len(sdks) < 2:
        pytest.skip("needs the openai SDK on this host (pip install -e '.[dev]')")
    tag = relabel(**{RUNNER_LABEL: runner_digest(), SDKS_LABEL: sdks[0]})
    said = _warning(tag)
    assert f"lacks the {sdks[1].partition('==')[0]} SDK" in said and "runner" not in said


def test_another_runner_is_named(relabel: Any) -> None:
    tag = relabel(**{RUNNER_LABEL: "0" * 16, SDKS_LABEL: ",".join(installed_sdks())})
    assert "built from another runner.py: run `harnessopt sandbox build`" in _warning(tag)
