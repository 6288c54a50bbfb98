"""Harness cost per instance: apm-run on the `small` synthetic release with a zero-latency backbone.

The backbone (``random``, seeded by the instance key) answers instantly, so everything measured is the harness: memory
preparation, causal frame selection from the (pre-built) frame cache, prompt assembly, parsing,
record writing. Prints a Markdown table for docs/performance.md.

    .venv/bin/python bench/bench_runner.py [--scale small] [--max-frames 1024] [--trajectories N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from host import cpu_model
from hydra import compose, initialize_config_dir

from apm.configs import CONF_DIR
from apm.data.release import load_release
from apm.runner.app import run_async, run_dir_of
from apm.synth import generate
from apm.video.cache import build_release_cache


def bench(memory: str, root: Path, out: Path, cache: Path, max_frames: int) -> dict:
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[
            f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}", f"memory={memory}",
            "backbone=random", f"backbone.max_frames={max_frames}", "logging.wandb.mode=disabled",
            "logging.progress=false", "concurrency=8",
        ])
    began = time.perf_counter()
    stats = asyncio.run(run_async(cfg))
    wall = time.perf_counter() - began
    recs = [
        json.loads(line)
        for p in (run_dir_of(cfg) / "records").glob("*.jsonl")
        for line in p.read_text().splitlines()
    ]
    prep = [r["latency"]["prep_s"] for r in recs]
    frames = [len(r["frames"]) for r in recs]
    return {"memory": memory, "instances": stats.total, "wall_s": wall, "per_instance_ms": 1000 * wall / stats.total,
            "prep_ms_median": 1000 * statistics.median(prep), "prep_ms_p95": 1000 * sorted(prep)[int(0.95 * len(prep))],
            "frames_mean": statistics.mean(frames)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scale", default="small")
    p.add_argument("--max-frames", type=int, default=1024)
    p.add_argument("--trajectories", type=int, default=None, help="only the first N trajectories (paper scale: 1)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = generate(tmp / "release", seed=0, scale=args.scale, limit_trajectories=args.trajectories)
        build_release_cache(load_release(root), tmp / "cache", progress=False)
        rows = [
            bench(m, root, tmp / "runs", tmp / "cache", args.max_frames) for m in ("none", "raw_video", "text_summary")
        ]
    print(f"machine: {cpu_model()}, {platform.python_version()}")
    print("| memory | instances | wall (s) | per instance (ms) | prep median (ms) | prep p95 (ms) | frames/instance |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['memory']} | {r['instances']} | {r['wall_s']:.2f} | {r['per_instance_ms']:.1f} | "
            f"{r['prep_ms_median']:.1f} | {r['prep_ms_p95']:.1f} | {r['frames_mean']:.0f} |"
        )


if __name__ == "__main__":
    main()
