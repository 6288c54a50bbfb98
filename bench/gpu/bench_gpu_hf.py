"""The GPU figure on the transformers path, for a lent machine as it is (PyTorch, transformers; no vLLM, no
network): time to first token, prefill tokens and probes per GPU-hour of SimpleStream, raw video
(``uniform`` and ``session_stable``, 1,024 frames) and the KV-cache reference, one probe at a time.

Each method is ``apm-run`` in this process (``apm.runner.app.run_async``, the harness's own path) with
the HF backbone (``backbone=tiny_qwen3vl_hf``) on a model folder holding Qwen3-VL-8B's architecture
and no weights (``qwen3vl_8b.write_model``) and ``backbone.weights=random``: bf16 weights drawn on
the GPU. The release is a small paper-shaped slice (:data:`SLICE`) whose frame cache is built before
the run (``--data``: the folder ``bench/gpu/pack.py`` fills and ships; missing parts are made here).
``--dry`` runs the same steps on a CPU: the tiny Qwen3-VL config, fp32, the tiny synthetic release,
16 frames, 3 probes per method (``tests/test_bench_gpu_dry.py``). Writes ``OUT/bench_gpu_hf.json``
and ``OUT/bench_gpu_hf.md``; the command for a lent GPU is in docs/performance.md.

    .venv/bin/python bench/gpu/bench_gpu_hf.py --dry --out OUT                 # CPU, seconds
    python3 bench/gpu/bench_gpu_hf.py --data .gpu-bundle/data --out OUT       # one H200, ≤ 10 min
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from bench_prefix_cache import machine, run_config, run_records  # noqa: E402
from qwen3vl_8b import write_model  # noqa: E402

from apm.data.release import load_release  # noqa: E402
from apm.synth import SCALES, generate  # noqa: E402
from apm.synth.world import Scale  # noqa: E402
from apm.video.cache import build_release_cache  # noqa: E402

SLICE = Scale("paper-slice", 1, (4,), (300, 360), 640, 360, 2, 3)
"""One trajectory of 4 sessions of 300–360 s at 640×360 (the paper's frame size; the synthetic video at
2 fps, cached at 1 FPS, 448 px): its last probes see over 1,024 s, and its videos travel (15 MB)."""
METHODS = {
    "SimpleStream": ["memory=none"],
    "raw video · uniform": ["memory=raw_video", "frames.layout=uniform"],
    "raw video · session_stable": ["memory=raw_video", "frames.layout=session_stable"],
    "KV-cache reference": ["memory=kv_cache"],
}


@dataclass(frozen=True)
class Profile:
    """One way to run the benchmark: the release, the model's size, where and in what precision, the budget."""

    scale: str
    eight_b: bool
    device: str
    dtype: str
    max_frames: int
    probes: int
    """``dataset.limit`` of each method (task by task in turn)."""


GPU = Profile(SLICE.name, True, "cuda", "bfloat16", 1024, 24)
DRY = Profile("tiny", False, "cpu", "float32", 16, 3)


def prepare(data: Path, profile: Profile) -> Path:
    """The release under ``data/release`` and its frame cache under ``data/cache``, each made if missing."""
    SCALES[SLICE.name] = SLICE
    root = data / "release"
    if not (root / "trajectories.json").is_file():
        generate(root, seed=0, scale=profile.scale, limit_trajectories=1)
    build_release_cache(load_release(root), data / "cache", progress=False)
    return root


def run_method(profile: Profile, model: Path, overrides: list[str], root: Path, cache: Path,
               work: Path) -> tuple[list[dict[str, Any]], float]:
    """``apm-run`` of one method on the HF backbone with random weights; its records and wall seconds."""
    began = time.perf_counter()
    records = run_records(run_config(root, work, [
        *overrides, "backbone=tiny_qwen3vl_hf", f"backbone.model={model}", "+backbone.weights=random",
        f"backbone.device={profile.device}", f"backbone.dtype={profile.dtype}",
        f"backbone.max_frames={profile.max_frames}", f"dataset.limit={profile.probes}",
    ], cache=cache))
    return records, time.perf_counter() - began


def summarise(records: list[dict[str, Any]], wall_s: float, max_frames: int) -> dict[str, Any]:
    """A method's probes and figures. GPU seconds of a probe: the engine's time for its answer plus, for a
    streaming system, the stream updates it waited for (``latency.observe_s``); per probe and per GPU-hour
    over the probes after the method's first (its model's warm-up), all of them with a single probe."""
    probes = [{
        "key": r["key"], "frames": len(r["frames"]), "prompt_tokens": r["tokens"]["prompt"],
        "ttft_s": r["latency"]["ttft_s"], "engine_ttft_s": r["latency"]["engine_ttft_s"],
        "engine_s": r["latency"]["engine_total_s"], "observe_s": r["latency"].get("observe_s") or 0.0,
    } for r in records]
    warm = probes[1:] or probes
    full = [p for p in probes if p["frames"] == max_frames]
    gpu_s = sum(p["engine_s"] + p["observe_s"] for p in warm)
    return {
        "probes": probes,
        "errors": sum(r["error"] is not None for r in records),
        "frames_mean": statistics.mean(p["frames"] for p in probes),
        "prompt_tokens_mean": statistics.mean(p["prompt_tokens"] for p in probes),
        "ttft_s_median": statistics.median(p["ttft_s"] for p in probes),
        "engine_ttft_s_median": statistics.median(p["engine_ttft_s"] for p in probes),
        "first_probe_gpu_s": probes[0]["engine_s"] + probes[0]["observe_s"],
        "gpu_s_per_probe": gpu_s / len(warm),
        "probes_per_gpu_hour": 3600 * len(warm) / gpu_s,
        "run_wall_s": wall_s,
        "at_max_frames": {
            "probes": len(full),
            "prompt_tokens_mean": statistics.mean(p["prompt_tokens"] for p in full) if full else None,
            "engine_ttft_s_median": statistics.median(p["engine_ttft_s"] for p in full) if full else None,
        },
    }


def markdown(results: dict[str, dict[str, Any]], profile: Profile, where: str, wall_s: float) -> str:
    """The table for docs/performance.md, "GPU (transformers path)"."""
    rows = [f"Measured {time.strftime('%Y-%m-%d')} on {where}; profile {json.dumps(asdict(profile))}; "
            f"whole run {wall_s:.0f} s.", "",
            "| method | probes | frames / probe | prefill tokens / probe | TTFT median (s) | engine TTFT median (s) "
            "| GPU s, first probe | GPU s / later probe | probes per GPU-hour | apm-run wall (s) "
            f"| probes at {profile.max_frames} frames | their prefill tokens | their engine TTFT median (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        rows.append(f"| {name} | {len(r['probes'])} | {r['frames_mean']:.0f} | {r['prompt_tokens_mean']:.0f} | "
                    f"{r['ttft_s_median']:.3f} | {r['engine_ttft_s_median']:.3f} | {r['first_probe_gpu_s']:.3f} | "
                    f"{r['gpu_s_per_probe']:.3f} | "
                    f"{r['probes_per_gpu_hour']:.0f} | {r['run_wall_s']:.1f} | {_at_max(r['at_max_frames'])} |")
    return "\n".join(rows) + "\n"


def _at_max(full: dict[str, Any]) -> str:
    """The three cells of the probes that carry the full frame budget ("–" where none did)."""
    if not full["probes"]:
        return "0 | – | –"
    return f"{full['probes']} | {full['prompt_tokens_mean']:.0f} | {full['engine_ttft_s_median']:.3f}"


def bench(profile: Profile, data: Path | None, out: Path) -> dict[str, Any]:
    """Every step; writes ``out/bench_gpu_hf.json`` and ``out/bench_gpu_hf.md`` and returns the results."""
    began = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = data or work / "data"
        root = prepare(data, profile)
        model = write_model(work / "model", profile.eight_b)
        results = {}
        for name, overrides in METHODS.items():
            print(f"{name} …", flush=True)
            results[name] = summarise(*run_method(profile, model, overrides, root, data / "cache", work),
                                      profile.max_frames)
            write_results(out, results, profile, time.perf_counter() - began)  # a cut-off run keeps what it had
    return results


def write_results(out: Path, results: dict[str, dict[str, Any]], profile: Profile, wall_s: float) -> None:
    """``out/bench_gpu_hf.json`` (every probe) and ``out/bench_gpu_hf.md`` (the table) of the methods so far."""
    where = machine()
    (out / "bench_gpu_hf.json").write_text(json.dumps({"machine": where, "profile": asdict(profile),
                                                       "methods": results}, indent=1))
    (out / "bench_gpu_hf.md").write_text(markdown(results, profile, where, wall_s))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, help="a prepared release + frame cache (bench/gpu/pack.py); else made here")
    p.add_argument("--dry", action="store_true", help="the CPU dry run: tiny config, tiny release")
    p.add_argument("--prepare", action="store_true", help="only make --data's release and frame cache")
    args = p.parse_args()
    profile = DRY if args.dry else GPU
    if args.prepare:
        print(prepare(args.data, profile))
        return
    bench(profile, args.data, args.out)
    print((args.out / "bench_gpu_hf.md").read_text())


if __name__ == "__main__":
    main()
