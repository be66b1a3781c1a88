#!/usr/bin/env bash
# Build faultday's image from a wheelhouse made on the host with pip.
#
#   docker-build/build-images.sh                 FROM the public python:3.11-slim-bookworm
#   FAULTDAY_OFFLINE=1 docker-build/build-images.sh
#                                          FROM a Debian base made here (base-image.sh)
#
# Environment: FAULTDAY_IMAGE (the tag, default faultday/faultday:latest: the tag
# the docker driver and the compose rendering use unless told otherwise),
# FAULTDAY_BASE_IMAGE (a base of your own), PYTHON (whose pip builds the wheels).
# The build context is docker-build/.build (gitignored); the dependency wheels are
# rebuilt only when pyproject's requirements change, so a second build is quick.
set -euo pipefail
cd "$(dirname "$0")/.."
image="${FAULTDAY_IMAGE:-faultday/faultday:latest}"
py="${PYTHON:-.venv/bin/python}"
ctx=docker-build/.build
base="${FAULTDAY_BASE_IMAGE:-}"
if [[ -z "$base" && "${FAULTDAY_OFFLINE:-0}" == 1 ]]; then
  base=faultday/base:bookworm
  docker-build/base-image.sh "$base"
fi

# The stamp: the runtime requirements (dependencies + the stack extra), not the whole
# pyproject, which changes with every new entry point.
stamp="$("$py" - <<'PY'
import hashlib, json, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
want = [p["dependencies"], p["optional-dependencies"]["stack"]]
print(hashlib.sha256(json.dumps(want).encode()).hexdigest()[:16])
PY
)"
mkdir -p "$ctx"
if [[ ! -f "$ctx/deps/.stamp-$stamp" ]]; then
  echo "== wheelhouse: dependencies (pip wheel)"
  rm -rf "$ctx/deps" && mkdir -p "$ctx/deps"
  # Markers are judged by the host's Python (3.11.7 here); Debian's is 3.11.2, and redis
  # needs async-timeout below 3.11.3, so the wheelhouse carries it for either.
  "$py" -m pip wheel -q --wheel-dir "$ctx/deps" ".[stack]" "async-timeout>=4.0.3"
  rm -f "$ctx"/deps/faultday-*.whl
  touch "$ctx/deps/.stamp-$stamp"
fi
echo "== wheelhouse: faultday"
rm -rf "$ctx/app" && mkdir -p "$ctx/app"
"$py" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$ctx/app" . 2>/dev/null \
  || "$py" -m pip wheel -q --no-deps --wheel-dir "$ctx/app" .
cp docker-build/Dockerfile "$ctx/Dockerfile"
printf '.stamp-*\n' > "$ctx/.dockerignore"

# The classic builder with either docker CLI (20.10 or a newer one beside it): nothing
# to pull, and its layer cache makes the second build quick.
export DOCKER_BUILDKIT=0
echo "== docker build $image${base:+ (FROM $base)}"
docker build -q --force-rm ${base:+--build-arg "BASE=$base"} --label "dev.faultday.stamp=$stamp" -t "$image" "$ctx"
