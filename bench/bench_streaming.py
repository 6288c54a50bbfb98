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
   to first token and RTF; for ``kv_cache``, mean TTFT on the probes whose second closes a chunk
   against those between two (issue 22, item 3: chunk alignment must not move the mean); each
   reference's state after each session (what grows with the stream, what stays bounded).
3. The five references' runs judged gate-only and reduced (``--bootstrap 0``): Tables 3/4/8/10/11/13
   grouped by memory representation, Figures 2 and 8 and the state-size figure, under ``WORK/report``.

    .venv/bin/python bench/bench_streaming.py [--scale paper] [--trajectories 1] [--work DIR]

``--work DIR`` keeps the release, frame cache, tiny model, runs and report there (a release and cache
already there are reused); without it everything goes to a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml
from host import cpu_model
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from apm.backbones.base import ask
from apm.configs import CONF_DIR
from apm.data.clock import absolute
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
        target = yaml.safe_load(path.read_text()).get("_target_")
        declaration = declared(get_class(target)) if target else None
        if declaration is not None and declaration.streaming:
            found.append(path.stem)
    return found


def system_overrides(name: str) -> list[str]:
    """A reference's bench settings: a system that writes text (its config has ``max_tokens``) writes 16 tokens."""
    writes = "max_tokens" in OmegaConf.load(Path(CONF_DIR) / "memory" / f"{name}.yaml")
    return ["memory.max_tokens=16"] if writes else []



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
    (``prep_s`` − ``update_s`` + ``total_s``: the update a probe triggered is timed in ``observe_s`` too)."""
    recs, memory = lines(run_dir, "records"), lines(run_dir, "memory")
    last = max(memory, key=lambda m: m["session_index"])
    observed = sum(m["observe_s"] for m in memory)
    exported = sum(m["update_s"] for m in memory)
    answered = sum((lat["prep_s"] or 0.0) - (lat["update_s"] or 0.0) + (lat["total_s"] or 0.0)
                   for lat in (r["latency"] for r in recs))  # prep_s holds the triggered update, in observe_s too
    seconds = 3600 * last["prior_hours"]
    ttft = [r["latency"]["ttft_s"] for r in recs if r["latency"]["ttft_s"] is not None]
    rtf = [r["latency"]["rtf"] for r in recs if r["latency"]["rtf"] is not None]
    return {"what": label, "probes": len(recs), "bytes": last["bytes"], "per_hour": last["bytes"] / last["prior_hours"],
            "update_ms_per_s": 1000 * observed / seconds, "ttft_s": statistics.mean(ttft), "rtf": statistics.mean(rtf),
            "errors": sum(r["error"] is not None for r in recs), "wall_s": wall,
            "per_probe_ms": 1000 * wall / len(recs),
            "outside_ms": 1000 * (wall - observed - exported - answered) / len(recs)}


def state_by_session(run_dir: Path) -> list[tuple[float, float]]:
    """Per session of the trajectories (1 = after the first), the mean state bytes and fast-weight bytes
    after it (each session's newest memory line): what grows with the stream and what stays bounded."""
    newest = {(m["trajectory_id"], m["session_index"]): m for m in lines(run_dir, "memory")}
    sessions = sorted({index for _, index in newest})
    return [(statistics.mean(m["bytes"] for (_, i), m in newest.items() if i == index),
             statistics.mean(m.get("fast_weight_bytes", 0) for (_, i), m in newest.items() if i == index))
            for index in sessions]


def chunk_alignment(release: Path, run_dir: Path, chunk_frames: int) -> dict[str, Any]:
    """Mean TTFT and triggered update (``update_s``) of the probes whose second's frame closes a chunk
    (encoded by that frame's ``observe_frame``) and of those between two (the partial chunk encoded in
    ``answer``), at 1 FPS: a probe at session second p has observed frames 0..p."""
    starts = {(s.trajectory_id, s.day_id, s.session_id): s.start
              for t in load_release(release).trajectories for s in t.sessions}
    groups: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for r in lines(run_dir, "records"):
        day, hms = r["probe_time"].split(" ")
        observed = absolute(day, hms) - starts[(r["trajectory_id"], r["day_id"], r["session_id"])] + 1
        groups[observed % chunk_frames == 0].append(r["latency"])
    return {"boundary" if closes else "between": {
        "probes": len(group), "ttft_s": statistics.mean(x["ttft_s"] for x in group),
        "update_s": statistics.mean(x["update_s"] or 0.0 for x in group)} for closes, group in groups.items()}


def reduce_report(runs: list[Path], out: Path) -> None:
    """apm-judge (gate only) and apm-reduce (no bootstrap) over ``runs``, as a user would run them."""
    bin_dir, dirs = Path(sys.executable).parent, [str(r) for r in runs]
    for command in ([str(bin_dir / "apm-judge"), *dirs, "judge=gate_only"],
                    [str(bin_dir / "apm-reduce"), *dirs, "--out", str(out), "--bootstrap", "0"]):
        subprocess.run(command, check=True, capture_output=True)


def mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scale", default="paper")
    p.add_argument("--trajectories", type=int, default=1)
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args()
    with nullcontext(args.work) if args.work else tempfile.TemporaryDirectory() as work:
        work = Path(work)
        began = time.perf_counter()
        root = work / "release"
        if not (work / "cache").is_dir():  # the cache is built last: a release without it is rebuilt whole
            generate(root, seed=0, scale=args.scale, limit_trajectories=args.trajectories)
            build_release_cache(load_release(root), work / "cache", progress=False)
        for ours in ("runs", "tiny-runs"):  # measured afresh each time (a kept run would resume, timing nothing)
            shutil.rmtree(work / ours, ignore_errors=True)
        model = build_tiny_qwen2vl(work / "tiny")
        print(f"release and frame cache: {time.perf_counter() - began:.0f} s")
        stream = ["memory=none", "memory._target_=bench_streaming.NullStream", "~memory.recent_frames",
                  "memory.name='Null stream (bench)'", "backbone=random", "backbone.max_frames=1024"]
        harness = [harness_row("raw_video (frames re-sent per probe)",
                               *run(root, work / "runs", work / "cache", ["memory=raw_video", "backbone=random",
                                                                          "backbone.max_frames=1024"])),
                   harness_row("streaming replay (frames observed once per session)",
                               *run(root, work / "runs", work / "cache", stream))]
        tiny = ["backbone=tiny_qwen2vl_hf", f"backbone.model={model}", "generation.max_tokens=8"]
        references = {name: run(root, work / "tiny-runs", work / "cache", [f"memory={name}", *system_overrides(name),
                                                                            *tiny])
                      for name in streaming_references()}
        systems = [system_row(name, *done) for name, done in references.items()]
        chunk = OmegaConf.load(Path(CONF_DIR) / "memory" / "kv_cache.yaml").chunk_frames
        alignment = chunk_alignment(root, references["kv_cache"][0], chunk)
        states = {name: state_by_session(run_dir) for name, (run_dir, _) in references.items()}
        reduce_report([run_dir for run_dir, _ in references.values()], work / "report")
        report = work / "report"
        table3 = (report / "tables" / "table3.md").read_text()
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
    print()
    sessions = max(len(state) for state in states.values())
    print("| system | " + " | ".join(f"after session {i + 1}" for i in range(sessions)) + " | fast weights (last) |")
    print("| --- |" + " ---: |" * (sessions + 1))
    for name, state in states.items():
        print(f"| {name} | " + " | ".join(mib(b) for b, _ in state) + f" | {mib(state[-1][1])} |")
    print()
    print(f"kv_cache (chunk_frames {chunk}): probes closing a chunk against between two")
    for where, row in alignment.items():
        print(f"  {where}: {row['probes']} probes, mean TTFT {row['ttft_s']:.3f} s, "
              f"mean update_s {row['update_s']:.3f} s")
    print()
    print(f"report: {report if args.work else '(temporary)'}; Table 3:")
    print(table3)


if __name__ == "__main__":
    main()
