#!/usr/bin/env bash
# Builds the side environment of the process-boundary test (idempotent): Python 3.9 with transformers
# pinned to 4.x from the package registry, as an official memory system's own environment would be
# (docs/boundary.md). Prints its python's path: APM_TF4_PYTHON="$(bash .ci/tf4-env.sh)".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-tf4"
PY="$VENV/bin/python"
TRANSFORMERS_PIN="transformers==4.57.6"

installed() {
  [ -x "$PY" ] && "$PY" -c 'import sys, transformers; assert sys.version_info[:2] == (3, 9); assert transformers.__version__ == "4.57.6"' 2>/dev/null
}

if installed; then
  echo "transformers 4.x venv already installed at $VENV" >&2
else
  {
    base=""
    for candidate in ${APM_PYTHON39:-} python3.9 /root/.pyenv/versions/3.9*/bin/python3.9; do
      if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null; then base="$candidate"; break; fi
    done
    [ -n "$base" ] || { echo "no Python 3.9 found (set APM_PYTHON39)" >&2; exit 2; }
    [ -x "$PY" ] || "$base" -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet "$TRANSFORMERS_PIN"
  } >&2
fi
echo "$PY"
