"""Raw video at 1,024 frames through the OpenAI-compatible backbone against a bare client carrying the same
bodies (docs/performance.md, "Raw video at 1,024 frames (issue 37, item 2)").

A paper-shaped synthetic release of ``--trajectories`` trajectories (``apm.synth.generate(scale="paper")``:
4–7 sessions of 11–15 min each) and its frame cache at the run's frame settings (1 FPS, 448 px) are built
first, outside every timer, and kept for the next run in ``--work DIR`` (default
``$TMPDIR/apm-bench-raw-video``: the first run synthesises for ~2 min per trajectory, later runs take
~1 min). The fake server (in a subprocess) answers every request after ``--latency`` s. Then, each in
its own subprocess, one after the other:

- **apm-run**: ``memory=raw_video`` (every probe sends up to 1,024 frames uniformly sampled from every
  visible session, and its prefix) through ``backbone=openai_compatible`` (``max_frames: 1024``), backbone
  concurrency ``--concurrency`` (HTTP requests at once) and run concurrency ``--run-concurrency`` (instances
  at once, each holding its slot while its frames are read and its body built too; default the same);
- **bare**: the same probes' bodies, rebuilt once before its timer from each record's kept prompt and
  frames (the same cached JPEGs, so the same bytes but for the generation settings' few bytes) and
  posted by httpx alone at the same concurrency (``bench_requests.bare``).

``--rounds N`` runs the pair N times on the same server (rows per round and the median ratio): on a host
that sat idle the first round runs slower in every process, the fake server's too (docs/performance.md).

Per client: requests/s (apm-run: probes from the first probe's preparation, ``written − prep_s −
elapsed_s``, to its last record written — and, apart, from its first request reaching the server, its
preflight's two requests inside that window; bare: its own timer, after one warm-up round), CPU ms per
request (every process of the client's tree, and the fake server's apart, both from the moment the
client's first request reached the server: after apm-run's start-up, after bare's bodies are built),
peak RSS of the tree and its growth from that moment, per request in flight at the server, and the most
requests the server had in flight.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_raw_video.py [--trajectories 2] [--latency 0.5]
        [--concurrency 16] [--run-concurrency 32] [--limit N] [--rounds 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import httpx
from bench_paper_scale import process_cpu_s
from bench_requests import bare
from bench_streaming_throughput import lines, machine, start_server
from process_tree import TreePeak, descendants, rss_kib

from apm.backbones import FramePart, GenerationSettings, Message, Request, TextPart
from apm.backbones.openai_api import OpenAIBackbone
from apm.data.frames import Frame
from apm.data.release import load_release
from apm.records.prompts import restore, text_path
from apm.synth import generate
from apm.video.cache import FrameCache, build_release_cache

POLL_S = 0.1
"""How often the fake server's in-flight count is read."""


class Client:
    """One client's subprocess, watched: ``requests``, the probes (one request each) whose rate ``rps`` is
    compared; ``sent``, every request it sent (the preflight's two, bare's warm-up round: what CPU is spread
    over); from its first request reaching the server on, ``cpu_s``, its process tree's CPU seconds, and
    ``server_cpu_s``, the fake server's; ``peak_mib``, its tree's peak RSS, and ``growth_mib``, that peak
    less the RSS at that moment; ``in_flight``, the most requests the server had in flight."""

    def __init__(self) -> None:
        self.requests = self.sent = self.in_flight = self.errors = 0
        self.rps = self.cpu_s = self.server_cpu_s = self.peak_mib = self.growth_mib = 0.0
        self.started_rps = 0.0
        """apm-run's rate from its first request, the preflight's (its largest request, alone) included."""

    @property
    def growth_per_request_mib(self) -> float:
        return self.growth_mib / max(1, self.in_flight)


def watched(command: list[str], server: tuple[subprocess.Popen[str], str], log: Path) -> tuple[Client, float]:
    """Run ``command`` (output to ``log``), sampling its process tree and the fake server; the client's
    figures (its requests and rate left to the caller) and when (``time.time()``) its first request
    reached the server."""
    proc, base_url = server
    stats, client, first = base_url.removesuffix("/v1") + "/fake/stats", Client(), 0.0
    httpx.get(stats)  # reset
    server_cpu, baseline, cpu_before = process_cpu_s(proc.pid), 0, 0.0
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        with TreePeak(child.pid) as tree:
            while child.poll() is None:
                seen = httpx.get(stats).json()
                client.in_flight = max(client.in_flight, seen["max_inflight"])
                if not first and (seen["max_inflight"] or seen["latencies"]):
                    first, baseline = time.time(), sum(rss_kib(p) for p in descendants(child.pid))
                    cpu_before, server_cpu = tree.cpu_s, process_cpu_s(proc.pid)
                time.sleep(POLL_S)
    if child.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited {child.returncode}:\n{log.read_text()[-3000:]}")
    client.cpu_s, client.peak_mib = tree.cpu_s - cpu_before, tree.peak_kib / 1024
    client.growth_mib, client.server_cpu_s = (tree.peak_kib - baseline) / 1024, process_cpu_s(proc.pid) - server_cpu
    return client, first


def apm_run(root: Path, runs: Path, cache: Path, server: tuple[subprocess.Popen[str], str],
            args: argparse.Namespace) -> tuple[Client, Path]:
    """``apm-run`` of raw video at 1,024 frames; its figures and run folder."""
    limit = [f"dataset.limit={args.limit}"] if args.limit else []
    command = [str(Path(sys.executable).parent / "apm-run"), f"dataset.root={root}", f"output_root={runs}",
               f"frames.cache_dir={cache}", "memory=raw_video", "backbone=openai_compatible",
               f"backbone.base_url={server[1]}", "backbone.model=fake", f"backbone.max_frames={args.frames}",
               f"backbone.concurrency={args.concurrency}", f"concurrency={args.run_concurrency}",
               "logging.wandb.mode=disabled", "logging.progress=false", *limit]
    client, first = watched(command, server, runs.parent / "apm-run.log")
    [run_dir] = {p.parent.parent for p in runs.rglob("records/*.jsonl")}
    recs = lines(run_dir, "records")
    client.requests, client.sent, client.errors = len(recs), len(recs) + 2, sum(r["error"] is not None for r in recs)
    last = max(r["written_ns"] for r in recs) / 1e9
    began = min(r["written_ns"] / 1e9 - r["latency"]["prep_s"] - r["latency"]["elapsed_s"] for r in recs)
    client.rps, client.started_rps = len(recs) / (last - began), len(recs) / (last - first)
    return client, run_dir


def bare_client(run_dir: Path, root: Path, cache: Path, server: tuple[subprocess.Popen[str], str],
                args: argparse.Namespace) -> Client:
    """The bare client over the run's probes, in a subprocess (this script's ``--bare-of``)."""
    figures = run_dir.parent / "bare.json"
    command = [sys.executable, __file__, "--bare-of", str(run_dir), "--release", str(root), "--cache", str(cache),
               "--base-url", server[1], "--concurrency", str(args.concurrency), "--out", str(figures)]
    client, _ = watched(command, server, run_dir.parent / "bare.log")
    done = json.loads(figures.read_text())
    client.requests, client.rps, client.errors = done["requests"], done["rps"], done["errors"]
    client.sent = client.requests + args.concurrency
    return client


def probe_request(record: dict[str, Any], run_dir: Path, entries: dict[tuple[str, str], Any]) -> Request:
    """The request a record's probe sent, rebuilt from its kept prompt and its frames' cached JPEGs."""
    canon = restore(record["prompt"], record["frames"], record["prompt_sha256"],
                    lambda digest: text_path(run_dir, digest).read_text())
    shown = iter(record["frames"])
    messages = []
    for role, parts in canon:
        built: list[TextPart | FramePart] = []
        for part in parts:
            if isinstance(part, str):
                built.append(TextPart(part))
                continue
            f, entry = next(shown), entries[record["trajectory_id"], part[0]]
            jpeg = entry.jpeg(round(f["offset"] * entry.rate))
            built.append(FramePart(Frame(f["session"], f["offset"], f["wall_clock"], jpeg, entry.key),
                                   still=len(part) == 3))
        messages.append(Message(role, tuple(built)))
    return Request(tuple(messages), GenerationSettings(512, 0.0, 0), request_id=record["key"])


def bare_main(args: argparse.Namespace) -> None:
    """The bare client (``--bare-of RUN_DIR``): every record's body built, then all posted at ``--concurrency``."""
    release, frames = load_release(args.release), FrameCache(args.cache)
    entries = {(t.trajectory_id, s.key): frames.entry(s.video) for t in release.trajectories for s in t.sessions}
    wire = OpenAIBackbone(model="fake", base_url=args.base_url).wire
    bodies = [bytes(wire(probe_request(r, args.bare_of, entries))) for r in lines(args.bare_of, "records")]
    wall, _, ttfts = asyncio.run(bare(args.base_url, bodies, args.concurrency))
    args.out.write_text(json.dumps({"requests": len(bodies), "rps": len(bodies) / wall,
                                    "errors": len(bodies) - len(ttfts)}))


def row(name: str, c: Client, vs: Client) -> str:
    per = 1000 / c.sent
    return (f"| {name} | {c.requests} | {c.rps:.2f} | {c.rps / vs.rps:.2f} | {c.cpu_s * per:.0f} | "
            f"{c.server_cpu_s * per:.0f} | {c.in_flight} | {c.peak_mib:.0f} | {c.growth_per_request_mib:.1f} | "
            f"{c.errors} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trajectories", type=int, default=2, help="paper-shaped trajectories synthesised")
    p.add_argument("--latency", type=float, default=0.5)
    p.add_argument("--concurrency", type=int, default=16, help="HTTP requests at once: bare's, the backbone's")
    p.add_argument("--run-concurrency", type=int, default=None,
                   help="apm-run's concurrency (instances being prepared or sent at once; default --concurrency)")
    p.add_argument("--frames", type=int, default=1024, help="backbone.max_frames")
    p.add_argument("--limit", type=int, default=None, help="dataset.limit: run only N instances")
    p.add_argument("--rounds", type=int, default=1,
                   help="apm-run then the bare client, this many times on the same server (rows per round, the median)")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "apm-bench-raw-video",
                   help="keep (and reuse) the release and frame cache here")
    p.add_argument("--bare-of", type=Path, help=argparse.SUPPRESS)
    for hidden in ("--release", "--cache", "--out"):
        p.add_argument(hidden, type=Path, help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.run_concurrency = args.run_concurrency or args.concurrency
    if args.bare_of:
        return bare_main(args)
    with tempfile.TemporaryDirectory() as tmp:
        root, cache = args.work / f"paper-{args.trajectories}", args.work / "cache"
        if not (root / "trajectories.json").exists():
            generate(root, seed=0, scale="paper", limit_trajectories=args.trajectories)
        build_release_cache(load_release(root), cache, progress=False)
        load = os.getloadavg()[0]
        server = start_server(args.latency)
        try:
            rounds = []
            for i in range(args.rounds):
                (folder := Path(tmp) / f"round-{i + 1}").mkdir()
                run, run_dir = apm_run(root, folder / "runs", cache, server, args)
                rounds.append((run, bare_client(run_dir, root, cache, server, args)))
        finally:
            server[0].terminate()
            server[0].wait()
    print(f"Command: `python {' '.join(sys.argv)}`")
    print(f"Machine: {machine()} (at the start {load:.1f})")
    print(f"L = {args.latency:g} s, C = {args.concurrency} (apm-run concurrency={args.run_concurrency}), "
          f"max_frames = {args.frames}, "
          f"{args.trajectories} paper-shaped trajectories")
    print("| client | requests | requests/s | ÷ bare | CPU ms / request (tree) | fake server CPU ms / request "
          "| most in flight at the server | peak RSS (MiB) | peak RSS growth per request in flight (MiB) | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    labels = [f" (round {i})" if args.rounds > 1 else "" for i in range(1, args.rounds + 1)]
    for which, (run, plain) in zip(labels, rounds):
        print(row(f"bare httpx (the run's bodies, prebuilt){which}", plain, plain))
        print(row(f"`raw_video` via `apm-run`{which}", run, plain))
    for which, (run, plain) in zip(labels, rounds):
        print(f"apm-run from its first request (the preflight's included){which}: "
              f"{run.started_rps:.2f} requests/s, {run.started_rps / plain.rps:.2f} of bare")
    if args.rounds > 1:
        ratios = [run.rps / plain.rps for run, plain in rounds]
        started = [run.started_rps / plain.rps for run, plain in rounds]
        print(f"÷ bare by round: {', '.join(f'{r:.2f}' for r in ratios)}; median {median(ratios):.2f} "
              f"(from the first request, the preflight's included: median {median(started):.2f})")


if __name__ == "__main__":
    main()
