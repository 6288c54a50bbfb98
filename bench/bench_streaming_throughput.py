"""A streaming system through an OpenAI-compatible backbone against the bare client on a loopback endpoint
(docs/performance.md, "Streaming systems through an API backbone"; issue 24, item 1).

The fake server (``apm.testing.fake_server``, in a subprocess) answers every request after a fixed
latency L. ``event_memory`` runs through ``apm-run`` with the run's and the backbone's concurrency C, on
a release of many trajectories (the tiny synthetic release's trajectories repeated under new ids; the
videos are shared, so the frame cache is built once): every event description and every probe is one
request. The bare client sends the same number of description-shaped requests (4 cached frames + text)
through the same backbone class at concurrency C. The figure is the ratio of their requests/s (target
≥ 0.85); an ideal client reaches C/L.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_streaming_throughput.py [--latency 0.5] [--concurrency 16]
        [--copies 16] [--memory event_memory|thought_memory] [--source RELEASE --cache DIR]

``--source`` repeats another release's trajectories instead (e.g. paper-shaped ones, whose lengths differ:
26 copies of 4 paper-shaped trajectories are the paper's 104), its frame cache at ``--cache`` (built there
if missing; read, never emptied).

(``PYTHONPATH=$PWD``: the script's folder comes first on ``sys.path``, so without it the installed ``apm``
is measured, not the working tree.) Each run prints its CPU per request beside the bare client's: on a
shared host the run is bound by its CPU long before the endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import host
import httpx
from hydra import compose, initialize_config_dir

from apm.backbones import FramePart, Message, Request, TextPart
from apm.backbones.openai_api import OpenAIBackbone
from apm.configs import CONF_DIR
from apm.data.frames import Frame
from apm.data.release import load_release
from apm.runner.app import run_async, run_dir_of
from apm.synth import generate
from apm.video.cache import FrameCache, build_release_cache

TASKS = "[ER,EST,TR,ACR,CT,OCR,STU,ERA,RCR,MPA,PRM,TPG]"
"""Every task but EA: each request of the run is then a description or a probe of the main replay."""


IDS = ("trajectory_id", "candidate_id", "original_candidate_id")
"""The fields a repeated candidate is renamed in."""


def repeated_release(source: Path, out: Path, copies: int) -> Path:
    """``source``'s trajectories ``copies`` times under new ids (``<id>-<k>``), sharing its videos (hard links,
    else copies: a release refuses a video that links outside it)."""
    out.mkdir(parents=True)
    for video in (v for v in (source / "videos").rglob("*") if v.is_file()):
        shared = out / video.relative_to(source)
        shared.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(video.resolve(), shared)
        except OSError:  # another file system
            shutil.copy2(video, shared)
    trajectories = json.loads((source / "trajectories.json").read_text())
    (out / "trajectories.json").write_text(json.dumps(
        [{**t, "trajectory_id": f"{t['trajectory_id']}-{k}"} for k in range(copies) for t in trajectories]))
    for name in ("candidates.jsonl", "ea_candidates.jsonl"):
        rows = [json.loads(x) for x in (source / name).read_text().splitlines()]
        copied = [{**r, **{f: f"{r[f]}-{k}" for f in IDS if f in r}} for k in range(copies) for r in rows]
        (out / name).write_text("".join(json.dumps(r) + "\n" for r in copied))
    return out


def start_server(latency: float, reply: str | None = None) -> tuple[subprocess.Popen[str], str]:
    """The fake server in a subprocess, answering every request after ``latency`` s (with ``reply``, else its
    default ``{"answer":"A"}``); it and its base URL."""
    proc = subprocess.Popen([sys.executable, "-m", "apm.testing.fake_server", "--latency", str(latency),
                             "--chunks", "8", *(["--reply", reply] if reply else [])],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    base_url = f"http://127.0.0.1:{proc.stdout.readline().split()[1]}/v1"
    httpx.get(base_url.removesuffix("/v1") + "/health").raise_for_status()
    return proc, base_url


def lines(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [json.loads(x) for p in sorted((run_dir / kind).glob("*.jsonl")) for x in p.read_text().splitlines()]


WRITTEN = {"event_memory": "events", "thought_memory": "thoughts"}
"""The systems measured, each with its memory line's count of the pieces its writer wrote (one request each)."""


def streaming_run(root: Path, out: Path, cache: Path, base_url: str, concurrency: int,
                  memory: str = "event_memory") -> dict[str, Any]:
    """``memory`` through the OpenAI-compatible backbone: its requests, wall time, CPU (this process's, the
    run's threads included) and requests in flight."""
    overrides = [f"dataset.root={root}", f"output_root={out}", f"frames.cache_dir={cache}", f"dataset.tasks={TASKS}",
                 "logging.wandb.mode=disabled", "logging.progress=false", f"memory={memory}",
                 "backbone=openai_compatible", f"backbone.base_url={base_url}", "backbone.model=fake",
                 f"backbone.concurrency={concurrency}", f"concurrency={concurrency}"]
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose("config", overrides=overrides)
    began, started, cpu = time.perf_counter(), time.time(), time.process_time()
    asyncio.run(run_async(cfg))
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    recs = lines(run_dir_of(cfg), "records")
    requests = len(recs) + sum(m[WRITTEN[memory]] for m in lines(run_dir_of(cfg), "memory"))
    written = [x["written_ns"] / 1e9 for x in recs + lines(run_dir_of(cfg), "memory")]
    return {"requests": requests, "wall_s": wall, "rps": requests / wall, "probes": len(recs), "cpu_s": cpu,
            "first_line_s": min(written) - started, "last_line_s": max(written) - started,
            "descriptions": requests - len(recs), "errors": sum(r["error"] is not None for r in recs),
            "max_in_flight": max(r["latency"]["in_flight"] for r in recs)}


def description_request(cache: FrameCache, root: Path, key: int) -> Request:
    """An event-description-shaped request: the describe prompt's size and 4 frames from the frame cache."""
    session = load_release(root).trajectories[0].sessions[0]
    entry = cache.entry(session.video)
    frames = [Frame(session.key, float(i), session.start + i, jpeg) for i, jpeg in zip(range(4), entry.jpegs(range(4)))]
    parts = (TextPart("Describe in one sentence what is visible and what the wearer does. " * 3),
             *(FramePart(f) for f in frames), TextPart("Description:"))
    return Request((Message("user", parts),), request_id=f"bare-{key}")


async def bare_client(request: Request, base_url: str, concurrency: int, n: int) -> dict[str, Any]:
    """``n`` requests through the backbone alone at ``concurrency``, after one warm-up round."""
    async with OpenAIBackbone(model="fake", base_url=base_url, concurrency=concurrency, read_timeout_s=60) as b:
        await asyncio.gather(*(b.generate(request) for _ in range(concurrency)))
        began, cpu = time.perf_counter(), time.process_time()
        out = await asyncio.gather(*(b.generate(request) for _ in range(n)))
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    return {"requests": n, "wall_s": wall, "rps": n / wall, "cpu_s": cpu, "errors": sum(not r.ok for r in out)}


def machine() -> str:
    return (f"{host.machine()}; "
            f"load average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--copies", type=int, default=16, help="times the tiny release's 3 trajectories are repeated")
    p.add_argument("--memory", choices=sorted(WRITTEN), default="event_memory")
    p.add_argument("--source", type=Path, help="the release to repeat (default: the tiny synthetic release)")
    p.add_argument("--cache", type=Path, help="with --source: its frame cache")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = args.source.resolve() if args.source else generate(tmp / "tiny", seed=1, scale="tiny")
        cache = args.cache.resolve() if args.source and args.cache else tmp / "cache"
        root = repeated_release(source, tmp / "release", args.copies)
        trajectories = len(load_release(root).trajectories)
        build_release_cache(load_release(root), cache, progress=False)
        proc, base_url = start_server(args.latency)
        try:
            stream = streaming_run(root, tmp / "runs", cache, base_url, args.concurrency, args.memory)
            request = description_request(FrameCache(cache), root, 0)
            bare = asyncio.run(bare_client(request, base_url, args.concurrency, stream["requests"]))
        finally:
            proc.terminate()
            proc.wait()
        shutil.rmtree(tmp / "runs", ignore_errors=True)
    ideal = args.concurrency / args.latency
    print(f"Command: `python {' '.join(sys.argv)}`")
    print(f"Machine: {machine()}")
    print(f"L = {args.latency:g} s, C = {args.concurrency}, ideal C/L = {ideal:.1f} requests/s; "
          f"{trajectories} trajectories, {args.copies} copies of {source.name}")
    print("| client | requests | wall (s) | requests/s | ÷ bare client | CPU ms / request | most probes in flight "
          "| errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| bare `OpenAIBackbone` (description-shaped requests) | {bare['requests']} | {bare['wall_s']:.1f} | "
          f"{bare['rps']:.1f} | 1.00 | {1e3 * bare['cpu_s'] / bare['requests']:.1f} | | {bare['errors']} |")
    print(f"| `{args.memory}` via apm-run ({stream['descriptions']} written + {stream['probes']} probes) | "
          f"{stream['requests']} | {stream['wall_s']:.1f} | {stream['rps']:.1f} | {stream['rps'] / bare['rps']:.2f} | "
          f"{1e3 * stream['cpu_s'] / stream['requests']:.1f} | {stream['max_in_flight']} | {stream['errors']} |")
    print(f"apm-run: first line written {stream['first_line_s']:.1f} s after the call, "
          f"last {stream['last_line_s']:.1f} s (the rest: start-up before the replay, closing after it)")


if __name__ == "__main__":
    main()
