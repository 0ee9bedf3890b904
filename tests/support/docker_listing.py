"""A container removed between the engine's listing and docker-py's inspect of it, made certain."""

from __future__ import annotations

from typing import Any

import docker
import pytest

IMAGE = "harnessopt-sandbox:latest"


def list_a_removed_container(client: Any, monkeypatch: pytest.MonkeyPatch, labels: dict[str, str]) -> None:
    """From now on (until ``monkeypatch.undo()``), every listing of the engine's containers also
    returns the real entry of a container with ``labels`` that has since been removed: what a sweep
    sees when another run removes one of its containers while the sweep lists them."""
    gone = client.containers.create(IMAGE, ["sleep", "600"], labels=labels)
    (entry,) = client.api.containers(all=True, filters={"id": gone.id})
    gone.remove(force=True)
    listing = docker.APIClient.containers
    monkeypatch.setattr(
        docker.APIClient, "containers", lambda self, *a, **kw: [entry, *listing(self, *a, **kw)]
    )
