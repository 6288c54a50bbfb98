"""Streaming systems on one paper-shaped trajectory: harness cost per probe, and every streaming
reference system's state bytes per video hour (docs/performance.md, "Streaming systems").

1. Harness cost: a streaming system that does nothing with what it observes and answers through the
   ``random`` backbone (instant) against ``raw_video`` on the same backbone with 1,024 frames per
   request. The streaming replay reads each session's frames from the frame cache once and feeds
   them in order; raw-video memory reads and sends up to 1,024 frames for every probe.
2. Every reference system of ``conf/memory`` whose class declares streaming input
   (``declaration.streaming``; :func:`streaming_references`, no hand list) on the tiny random Qwen2-VL
   (transformers, CPU), a system that writes text with ``memory.max_tokens=16``: its state bytes per
   video hour (Eq. 2 on one trajectory), update time per observed second, wall time per probe and
   the part of it outside the system's updates and answers (the harness, start-up included), time
   to first token and RTF.

    .venv/bin/python bench/bench_streaming.py [--scale paper] [--trajectories 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from apm.backbones.base import ask
from apm.configs import CONF_DIR
from apm.data.frames import Frame
from apm.data.release import load_release
from apm.records.declaration import Declaration, declared
from apm.runner.app import run_async, run_dir_of
from apm.streaming import Answer, Probe, SessionContext, StreamingSystem
from apm.synth import generate
from apm.testing.tiny_models import build_tiny_qwen2vl
from apm.video.cache import build_release_cache


class NullStream(StreamingSystem):
    """Observes every frame and keeps nothing; answers through the backbone with no frames: all that
    is timed is the harness's replay (frames read once per session, fed in order, records written)."""

    name = "Null stream (bench)"
    declaration = Declaration("specialised", streaming=True, persistent=False)

    async def begin(self, context: SessionContext) -> None:
        self.context, self.observed = context, 0

    async def observe_frame(self, frame: Frame) -> None:
        self.observed += 1

    async def answer(self, probe: Probe) -> Answer:
        request = probe.request()
        return Answer(await ask(self.context.backbone, request, probe.instance), request)  # random needs the options

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {"observed": self.observed}


def streaming_references() -> list[str]:
    """The memory configs of ``conf/memory`` whose class declares streaming input, by config name."""
    found = []
    for path in sorted((Path(CONF_DIR) / "memory").glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        declaration = declared(get_class(target)) if target else None
        if declaration is not None and declaration.streaming:
            found.append(path.stem)
    return found


def system_overrides(name: str) -> list[str]:
    """A reference's bench settings: a system that writes text (its config has ``max_tokens``) writes 16 tokens."""
    writes = "max_tokens" in OmegaConf.load(Path(CONF_DIR) / "memory" / f"{name}.yaml")
    return ["memory.max_tokens=16"] if writes else []


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((x.split(":", 1)[1].strip() for x in out.splitlines() if x.startswith("Model name")),
                platform.processor())


def lines(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [json.loads(x) for p in sorted((run_dir / kind).glob("*.jsonl")) for x in p.read_text().splitlines()]


def run(root: Path, out: Path, cache: Path, overrides: list[str]) -> tuple[Path, float]:
    """One apm-run; its run dir and wall time (start-up included)."""
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=[f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}",
                                           "logging.wandb.mode=disabled", "logging.progress=false", *overrides])
    began = time.perf_counter()
    asyncio.run(run_async(cfg))
    return run_dir_of(cfg), time.perf_counter() - began


def harness_row(label: str, run_dir: Path, wall: float) -> dict[str, Any]:
    """Per probe: wall time, and the frames the harness read from the cache for it."""
    recs, memory = lines(run_dir, "records"), lines(run_dir, "memory")
    read = sum(m.get("observed", 0) for m in memory) or sum(len(r["frames"]) for r in recs)
    return {"what": label, "probes": len(recs), "frames_read": read, "per_probe_frames": read / len(recs),
            "wall_s": wall, "per_probe_ms": 1000 * wall / len(recs)}


def system_row(label: str, run_dir: Path, wall: float) -> dict[str, Any]:
    """State bytes per video hour (the trajectory's last state over its video hours), update and answer
    times, wall time per probe and its part outside the system's observe, export and answer calls
    (``prep_s`` + ``total_s``)."""
    recs, memory = lines(run_dir, "records"), lines(run_dir, "memory")
    last = max(memory, key=lambda m: m["session_index"])
    observed = sum(m["observe_s"] for m in memory)
    exported = sum(m["update_s"] for m in memory)
    answered = sum((r["latency"]["prep_s"] or 0.0) + (r["latency"]["total_s"] or 0.0) for r in recs)
    seconds = 3600 * last["prior_hours"]
    ttft = [r["latency"]["ttft_s"] for r in recs if r["latency"]["ttft_s"] is not None]
    rtf = [r["latency"]["rtf"] for r in recs if r["latency"]["rtf"] is not None]
    return {"what": label, "probes": len(recs), "bytes": last["bytes"], "per_hour": last["bytes"] / last["prior_hours"],
            "update_ms_per_s": 1000 * observed / seconds, "ttft_s": statistics.mean(ttft), "rtf": statistics.mean(rtf),
            "errors": sum(r["error"] is not None for r in recs), "wall_s": wall,
            "per_probe_ms": 1000 * wall / len(recs),
            "outside_ms": 1000 * (wall - observed - exported - answered) / len(recs)}


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scale", default="paper")
    p.add_argument("--trajectories", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        began = time.perf_counter()
        root = generate(tmp / "release", seed=0, scale=args.scale, limit_trajectories=args.trajectories)
        build_release_cache(load_release(root), tmp / "cache", progress=False)
        model = build_tiny_qwen2vl(tmp / "tiny")
        print(f"release and frame cache: {time.perf_counter() - began:.0f} s")
        stream = ["memory=none", "memory._target_=bench_streaming.NullStream", "~memory.recent_frames",
                  "memory.name='Null stream (bench)'", "backbone=random", "backbone.max_frames=1024"]
        harness = [harness_row("raw_video (frames re-sent per probe)",
                               *run(root, tmp / "runs", tmp / "cache", ["memory=raw_video", "backbone=random",
                                                                        "backbone.max_frames=1024"])),
                   harness_row("streaming replay (frames observed once per session)",
                               *run(root, tmp / "runs", tmp / "cache", stream))]
        tiny = ["backbone=tiny_qwen2vl_hf", f"backbone.model={model}", "generation.max_tokens=8"]
        systems = [system_row(name, *run(root, tmp / "runs", tmp / "cache",
                                         [f"memory={name}", *system_overrides(name), *tiny]))
                   for name in streaming_references()]
    print(f"machine: {cpu_model()}, Python {platform.python_version()}")
    print("| what | probes | frames read from the cache | per probe | wall (s) | per probe (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in harness:
        print(f"| {r['what']} | {r['probes']} | {r['frames_read']} | {r['per_probe_frames']:.0f} | {r['wall_s']:.2f} | "
              f"{r['per_probe_ms']:.1f} |")
    print()
    print("| system | probes | state after the last session | per video hour | update time per video second (ms) "
          "| mean TTFT (s) | mean RTF | errors | wall (s) | per probe (ms) | outside the system per probe (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in systems:
        print(f"| {r['what']} | {r['probes']} | {mib(r['bytes'])} | {mib(r['per_hour'])} | "
              f"{r['update_ms_per_s']:.1f} | {r['ttft_s']:.3f} | {r['rtf']:.4f} | {r['errors']} | {r['wall_s']:.0f} | "
              f"{r['per_probe_ms']:.0f} | {r['outside_ms']:.0f} |")


if __name__ == "__main__":
    main()
