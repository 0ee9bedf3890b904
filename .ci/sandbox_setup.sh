#!/usr/bin/env bash
# The local sandbox's isolation modes on a fresh machine (root, no stdin): bubblewrap for the bwrap
# mode, util-linux's unshare for the unshare mode, so none of their tests skips here. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
if [ "${#need[@]}" -gt 0 ]; then
  echo "sandbox_setup: installing ${need[*]}"
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null
fi
python3 - <<'PY'
from harnessopt.sandbox.local import isolation

broken = [m for m in ("bwrap", "unshare") if not isolation.available(m)]
if broken:
    raise SystemExit(f"sandbox_setup: {', '.join(broken)} installed but cannot make namespaces here")
print("sandbox_setup: bwrap and unshare work")
PY
