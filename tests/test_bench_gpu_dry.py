"""bench/gpu/bench_gpu.py's CPU dry run: the GPU benchmark's every step (model folder without weights,
vLLM's dummy loader, cache resets, three methods through ``apm-run``, JSON and Markdown) on the vLLM CPU
build with the tiny Qwen3-VL config, so the script works the day a GPU runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "gpu" / "bench_gpu.py"

pytestmark = pytest.mark.slow


def test_the_dry_run_measures_every_method(vllm_python: str, tmp_path: Path) -> None:  # noqa: F811
    done = subprocess.run([sys.executable, str(BENCH), "--dry", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=os.environ | {"APM_VLLM_PYTHON": vllm_python})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "bench_gpu.json").read_text())
    methods, probes = results["methods"], results["profile"]["probes"]  # the dry profile's dataset.limit
    assert list(methods) == ["raw video · uniform", "raw video · session_stable", "SimpleStream"]
    for name, method in methods.items():
        assert method["errors"] == 0 and len(method["probes"]) == probes, name
        for probe in method["probes"]:
            assert probe["prompt_tokens"] > 0 and isinstance(probe["cached_tokens"], int), (name, probe)
            assert 0 < probe["engine_ttft_s"] <= probe["engine_s"], (name, probe)
    assert methods["SimpleStream"]["frames_mean"] <= 4 < methods["raw video · uniform"]["frames_mean"] <= 16
    table = (tmp_path / "bench_gpu.md").read_text()
    assert all(f"| {name} | {probes} |" in table for name in methods) and "probes per GPU-hour" in table
