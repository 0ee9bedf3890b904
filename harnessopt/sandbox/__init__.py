"""Sandboxes that run ``harness/run.py`` on one task: ``docker`` (default) and ``local`` (fallback).

``make_sandbox(cfg.rollout, announce=print)`` picks one by ``cfg.sandbox``; see docs/sandbox.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harnessopt.config import RolloutConfig
from harnessopt.errors import UserError
from harnessopt.protocols import Sandbox


def make_sandbox(cfg: RolloutConfig, *, announce: Callable[[str], None]) -> Sandbox:
    """The sandbox named by ``cfg.sandbox`` (a registry name or a dotted path)."""
    from harnessopt import registry

    sandbox: Sandbox = registry.build("sandbox", cfg.sandbox, cfg, announce=announce)
    return sandbox


def local_sandbox(cfg: RolloutConfig, *, announce: Callable[[str], None]) -> Sandbox:
    """``local``: a subprocess per task (weaker isolation; asked for explicitly, so it warns anyway)."""
    from harnessopt.sandbox.local.sandbox import LocalSandbox

    sandbox = LocalSandbox(cfg, announce=announce)
    announce(f"sandbox: local, as asked; its isolation is weaker: {sandbox.exposure}")
    return sandbox


def docker_sandbox(cfg: RolloutConfig, *, announce: Callable[[str], None]) -> Sandbox:
    """``docker``: a UserError when the engine or the image is missing."""
    client, why_not = _docker_with_image(cfg.image)
    if client is None:
        raise UserError(why_not)
    return _docker(cfg, client, why_not, announce)


def auto_sandbox(cfg: RolloutConfig, *, announce: Callable[[str], None]) -> Sandbox:
    """``auto``: Docker when the engine answers and ``cfg.image`` exists, else ``local`` with a warning."""
    from harnessopt.sandbox.local.sandbox import LocalSandbox

    client, why_not = _docker_with_image(cfg.image)
    if client is not None:
        return _docker(cfg, client, why_not, announce)
    sandbox = LocalSandbox(cfg, announce=announce)
    announce(
        f"sandbox: using the local subprocess sandbox ({why_not}); its isolation is weaker: {sandbox.exposure}"
    )
    return sandbox


def auto_is_local(cfg: RolloutConfig) -> str | None:
    """Why ``auto`` would fall back to the local sandbox (the engine or the image is missing, or the
    image has no runner), or None when it would use Docker: what a dry run asks, since the optimizer
    then runs on this host; and why ``docker`` would refuse to start."""
    client, why_not = _docker_with_image(cfg.image)
    return why_not if client is None else None


def _docker(cfg: RolloutConfig, client: Any, stale: str, announce: Callable[[str], None]) -> Sandbox:
    from harnessopt.sandbox.docker.sandbox import DockerSandbox

    ncpu = int(client.info().get("NCPU") or 0)
    if ncpu and cfg.cpus > ncpu:  # else every task fails with the engine's "Range of CPUs" error
        raise UserError(
            f"rollout.cpus is {cfg.cpus:g} but the Docker engine has {ncpu} CPU(s); set rollout.cpus "
            f"to at most {ncpu} (-c rollout.cpus={ncpu})"
        )
    if stale:  # stale image: usable, but say so
        announce(stale)
    from harnessopt.sandbox.image.build import cleanup_containers

    # a run killed outright (SIGKILL) removed none of its containers: they stopped by themselves
    if removed := cleanup_containers(client=client, named_owners_only=True):
        announce(f"sandbox: removed {removed} container(s) left by runs that were killed")
    return DockerSandbox(cfg, client)


def _docker_with_image(image: str) -> tuple[Any | None, str]:
    """(client, "") when Docker answers and the image exists, else (None, the reason)."""
    from harnessopt.sandbox.image.build import docker_client, image_status

    try:
        client = docker_client(timeout=30)
    except UserError as e:
        return None, str(e)
    status = image_status(client, image)
    if status == "missing":
        from harnessopt.sandbox.image.variants import build_command

        return (
            None,
            f"sandbox image {image} is missing: run `{build_command(image)}` (or use --sandbox local)",
        )
    if status == "foreign":
        from harnessopt.sandbox.image.variants import build_command

        return (
            None,
            f"image {image} is not a harnessopt sandbox image (no runner in it: every task would "
            f"fail); set rollout.image to one `{build_command('harnessopt-sandbox:latest')} --base "
            f"{image}` builds on it, or use --sandbox local",
        )
    if status == "stale":
        from harnessopt.sandbox.image.build import stale_cause
        from harnessopt.sandbox.image.variants import build_command

        return client, stale_cause(client, image, build_command(image))
    return client, ""
