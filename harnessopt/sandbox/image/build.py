"""Build the task image (``harnessopt sandbox build``) and remove leftover containers.

The build context is assembled in a temporary directory: ``sandbox/Dockerfile`` and
``sandbox/runner.py`` from the repository, plus ``site/``, a copy of the host's *installed*
``anthropic`` distribution and its runtime dependencies (file lists from their ``RECORD``). We copy
installed trees rather than download wheels so that the build needs no package registry at all,
and the image runs exactly the SDK version the host was tested with (host and image are both
CPython 3.11 on glibc, so compiled extensions such as ``pydantic_core`` and ``jiter`` load).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError

DEFAULT_TAG = "harnessopt-sandbox:latest"
OFFLINE_BASE = "harnessopt-base:bookworm"
FALLBACK_BASE = "python:3.11-slim"
LABEL = "harnessopt"
RUNNER_LABEL = "org.harnessopt.runner"
SDKS_LABEL = "org.harnessopt.sdks"
SDKS = ("anthropic", "openai")  # the model SDKs copied into the image when installed on the host


def sandbox_source_dir() -> Path:
    """``sandbox/`` (Dockerfile, runner.py, make_base_image.sh): the checkout's, or the wheel's copy."""
    here = Path(__file__).resolve().parent  # harnessopt/sandbox/image
    checkout = here.parents[2] / "sandbox"
    return checkout if (checkout / "Dockerfile").is_file() else here / "context"


def runner_digest() -> str:
    """Short hash of runner.py, stored as an image label to notice a stale image."""
    return hashlib.sha256((sandbox_source_dir() / "runner.py").read_bytes()).hexdigest()[:16]


def docker_client(timeout: float = 120.0, *, local_instead: bool = True) -> Any:
    """A docker-py client that answered a ping, or UserError saying how to start the engine (and,
    with ``local_instead``, for a command that runs tasks: that the local sandbox needs none)."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except Exception as e:
        instead = " or use --sandbox local" if local_instead else ""
        raise UserError(
            "Docker is not reachable: start it (e.g. `dockerd &` or `systemctl start docker`)"
            f"{instead} ({type(e).__name__})"
        ) from e
    return client


def docker_image_id(client: Any, image: str) -> str:
    """The engine's id of ``image`` (``sha256:...``), asking ``client`` (a new client when None);
    ``unavailable`` when there is no engine or no such image: a key that matches no measured state."""
    try:
        if client is None:
            client = docker_client(timeout=10)
        return str(client.images.get(image).id)
    except Exception:
        return "unavailable"


def build_image(base: str | None, tag: str = DEFAULT_TAG, announce: Callable[[str], None] = print) -> str:
    """Build the sandbox image FROM ``base`` and tag it; returns the image id.

    ``base=None`` uses the offline Debian base (``sandbox/make_base_image.sh``) when it exists,
    else ``python:3.11-slim`` (which must already be present or pullable). A variant with more
    inside (``claude-code``) is ``variants.build_image_with``.
    """
    return build_task_image(docker_client(timeout=900, local_instead=False), base, tag, announce)


def build_task_image(client: Any, base: str | None, tag: str | None, announce: Callable[[str], None]) -> str:
    """``sandbox/Dockerfile`` FROM ``base`` (None: the offline base, else the fallback), tagged
    ``tag`` (None: untagged); returns the image id."""
    import docker

    src = sandbox_source_dir()
    if not (src / "Dockerfile").is_file():
        raise UserError(f"{src}/Dockerfile is missing: build the image from a harnessopt source checkout")
    asked = base
    if base is None:
        base = OFFLINE_BASE if _image_exists(client, OFFLINE_BASE) else FALLBACK_BASE
    if not _image_exists(client, base):
        raise UserError(
            f"base image {base} is not present and cannot be pulled here: "
            + (
                f"pass --base an image `docker images` lists, or make a Debian one with "
                f"`sandbox/make_base_image.sh {base}` (offline, debootstrap)"
                if asked
                else f"run `sandbox/make_base_image.sh {OFFLINE_BASE}` (offline, debootstrap) first"
            )
        )
    with tempfile.TemporaryDirectory(prefix="ho-build-") as tmp:
        ctx = Path(tmp)
        shutil.copy2(src / "Dockerfile", ctx / "Dockerfile")
        shutil.copy2(src / "runner.py", ctx / "runner.py")
        sdks = [sdk.partition("==")[0] for sdk in installed_sdks()]
        dists = list(dict.fromkeys(d for sdk in sdks for d in copy_installed(sdk, ctx / "site")))
        announce(f"building {tag or 'the task image'} from {base} with {', '.join(dists)}")
        try:
            image, _logs = client.images.build(
                path=str(ctx),
                tag=tag,
                buildargs={"BASE": base},
                labels={RUNNER_LABEL: runner_digest(), SDKS_LABEL: ",".join(installed_sdks())},
                rm=True,
                forcerm=True,
                network_mode="none",
            )
        except docker.errors.BuildError as e:
            tail = "".join(str(x.get("stream", x.get("error", ""))) for x in e.build_log)[-800:]
            raise UserError(f"building {tag} failed: {e.msg}; build log tail: {tail.strip()}") from e
    announce(f"built {tag or 'the task image'} ({image.short_id})")
    return str(image.id)


def variant_tag(with_: Sequence[str]) -> str:
    """The default tag of a variant: ``harnessopt-sandbox:claude-code`` for ``--with claude-code``."""
    return f"{DEFAULT_TAG.partition(':')[0]}:{'-'.join(sorted(set(with_)))}" if with_ else DEFAULT_TAG


def image_status(client: Any, tag: str) -> str:
    """'missing', 'foreign' (no harnessopt runner in it: not built by ``sandbox build``), 'stale'
    (built from another runner.py) or 'ok'."""
    import docker

    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return "missing"
    labels = image.labels or {}
    if RUNNER_LABEL not in labels:
        return "foreign"  # every task would fail: python3: can't open file '/opt/ho/runner.py'
    if labels.get(SDKS_LABEL, "anthropic") != ",".join(installed_sdks()):
        return "stale"  # the host's SDKs changed (e.g. openai installed): the image has others
    return "ok" if labels.get(RUNNER_LABEL) == runner_digest() else "stale"


def stale_cause(client: Any, tag: str, build: str) -> str:
    """Why ``image_status`` calls ``tag`` stale, and what (if anything) to do, in one line; "" when
    it is not. Only what differs is named: the runner, an SDK the image lacks, or SDK versions.
    ``build``: the command that rebuilds this tag (``variants.build_command``), not the default one."""
    labels = client.images.get(tag).labels or {}
    if labels.get(RUNNER_LABEL) != runner_digest():
        return f"sandbox image {tag} was built from another runner.py: run `{build}`"
    image = dict(x.partition("==")[::2] for x in labels.get(SDKS_LABEL, "anthropic").split(",") if x)
    host = dict(x.partition("==")[::2] for x in installed_sdks())
    if lacks := sorted(set(host) - set(image)):
        return (
            f"sandbox image {tag} lacks the {', '.join(lacks)} SDK installed on this host (harnesses "
            f"that import it fail inside): run `{build}`"
        )
    if extra := sorted(set(image) - set(host)):
        return (
            f"note: sandbox image {tag} carries the {', '.join(extra)} SDK that this host lacks; the image "
            f"is fine (no rebuild needed); install it here to run its templates' tests: "
            f"pip install 'harnessopt[{extra[0]}]'"
        )
    differ = [f"{n} {image[n] or '?'} (this host: {host[n]})" for n in sorted(host) if image[n] != host[n]]
    if differ:
        return (
            f"sandbox image {tag} has {', '.join(differ)}; it works, and `{build}` makes "
            "it run the version tested here"
        )
    return ""


def installed_sdks() -> list[str]:
    """``name==version`` of each of SDKS installed on this host (anthropic always is)."""
    found = []
    for name in SDKS:
        try:
            found.append(f"{name}=={md.version(name)}")
        except md.PackageNotFoundError:
            continue
    return found


def owner_labels() -> dict[str, str]:
    """Which process on which host made a container: ``cleanup`` spares the ones of live runs."""
    return {f"{LABEL}.pid": str(os.getpid()), f"{LABEL}.host": socket.gethostname()}


def owner_alive(labels: dict[str, str]) -> bool:
    host, pid = labels.get(f"{LABEL}.host"), labels.get(f"{LABEL}.pid", "")
    if host != socket.gethostname() or not pid.isdigit():
        return host is not None and host != socket.gethostname()  # another machine's: cannot tell, spare it
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_containers(label: str = LABEL, *, client: Any = None, named_owners_only: bool = False) -> int:
    """Force-remove the containers carrying ``label`` whose run is no longer alive (leftovers of a
    killed run); containers of live runs on this host, or of other hosts, are spared. The count.
    ``named_owners_only``: only those that name their run's host and pid (what a run sweeps at its
    start; ``sandbox cleanup`` also removes ones that name no owner)."""
    client = client or docker_client(local_instead=False)
    removed = 0
    # ignore_removed: a container another run removes between the listing and its inspect is skipped,
    # not a NotFound that ends the whole clean-up
    for c in client.containers.list(all=True, filters={"label": label}, ignore_removed=True):
        labels = dict(c.labels or {})
        if owner_alive(labels) or (named_owners_only and f"{LABEL}.pid" not in labels):
            continue
        try:
            c.remove(force=True)
            removed += 1
        except Exception:  # already gone (removed by a concurrent run): nothing to do
            pass
    return removed


def copy_installed(root: str, dest: Path) -> list[str]:
    """Copy the installed files of distribution ``root`` and its runtime dependencies into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for dist in _closure(root):
        names.append(f"{dist.metadata['Name']}=={dist.version}")
        base = Path(str(dist.locate_file(""))).resolve()
        for rel in dist.files or []:
            parts = Path(str(rel)).parts
            if ".." in parts or "__pycache__" in parts or str(rel).endswith(".pyc"):
                continue  # console scripts outside site-packages; caches are rebuilt in the image
            src = base / rel
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / rel)
    return names


def _closure(root: str) -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    stack = [root]
    while stack:
        name = stack.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError as e:
            raise UserError(f"{name} is not installed on this host; `pip install {root}` first") from e
        seen[key] = dist
        stack.extend(_runtime_requirements(dist))
    return list(seen.values())


def _runtime_requirements(dist: md.Distribution) -> list[str]:
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no packaging: keep requirements without markers, skip the conditional ones
        return [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if ";" not in r]
    out = []
    for raw in dist.requires or []:
        req = Requirement(raw)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req.name)
    return out


def _image_exists(client: Any, name: str) -> bool:
    import docker

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False
