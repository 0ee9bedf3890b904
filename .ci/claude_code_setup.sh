#!/usr/bin/env bash
# The Claude Code test tier (pytest -m claude_code): the real CLI, on this host and in the sandbox
# image variant harnessopt-sandbox:claude-code (`harnessopt sandbox build --with claude-code`,
# which installs the CLI with this host's npm into its build context and Node from Debian into
# a base image cached by tag). Idempotent and quick when everything is present: the variant is
# rebuilt only when missing or stale (another runner.py or SDK set). Root, CI=true, no stdin.
# Run after .ci/docker_setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

if ! command -v npm >/dev/null 2>&1; then
  echo "claude_code_setup: installing nodejs npm"
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends nodejs npm </dev/null >/dev/null
fi
if ! command -v claude >/dev/null 2>&1; then
  echo "claude_code_setup: npm install -g @anthropic-ai/claude-code"
  npm install -g --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code </dev/null
fi
echo "claude_code_setup: $(claude --version)"

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" - <<'PY'
from harnessopt.sandbox.image.build import docker_client, image_status, variant_tag
from harnessopt.sandbox.image.variants import build_image_with, image_has

tag = variant_tag(["claude-code"])
client = docker_client()
if image_status(client, tag) == "ok" and image_has(client, tag, "claude-code"):
    print(f"claude_code_setup: {tag} is up to date")
else:
    build_image_with(None, tag, ["claude-code"])
PY
