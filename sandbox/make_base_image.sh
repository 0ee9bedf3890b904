#!/usr/bin/env bash
# Make a minimal Debian base image offline (no image registry): debootstrap a bookworm minbase
# root with python3 from the distribution's own package mirror, then `docker import` it.
# Idempotent: does nothing when the image already exists.
# Usage: sandbox/make_base_image.sh [NAME]   (default harnessopt-base:bookworm; run as root)
set -euo pipefail

NAME="${1:-harnessopt-base:bookworm}"
SUITE="${SUITE:-bookworm}"

if docker image inspect "$NAME" >/dev/null 2>&1; then
  echo "base image $NAME exists; nothing to do"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 2; }

ROOT="$(mktemp -d /var/tmp/ho-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

echo "debootstrap $SUITE (minbase + python3) into $ROOT ..."
# No mirror argument: debootstrap uses its built-in default mirror for the suite.
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" >"$ROOT.log" 2>&1 \
  || { tail -n 30 "$ROOT.log" >&2; exit 1; }
rm -f "$ROOT.log"

# Shrink: package caches and lists are not needed at run time.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
  "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*

tar -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' - "$NAME"
echo "base image $NAME imported"
