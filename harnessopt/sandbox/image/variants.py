"""Variants of the sandbox image: ``harnessopt sandbox build --with claude-code`` or ``--with codex``.

The ``codex`` variant (``harnessopt-sandbox:codex``) is the plain task image plus the Codex
CLI's native binary (a static musl executable, no Node needed) and its ``rg``: ``npm install -g
--prefix`` on this host into the build context, then ``sandbox/Dockerfile.codex`` copies the
two files in (no network in the build).

The ``claude-code`` variant (default tag ``harnessopt-sandbox:claude-code``) is the task image
(``sandbox/Dockerfile``, the runner and the model SDKs) built FROM a base with Node.js, plus the
Claude Code CLI. Three builds:

1. ``sandbox/Dockerfile.node``: the base image plus Debian's ``nodejs``, tagged
   ``harnessopt-base:node-<base id>`` and reused while the base image stays the same (this is
   the one step with network, for the Debian mirror; ~1-4 min here, once);
2. ``sandbox/Dockerfile`` FROM that, as for the plain image (no network);
3. ``sandbox/Dockerfile.claude-code``: copies the CLI in (no network). The CLI is installed on
   this host with ``npm install -g --prefix <build context>`` (npm's own registry client, the
   host's certificates), so no registry is reached from inside a build.

The result carries the plain image's labels (runner digest, SDKs: ``image_status`` notices a
stale one the same way) plus ``org.harnessopt.with`` and the CLI's version.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harnessopt.errors import UserError
from harnessopt.sandbox.image.build import (
    DEFAULT_TAG,
    FALLBACK_BASE,
    OFFLINE_BASE,
    _image_exists,
    build_task_image,
    docker_client,
    sandbox_source_dir,
    variant_tag,
)

VARIANTS = ("claude-code", "codex")
WITH_LABEL = "org.harnessopt.with"
CLAUDE_CODE_LABEL = "org.harnessopt.claude-code"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_LABEL = "org.harnessopt.codex"
CODEX_PACKAGE = "@openai/codex"
NODE_BASE_REPO = "harnessopt-base"
NPM_TIMEOUT_S = 900.0
_REAL_BINARY = 1 << 20  # the package's bin/claude.exe is a small stub until its postinstall ran


def build_command(tag: str) -> str:
    """The command that builds image ``tag``: ``--with claude-code`` for that variant's tag."""
    for variant in VARIANTS:
        if tag == variant_tag([variant]):
            return f"harnessopt sandbox build --with {variant}"
    return "harnessopt sandbox build" if tag == DEFAULT_TAG else f"harnessopt sandbox build --tag {tag}"


def build_image_with(
    base: str | None, tag: str, with_: Sequence[str], announce: Callable[[str], None] = print
) -> str:
    """``harnessopt sandbox build --with ...``: the variant image; returns the image id."""
    return build_variant(docker_client(timeout=900, local_instead=False), base, tag, with_, announce)


def build_variant(
    client: Any, base: str | None, tag: str, with_: Sequence[str], announce: Callable[[str], None]
) -> str:
    """Build the variant ``with_`` (``claude-code`` or ``codex``, one at a time) and tag it; returns the image id."""
    unknown = sorted(set(with_) - set(VARIANTS))
    if unknown:
        raise UserError(f"unknown image variant {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if len(set(with_)) > 1:
        raise UserError("build one variant at a time: --with claude-code or --with codex")
    if "codex" in with_:
        return _add_codex(client, build_task_image(client, base, None, announce), tag, announce)
    node_base = ensure_node_base(client, base, announce)
    task_image = build_task_image(client, node_base, None, announce)
    return _add_claude_code(client, task_image, tag, announce)


def image_has(client: Any, tag: str, variant: str) -> bool:
    """Whether image ``tag`` was built ``--with variant`` (False when it is missing)."""
    try:
        labels = client.images.get(tag).labels or {}
    except Exception:
        return False
    return variant in str(labels.get(WITH_LABEL, "")).split(",")


def ensure_node_base(client: Any, base: str | None, announce: Callable[[str], None]) -> str:
    """``base`` plus Debian's nodejs, built once per base image id; returns its tag."""
    if base is None:
        base = OFFLINE_BASE if _image_exists(client, OFFLINE_BASE) else FALLBACK_BASE
    if not _image_exists(client, base):
        raise UserError(
            f"base image {base} is not present: run `sandbox/make_base_image.sh {OFFLINE_BASE}` first"
        )
    base_id = str(client.images.get(base).id).partition(":")[2][:12]
    tag = f"{NODE_BASE_REPO}:node-{base_id}"
    if _image_exists(client, tag):
        return tag
    announce(f"building {tag}: {base} plus Debian's nodejs (network for the Debian mirror; once per base)")
    with tempfile.TemporaryDirectory(prefix="ho-build-node-") as tmp:
        shutil.copy2(sandbox_source_dir() / "Dockerfile.node", Path(tmp) / "Dockerfile")
        _build(client, tmp, tag, {"BASE": base}, {}, network=True)
    return tag


def _add_claude_code(client: Any, task_image: str, tag: str, announce: Callable[[str], None]) -> str:
    install = npm_install_claude_code
    return _add_cli(
        client, task_image, tag, announce, "claude-code", install, CLAUDE_CODE_LABEL, "Claude Code"
    )


def _add_codex(client: Any, task_image: str, tag: str, announce: Callable[[str], None]) -> str:
    return _add_cli(client, task_image, tag, announce, "codex", npm_install_codex, CODEX_LABEL, "Codex")


def _add_cli(
    client: Any,
    task_image: str,
    tag: str,
    announce: Callable[[str], None],
    variant: str,
    install: Callable[[Path, Callable[[str], None]], str],
    label: str,
    product: str,
) -> str:
    """``sandbox/Dockerfile.<variant>`` FROM the task image, the CLI ``install`` put in its context."""
    with tempfile.TemporaryDirectory(prefix=f"ho-build-{variant}-") as tmp:
        ctx = Path(tmp)
        shutil.copy2(sandbox_source_dir() / f"Dockerfile.{variant}", ctx / "Dockerfile")
        version = install(ctx / variant, announce)
        announce(f"building {tag}: the task image plus {product} {version}")
        labels = {WITH_LABEL: variant, label: version}
        image_id = _build(client, tmp, tag, {"BASE": task_image}, labels, network=False)
    announce(f"built {tag} ({image_id[7:19]})")
    return image_id


def npm_install_codex(dest: Path, announce: Callable[[str], None]) -> str:
    """``npm install -g --prefix`` the Codex CLI on this host; its ``codex`` and ``rg`` end up in ``dest``.

    Returns the CLI's version. Only the native binary of this platform and its ``rg`` are kept.
    """
    prefix = dest.parent / "npm-prefix"
    package = _npm_install(CODEX_PACKAGE, prefix, announce)
    found = sorted(package.glob("node_modules/@openai/codex-*/vendor/*/bin/codex"))
    if not found:
        raise UserError(
            f"npm installed {CODEX_PACKAGE} without a native binary for this platform; see {package}"
        )
    dest.mkdir(parents=True)
    shutil.move(str(found[0]), str(dest / "codex"))
    rg = found[0].parent.parent / "codex-path" / "rg"
    if rg.is_file():
        shutil.move(str(rg), str(dest / "rg"))
    version = str(json.loads((package / "package.json").read_text())["version"])
    shutil.rmtree(prefix, ignore_errors=True)
    _readable_by_all(dest)
    return version


def npm_install_claude_code(dest: Path, announce: Callable[[str], None]) -> str:
    """``npm install -g --prefix`` the CLI on this host; its package directory ends up at ``dest``.

    Returns the CLI's version. The platform packages (copies of the native binary the package's
    postinstall put in ``bin/claude.exe``) are dropped: the image needs one copy.
    """
    prefix = dest.parent / "npm-prefix"
    package = _npm_install(CLAUDE_CODE_PACKAGE, prefix, announce)
    exe = package / "bin" / "claude.exe"
    if exe.is_file() and exe.stat().st_size < _REAL_BINARY and (package / "install.cjs").is_file():
        node = shutil.which("node") or "node"
        _run([node, "install.cjs"], package)  # npm skipped the postinstall that puts the binary there
    if not exe.is_file() or exe.stat().st_size < _REAL_BINARY:
        raise UserError(f"npm installed {CLAUDE_CODE_PACKAGE} without its native binary; see {package}")
    for platform_pkg in (package / "node_modules" / "@anthropic-ai").glob("claude-code-*"):
        shutil.rmtree(platform_pkg)
    shutil.move(str(package), str(dest))
    shutil.rmtree(prefix, ignore_errors=True)
    _readable_by_all(dest)
    return str(json.loads((dest / "package.json").read_text())["version"])


def _npm_install(name: str, prefix: Path, announce: Callable[[str], None]) -> Path:
    """``npm install -g --prefix PREFIX name`` with this host's npm; returns the package directory."""
    npm = shutil.which("npm")
    if npm is None:
        raise UserError(
            "npm is not installed on this host; install Node.js and npm (Debian: apt-get install nodejs npm)"
        )
    announce(f"npm install -g {name} (into the build context)")
    argv = [npm, "install", "-g", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error"]
    _run(argv + [name], None)
    return prefix / "lib" / "node_modules" / name


def _readable_by_all(root: Path) -> None:
    """Directories 0755, files 0644 (0755 when executable): the containers run as other uids."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o111
        path.chmod(0o755 if executable else 0o644)


def _run(argv: list[str], cwd: Path | None) -> None:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"`{' '.join(argv[:3])}` took over {NPM_TIMEOUT_S:.0f}s; check npm's network"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-600:]
        raise UserError(f"`{' '.join(argv[:3])} ...` failed ({done.returncode}): {tail}")


def _build(
    client: Any, ctx: str, tag: str, args: dict[str, str], labels: dict[str, str], *, network: bool
) -> str:
    import docker

    try:
        image, _logs = client.images.build(
            path=ctx,
            tag=tag,
            buildargs=args,
            labels=labels,
            rm=True,
            forcerm=True,
            network_mode=None if network else "none",
        )
    except docker.errors.BuildError as e:
        tail = "".join(str(x.get("stream", x.get("error", ""))) for x in e.build_log)[-800:]
        raise UserError(f"building {tag} failed: {e.msg}; build log tail: {tail.strip()}") from e
    return str(image.id)
