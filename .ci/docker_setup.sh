#!/usr/bin/env bash
# Make Docker usable for the sandbox tests on a fresh machine (root, CI=true, no stdin):
# install docker.io + debootstrap if missing, start dockerd if it does not answer, build the
# offline Debian base image and the sandbox image if absent. Idempotent; safe to run twice.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

need=()
command -v docker >/dev/null 2>&1 || need+=(docker.io)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  echo "docker_setup: installing ${need[*]}"
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "docker_setup: starting dockerd"
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid  # stale pid file of a dead daemon blocks a new one
  fi
  nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || { echo "docker_setup: dockerd did not come up" >&2; tail -n 20 /var/log/dockerd.log >&2; exit 1; }
fi

bash sandbox/make_base_image.sh harnessopt-base:bookworm
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" - <<'PY'
from harnessopt.sandbox.image.build import DEFAULT_TAG, build_image, docker_client, image_status

status = image_status(docker_client(), DEFAULT_TAG)
if status == "ok":
    print(f"docker_setup: {DEFAULT_TAG} is up to date")
else:
    build_image("harnessopt-base:bookworm", DEFAULT_TAG)
PY
