#!/usr/bin/env bash
# Puts the torchvision-on-CPU-torch hook (.ci/torchvision_cpu_fix.py) into a venv: a .pth loads it in
# every interpreter of that venv (vLLM's worker processes included). Only this project's CI/dev venvs
# get it; the package itself never imports it. Usage: bash .ci/torchvision-cpu-fix.sh PYTHON
set -euo pipefail
PY="$1"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cp "$(dirname "${BASH_SOURCE[0]}")/torchvision_cpu_fix.py" "$SITE/apm_torchvision_cpu_fix.py"
echo "import apm_torchvision_cpu_fix; apm_torchvision_cpu_fix.install()" > "$SITE/apm_torchvision_cpu_fix.pth"
