"""The GPU benchmarks' CPU dry runs, so each script works the day a GPU runs it: bench/gpu/bench_gpu.py's
every step (model folder without weights, vLLM's dummy loader, cache resets, three methods through
``apm-run``, JSON and Markdown) on the vLLM CPU build, and bench/gpu/bench_gpu_hf.py's (the same model
folder, random weights on the transformers path, four methods with the KV-cache reference) on the
tiny Qwen3-VL config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GPU_BENCHES = Path(__file__).resolve().parent.parent / "bench" / "gpu"
BENCH = GPU_BENCHES / "bench_gpu.py"
BENCH_HF = GPU_BENCHES / "bench_gpu_hf.py"

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


def test_the_transformers_dry_run_measures_every_method(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(BENCH_HF), "--dry", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "bench_gpu_hf.json").read_text())
    methods, probes = results["methods"], results["profile"]["probes"]
    assert list(methods) == ["SimpleStream", "raw video · uniform", "raw video · session_stable", "KV-cache reference"]
    for name, method in methods.items():
        assert method["errors"] == 0 and len(method["probes"]) == probes, name
        for probe in method["probes"]:
            assert probe["prompt_tokens"] > 0, (name, probe)
            assert 0 < probe["engine_ttft_s"] <= probe["engine_s"] and probe["ttft_s"] > 0, (name, probe)
        assert method["probes_per_gpu_hour"] > 0, name
    assert methods["SimpleStream"]["frames_mean"] <= 4 < methods["raw video · uniform"]["frames_mean"] <= 16
    assert methods["raw video · uniform"]["prompt_tokens_mean"] > methods["SimpleStream"]["prompt_tokens_mean"]
    assert any(p["observe_s"] > 0 for p in methods["KV-cache reference"]["probes"])  # its stream updates count
    table = (tmp_path / "bench_gpu_hf.md").read_text()
    assert all(f"| {name} | {probes} |" in table for name in methods) and "probes per GPU-hour" in table


def test_the_pack_refuses_a_bundle_that_cannot_travel(tmp_path: Path) -> None:
    sys.path.insert(0, str(GPU_BENCHES))
    import pack

    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a.whl").write_bytes(b"x" * 1000)
    assert pack.check_fits(tmp_path, tree=500, limit=1500) == 1500
    with pytest.raises(SystemExit, match=r"cannot travel"):
        pack.check_fits(tmp_path, tree=501, limit=1500)
    assert pack.LIMIT == 64 * 2**20 and all("==" in w for w in (*pack.WHEELS, *pack.SOURCE_ONLY))
