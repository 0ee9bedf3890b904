"""The stale-image warning names what actually differs (real Docker images with altered labels)."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harnessopt.config import RolloutConfig
from harnessopt.sandbox import auto_sandbox
from harnessopt.sandbox.image.build import (
    OFFLINE_BASE,
    RUNNER_LABEL,
    SDKS_LABEL,
    installed_sdks,
    runner_digest,
)

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
    # the command that rebuilds this tag: plain `sandbox build` rebuilt :latest, not it (QA)
    assert f"built from another runner.py: run `harnessopt sandbox build --tag {tag}`" in _warning(tag)


def test_an_image_with_no_runner_is_refused_before_any_task(tmp_path: Path) -> None:
    """rollout.image set to an image no `sandbox build` made (the Debian base): the run warned
    "stale", then recorded a failed round of "can't open file '/opt/ho/runner.py'" (QA). The run
    and its dry run refuse it in one line; auto falls back to the local sandbox, saying why."""
    from tests.support.cli import cli
    from tests.support.cli_errors import assert_user_error
    from tests.support.workspace import make_ws

    ws = make_ws(tmp_path)
    for dry in (("--dry-run",), ()):
        r = cli(
            "run", ws, "--rounds", "1", "--sandbox", "docker", "-c", f"rollout.image={OFFLINE_BASE}", *dry
        )
        assert_user_error(r, f"image {OFFLINE_BASE} is not a harnessopt sandbox image (no runner in it")
    said: list[str] = []
    sandbox = auto_sandbox(RolloutConfig(image=OFFLINE_BASE), announce=said.append)
    try:
        assert sandbox.name == "local" and "not a harnessopt sandbox image" in "\n".join(said)
    finally:
        sandbox.close()
