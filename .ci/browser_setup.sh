#!/usr/bin/env bash
# A headless Chromium for the browser tests (the HTML report): Debian's chromium package.
# Idempotent and quick when it is already there.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  echo "browser_setup: chromium is installed"
  exit 0
fi
echo "browser_setup: installing chromium"
apt-get update -qq </dev/null
apt-get install -y -qq --no-install-recommends chromium </dev/null >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "browser_setup: chromium did not install" >&2; exit 1; }
