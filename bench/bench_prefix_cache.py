"""Engine prefix-cache reuse of the two frame layouts, on a real vLLM (the CPU build) and the tiny Qwen2-VL.

One paper-shaped synthetic trajectory (4 sessions of 13–15 min, frames cached at 1 FPS, 448 px) runs
through ``apm-run`` with raw-video memory twice — ``frames.layout=uniform`` and ``session_stable`` —
each on a freshly started server with prefix caching, one probe at a time, in the runner's order.
From the records: per probe, prompt tokens, ``latency.cached_tokens`` and the engine's time
(``latency.engine_total_s``); per layout, the share of prompt tokens served from the cache for probes
after the first of their session, and how much of a probe's frame sequence opens with the previous
probe's. Scaled for 2 CPU cores (printed with the results): the frame budget (``--max-frames``, the
paper's 1,024 by default 192), the synthetic videos' own frame rate (2 fps: the cache samples 1 FPS
either way) and the answer (4 tokens). The tiny model gets Qwen2-VL's pixel budget of a 448 px frame
(``--mm-processor-kwargs max_pixels``), so a frame costs as many tokens as on the real model.

    APM_VLLM_PYTHON=.venv-vllm/bin/python .venv/bin/python bench/bench_prefix_cache.py [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import host
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from apm.configs import CONF_DIR
from apm.data.release import load_release
from apm.runner.app import run_async, run_dir_of
from apm.synth import SCALES, generate
from apm.synth.world import Scale
from apm.testing.tiny_models import build_tiny_qwen2vl
from apm.video.cache import build_release_cache

SHAPE = Scale("paper-shaped", 1, (4,), (780, 900), 640, 360, 2, 3)
"""The paper's trajectory shape: 4 sessions of 13–15 min at 640×360 (video at 2 fps; the cache takes 1 FPS)."""
FRAME_PIXELS = 448 * 252
"""A cached frame's pixels: Qwen2-VL's processor keeps it whole (16 × 9 merged patches per frame pair)."""
DOCS = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
BEGIN, END = "<!-- bench_prefix_cache:begin -->", "<!-- bench_prefix_cache:end -->"


def run_config(root: Path, work: Path, overrides: list[str], cache: Path | None = None) -> DictConfig:
    """``apm-run``'s config for one benchmark run: the release, its frame cache (``cache``, else under
    ``work``), runs under ``work``, one probe at a time, no preflight (its largest request would seed the
    engine's cache), nothing logged."""
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose("config", overrides=[
            f"dataset.root={root}", f"output_root={work / 'runs'}", f"frames.cache_dir={cache or work / 'cache'}",
            "concurrency=1", "preflight=false", "generation.max_tokens=4", "logging.wandb.mode=disabled",
            "logging.progress=false", *overrides,
        ])


def run_records(cfg: DictConfig) -> list[dict[str, Any]]:
    """Run ``cfg``; its records in run order."""
    asyncio.run(run_async(cfg))
    lines = (run_dir_of(cfg) / "records" / "shard-0-of-1.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def run_layout(layout: str, root: Path, work: Path, model: Path, max_frames: int) -> list[dict[str, Any]]:
    """One ``apm-run`` of the trajectory with ``layout`` on a fresh vLLM server; its records in run order."""
    cfg = run_config(root, work, [
        "memory=raw_video", "backbone=tiny_qwen2vl_vllm", f"backbone.model={model}", f"frames.layout={layout}",
        f"backbone.max_frames={max_frames}", "backbone.max_model_len=32768",
    ])
    with open_dict(cfg):
        cfg.backbone.python = os.environ.get("APM_VLLM_PYTHON", cfg.backbone.python)
        cfg.backbone.limit_mm_per_prompt = {"image": max_frames, "video": 1}
        cfg.backbone.max_num_batched_tokens = 32768  # the encoder cache holds one whole video
        cfg.backbone.extra_args = ["--enforce-eager", "--block-size", "32",  # 32: the CPU's finest (a GPU's: 16)
                                   "--mm-processor-kwargs", json.dumps({"max_pixels": FRAME_PIXELS})]
        cfg.backbone.env.VLLM_ALLOW_LONG_MAX_MODEL_LEN = "1"  # the tiny model's config says 4,096 positions
    return run_records(cfg)


def shared_share(a: list[dict] | None, b: list[dict]) -> float | None:
    """The share of ``b``'s frames that open it as they open ``a`` (same session and offset); None
    without an ``a``."""
    if a is None:
        return None
    n = 0
    for x, y in zip(a, b):
        if (x["session"], x["offset"]) != (y["session"], y["offset"]):
            break
        n += 1
    return n / len(b) if b else 0.0


def cached_share(probes: list[dict[str, Any]]) -> float:
    """The share of these probes' prompt tokens the engine served from its prefix cache."""
    return sum(p["cached_tokens"] or 0 for p in probes) / sum(p["prompt_tokens"] for p in probes)


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-probe rows and a method's figures: the cache's share of prompt tokens for probes after their
    session's first, how much of a probe's frame sequence opens like the previous one's, engine times."""
    probes, previous = [], {}
    for r in records:
        session = (r["trajectory_id"], r["day_id"], r["session_id"])
        before = previous.get(session)
        probes.append({
            "key": r["key"], "session": "/".join(session[1:]), "frames": len(r["frames"]),
            "prompt_tokens": r["tokens"]["prompt"], "cached_tokens": r["latency"]["cached_tokens"],
            "engine_ttft_s": r["latency"]["engine_ttft_s"], "engine_s": r["latency"]["engine_total_s"],
            "first_of_session": before is None,
            "frames_shared_with_previous": shared_share(before, r["frames"]),
        })
        previous[session] = r["frames"]
    later = [p for p in probes if not p["first_of_session"]] or probes
    ttft = sorted(p["engine_ttft_s"] for p in probes if p["engine_ttft_s"] is not None)
    return {
        "probes": probes,
        "errors": sum(r["error"] is not None for r in records),
        "frames_mean": statistics.mean(p["frames"] for p in probes),
        "cached_share_after_first": cached_share(later),
        "median_frames_shared": statistics.median(p["frames_shared_with_previous"] or 0.0 for p in later),
        "prompt_tokens_mean": statistics.mean(p["prompt_tokens"] for p in probes),
        "engine_ttft_s_median": statistics.median(ttft) if ttft else None,
        "engine_ttft_s_p90": ttft[int(0.9 * (len(ttft) - 1))] if ttft else None,
        "engine_s_mean": statistics.mean(p["engine_s"] for p in probes),
        "engine_s_mean_after_first": statistics.mean(p["engine_s"] for p in later),
    }


def machine() -> str:
    """This machine in a few words: CPU model and cores, GPUs (``nvidia-smi``) if any, Python."""
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.strip().splitlines()
    except FileNotFoundError:
        gpus = []
    return f"{host.machine()}" + (f", {len(gpus)} × {gpus[0]}" if gpus else ", no GPU")


def markdown(results: dict[str, dict], args: argparse.Namespace, machine: str, wall_s: float) -> str:
    """The docs/performance.md block: setup, one row per layout, the ratio."""
    u, s = results["uniform"], results["session_stable"]
    rows = [
        "| layout | probes | prompt tokens / probe | cached share, probes after their session's first | "
        "frames opening like the previous probe (median) | engine s / probe | engine s / probe after the first |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in results.items():
        rows.append(f"| `{name}` | {len(r['probes'])} | {r['prompt_tokens_mean']:.0f} | "
                    f"{r['cached_share_after_first']:.3f} | {r['median_frames_shared']:.1%} | "
                    f"{r['engine_s_mean']:.3f} | {r['engine_s_mean_after_first']:.3f} |")
    return "\n".join([
        BEGIN,
        f"Measured {time.strftime('%Y-%m-%d')} on {machine}; vLLM 0.32.0 CPU build serving the tiny Qwen2-VL "
        f"(random weights, fp32, prefix caching on, block size 32), one probe at a time; whole run {wall_s:.0f} s.",
        f"Trajectory: 1 × 4 sessions of 13–15 min (synthetic, seed {args.seed}), raw-video memory, "
        f"frame budget {args.max_frames} (scaled from 1,024), {args.max_frames * 3 // 4} of them for earlier "
        f"sessions under `session_stable`; a 448 px frame costs the tiny model Qwen2-VL's tokens for it.",
        "Reproduce: `APM_VLLM_PYTHON=.venv-vllm/bin/python .venv/bin/python bench/bench_prefix_cache.py`",
        "",
        *rows,
        "",
        f"Engine time per probe, `session_stable` ÷ `uniform`: **{s['engine_s_mean'] / u['engine_s_mean']:.2f}** "
        f"(all probes; {s['engine_s_mean_after_first'] / u['engine_s_mean_after_first']:.2f} for probes after their "
        f"session's first).",
        END,
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-frames", type=int, default=192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write every probe's figures here")
    p.add_argument("--write-docs", action="store_true", help="replace the block in docs/performance.md")
    args = p.parse_args()
    began = time.perf_counter()
    SCALES[SHAPE.name] = SHAPE
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = generate(work / "release", seed=args.seed, scale=SHAPE.name)
        build_release_cache(load_release(root), work / "cache", progress=False)
        model = build_tiny_qwen2vl(work / "tiny-qwen2vl")
        results = {layout: summarise(run_layout(layout, root, work, model, args.max_frames))
                   for layout in ("uniform", "session_stable")}
    text = markdown(results, args, machine(), time.perf_counter() - began)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.write_docs:
        doc = DOCS.read_text()
        DOCS.write_text(doc[: doc.index(BEGIN)] + text + doc[doc.index(END) + len(END):])


if __name__ == "__main__":
    main()
