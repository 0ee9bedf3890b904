#!/usr/bin/env bash
# The Codex test tier (pytest -m codex): the real CLI, on this host and in the sandbox image
# variant harnessopt-sandbox:codex (`harnessopt sandbox build --with codex`, which installs the
# CLI with this host's npm into its build context and copies its static binary into the task
# image; no Node inside). Idempotent and quick when everything is present: the variant is rebuilt
# only when missing or stale (another runner.py or SDK set). Root, CI=true, no stdin.
# Run after .ci/docker_setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

if ! command -v npm >/dev/null 2>&1; then
  echo "codex_setup: installing nodejs npm"
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends nodejs npm </dev/null >/dev/null
fi
if ! command -v codex >/dev/null 2>&1; then
  echo "codex_setup: npm install -g @openai/codex"
  npm install -g --no-audit --no-fund --loglevel=error @openai/codex </dev/null
fi
echo "codex_setup: $(codex --version)"

PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" - <<'PY'
from harnessopt.sandbox.image.build import docker_client, image_status, variant_tag
from harnessopt.sandbox.image.variants import build_image_with, image_has

tag = variant_tag(["codex"])
client = docker_client()
if image_status(client, tag) == "ok" and image_has(client, tag, "codex"):
    print(f"codex_setup: {tag} is up to date")
else:
    build_image_with(None, tag, ["codex"])
PY
