"""The paper's scale end to end: every console command of a sweep on paper-shaped trajectories, its time,
CPU and peak memory per stage, each stage shown linear in instances, and the harness's share of a GPU
sweep (docs/performance.md, "The paper's scale, end to end"; issue 24, item 5).

One paper-shaped trajectory is synthesised (4 sessions of 13–15 min, 640×360; its frame cache built at
1 FPS, 448 px); for each k of ``--copies`` a release of k copies of it (``repeated_release``: new ids,
the videos and frame cache shared), so the instances grow k-fold without more video. On each, as a user
types them, each in its own subprocess: ``apm-run`` of SimpleStream (``memory=none``), raw video, text
summary and the event memory (a streaming system) through the OpenAI-compatible backbone against the
loopback fake server (every request answered after ``--latency`` s; run and backbone concurrency
``--concurrency``; W&B off in the run, which ``apm-publish`` covers), then ``apm-judge judge=gate_only``,
``apm-reduce``, ``apm-view`` and ``apm-publish`` (offline) over the four runs.

Per stage: wall seconds, the child's CPU seconds (user + system, from ``os.wait4``: that process and
the children it waited for, nothing else) and its peak RSS; for ``apm-run``, the fake server's CPU
during it apart (the engine's, not the harness's). Linear: CPU and wall per instance for each k and the
ratio largest k ÷ smallest k (1: linear; below 1: a fixed start-up spread over more instances), and the
marginal CPU of one more instance on each step between two k (equal steps: linear). Harness share: all
stages' CPU ÷ probes (instances × methods), measured at the largest k and extrapolated to the paper's
5,631 instances per method (each stage's fixed CPU plus its marginal cost per instance), against the
GPU seconds per probe of ``--gpu-figure`` (``bench/gpu/bench_gpu_hf.py``'s ``OUT/bench_gpu_hf.json``:
each method's ``gpu_s_per_probe`` and their mean) or, without one, against assumed 0.5, 1 and 2 GPU s
per probe; target ≤ 2 %.

    .venv/bin/python bench/bench_paper_scale.py [--copies 1 2 4] [--latency 1.0] [--work DIR] [--gpu-figure F]

``--work DIR`` keeps the release and frame cache (reused when there; ``bench/bench_streaming.py
--work`` lays out the same two folders) and each k's runs, report, site and publish folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from bench_streaming_throughput import machine, repeated_release, start_server
from bench_view import PAPER_INSTANCES

from apm.data.release import load_release
from apm.synth import generate
from apm.video.cache import build_release_cache

METHODS = ("none", "raw_video", "text_summary", "event_memory")
"""SimpleStream, raw video, text summary and one streaming system, by ``conf/memory`` name."""
POST = ("judge", "reduce", "view", "publish")
ASSUMED_GPU_S = (0.5, 1.0, 2.0)
"""GPU seconds per probe the share is shown for when no GPU figure is given (assumptions, not measured)."""
TARGET = 0.02
REPLY = ('{"answer":"A","decision":"INTERVENE","proactive_response":"Turn the stove off now.",'
         '"reason":"The pan has been left on."}')
"""The fake server's every answer: it parses for MCQA/EA and for adaptive probes alike (an intervention,
so gate-passing probes reach the judge); descriptions and summaries are this text too."""


@dataclass(frozen=True)
class Stage:
    """One console command's measurement."""

    wall_s: float
    cpu_s: float
    rss_mib: float
    instances: int
    engine_cpu_s: float | None = None
    """The fake server's CPU during the stage (``apm-run`` only)."""


def process_cpu_s(pid: int) -> float:
    """A live process's CPU seconds so far (user + system, ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


LAUNCHER = ("import json, os, subprocess, sys\n"
            "proc = subprocess.Popen(sys.argv[2:])\n"
            "_, status, usage = os.wait4(proc.pid, 0)\n"
            "cpu = usage.ru_utime + usage.ru_stime\n"
            "with open(sys.argv[1], 'w') as out:\n"
            "    json.dump([os.waitstatus_to_exitcode(status), cpu, usage.ru_maxrss], out)\n")
"""A small process that starts a stage and writes the stage's own exit code, CPU seconds and peak RSS (KiB).
On Linux a child's ``ru_maxrss`` starts from the memory of the process it was forked from (exec folds the
forked copy's high-water mark in), so a stage started from this benchmark, grown large by then (or from
a test suite's process), would report that size; started from this launcher it reports its own."""


def measured(command: list[str], log: Path, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Run ``command`` (its output to ``log``) through :data:`LAUNCHER`; its wall and CPU seconds and peak
    RSS (MiB), from ``os.wait4``."""
    report = log.with_suffix(".rusage.json")
    began = time.perf_counter()
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", LAUNCHER, str(report), *command], stdout=out,
                       stderr=subprocess.STDOUT, env=env, check=True)
    wall = time.perf_counter() - began
    code, cpu, peak_kib = json.loads(report.read_text())
    if code != 0:
        raise RuntimeError(f"{' '.join(command[:2])} … exited {code}:\n{log.read_text()[-3000:]}")
    return wall, cpu, peak_kib / 1024  # ru_maxrss: KiB on Linux


def records(folder: Path) -> int:
    return sum(1 for p in folder.rglob("records/*.jsonl") for _ in p.open())


def sweep(root: Path, out: Path, cache: Path, server: tuple[int, str], args: argparse.Namespace) -> dict[str, Stage]:
    """Every stage on the release at ``root``, as a user types them; their measurements by stage name."""
    bin_dir, (server_pid, base_url) = Path(sys.executable).parent, server
    runs, stages = out / "runs", {}
    for memory in METHODS:
        before = process_cpu_s(server_pid)
        wall, cpu, rss = measured([
            str(bin_dir / "apm-run"), f"dataset.root={root}", f"output_root={runs / memory}",
            f"frames.cache_dir={cache}", f"memory={memory}", "backbone=openai_compatible",
            f"backbone.base_url={base_url}", "backbone.model=fake", f"backbone.concurrency={args.concurrency}",
            f"concurrency={args.concurrency}", "logging.wandb.mode=disabled", "logging.progress=false",
        ], out / f"run-{memory}.log")
        stages[f"apm-run {memory}"] = Stage(wall, cpu, rss, records(runs / memory), process_cpu_s(server_pid) - before)
    probes = records(runs)
    bootstrap = ["--bootstrap", str(args.bootstrap)]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(out / "wandb")}
    env.pop("WANDB_SERVICE", None)
    for name, command in (("judge", [str(runs), "judge=gate_only"]),
                          ("reduce", [str(runs), "--out", str(out / "report"), *bootstrap]),
                          ("view", [str(runs), "--out", str(out / "site")]),
                          ("publish", [str(runs), "--mode", "offline", "--dir", str(out / "publish"), *bootstrap])):
        stages[f"apm-{name}"] = Stage(*measured([str(bin_dir / f"apm-{name}"), *command], out / f"{name}.log", env),
                                      probes)
    return stages


def stage_table(by_copies: dict[int, dict[str, Stage]]) -> list[str]:
    """Every stage for every k: what it took."""
    rows = ["| stage | copies | instances | wall (s) | CPU (s) | peak RSS (MiB) | fake server CPU (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in next(iter(by_copies.values())):
        for k, stages in by_copies.items():
            s = stages[name]
            engine = "" if s.engine_cpu_s is None else f"{s.engine_cpu_s:.1f}"
            rows.append(f"| {name} | {k} | {s.instances} | {s.wall_s:.1f} | {s.cpu_s:.1f} | {s.rss_mib:.0f} | "
                        f"{engine} |")
    return rows


def per_instance_ms(stage: Stage) -> tuple[float, float]:
    """Wall and CPU milliseconds per instance."""
    return 1000 * stage.wall_s / stage.instances, 1000 * stage.cpu_s / stage.instances


def linear_table(by_copies: dict[int, dict[str, Stage]]) -> list[str]:
    """Per stage, CPU and wall per instance for each k and largest k ÷ smallest k, and the marginal CPU
    per instance of each step between two k (equal steps: linear)."""
    ks = list(by_copies)
    steps = list(zip(ks, ks[1:]))
    rows = ["| stage | " + " | ".join(f"CPU/instance ×{k} (ms)" for k in ks) + f" | ×{ks[-1]} ÷ ×{ks[0]} | "
            + " | ".join(f"marginal CPU/instance ×{a}→×{b} (ms)" for a, b in steps) + " | "
            + " | ".join(f"wall/instance ×{k} (ms)" for k in ks) + f" | ×{ks[-1]} ÷ ×{ks[0]} |",
            "| --- |" + " ---: |" * (2 * len(ks) + 2 + len(steps))]
    for name in by_copies[ks[0]]:
        walls, cpus = zip(*(per_instance_ms(by_copies[k][name]) for k in ks), strict=True)
        marginal = [1000 * marginal_s(by_copies[a][name], by_copies[b][name]) for a, b in steps]
        rows.append(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cpus) + f" | {cpus[-1] / cpus[0]:.2f} | "
                    + " | ".join(f"{m:.1f}" for m in marginal) + " | "
                    + " | ".join(f"{w:.1f}" for w in walls) + f" | {walls[-1] / walls[0]:.2f} |")
    return rows


def marginal_s(small: Stage, large: Stage) -> float:
    """CPU seconds of one more instance between two measurements of a stage."""
    return (large.cpu_s - small.cpu_s) / (large.instances - small.instances)


def run_probes(stages: dict[str, Stage]) -> int:
    """Probes of the sweep: instances × methods."""
    return sum(s.instances for name, s in stages.items() if name.startswith("apm-run "))


def harness_cpu_per_probe(stages: dict[str, Stage]) -> float:
    """Every stage's CPU seconds ÷ probes."""
    return sum(s.cpu_s for s in stages.values()) / run_probes(stages)


def paper_cpu_per_probe(small: dict[str, Stage], large: dict[str, Stage]) -> float:
    """Every stage's CPU ÷ probes at :data:`PAPER_INSTANCES` instances per method, each stage's CPU a
    fixed part plus its marginal cost per instance (both from the smallest and largest k)."""
    scale = PAPER_INSTANCES / small["apm-run none"].instances
    total = sum(s.cpu_s + marginal_s(s, large[name]) * s.instances * (scale - 1) for name, s in small.items())
    return total / (run_probes(small) * scale)


def gpu_seconds(figure: Path | None) -> list[tuple[str, float]]:
    """GPU seconds per probe: each method of ``figure`` (bench_gpu_hf.json) and their mean; without one, assumptions."""
    if figure is None:
        return [(f"assumed {g:g} s (not measured)", g) for g in ASSUMED_GPU_S]
    methods = json.loads(figure.read_text())["methods"]
    got = [(f"{name} ({figure.name})", m["gpu_s_per_probe"]) for name, m in methods.items()]
    return [*got, (f"mean of the {len(got)} ({figure.name})", sum(g for _, g in got) / len(got))]


def share_table(by_copies: dict[int, dict[str, Stage]], figure: Path | None) -> list[str]:
    """The harness's CPU per probe against GPU seconds per probe: its share measured at the largest k and
    extrapolated to the paper's instances (with two k or more), and the target."""
    ks = list(by_copies)
    harness = {f"×{ks[-1]}, measured": harness_cpu_per_probe(by_copies[ks[-1]])}
    if len(ks) > 1:
        harness[f"{PAPER_INSTANCES:,} instances per method, extrapolated"] = paper_cpu_per_probe(
            by_copies[ks[0]], by_copies[ks[-1]])
    rows = ["| GPU s per probe | " + " | ".join(f"harness share, {k} ({h:.4f} CPU s/probe)" for k, h in harness.items())
            + " | target ≤ 2 % |", "| --- |" + " ---: |" * len(harness) + " --- |"]
    for label, gpu in gpu_seconds(figure):
        shares = [h / gpu for h in harness.values()]
        rows.append(f"| {label}: {gpu:.3f} | " + " | ".join(f"{100 * x:.2f} %" for x in shares)
                    + f" | {' / '.join('met' if x <= TARGET else 'not met' for x in shares)} |")
    rows.append("| where the harness is exactly 2 % | " + " | ".join(f"{h / TARGET:.3f} GPU s per probe"
                                                                     for h in harness.values()) + " | |")
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="paper")
    p.add_argument("--copies", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--latency", type=float, default=1.0, help="the fake server's seconds per request")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--bootstrap", type=int, default=1000, help="apm-reduce's and apm-publish's replicates")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--gpu-figure", type=Path, default=None, help="bench/gpu/bench_gpu_hf.py's OUT/bench_gpu_hf.json")
    args = p.parse_args()
    load = os.getloadavg()[0]
    with nullcontext(args.work) if args.work else tempfile.TemporaryDirectory() as work:
        work = Path(work).resolve()
        source, cache = work / "release", work / "cache"
        if not cache.is_dir():  # the cache is built last: a release without it is rebuilt whole
            began = time.perf_counter()
            generate(source, seed=0, scale=args.scale, limit_trajectories=1)
            build_release_cache(load_release(source), cache, progress=False)
            print(f"release and frame cache: {time.perf_counter() - began:.0f} s")
        proc, base_url = start_server(args.latency, REPLY)
        try:
            by_copies = {}
            for k in sorted(args.copies):
                out = work / f"copies-{k}"
                shutil.rmtree(out, ignore_errors=True)  # measured afresh (a kept run would resume, timing nothing)
                root = repeated_release(source, out / "release", k)
                by_copies[k] = sweep(root, out, cache, (proc.pid, base_url), args)
        finally:
            proc.terminate()
            proc.wait()
    print(f"Command: `python {' '.join(sys.argv)}`")
    print(f"Machine: {machine()}; at the start {load:.1f}")
    print(f"Fake server: {args.latency:g} s per request; concurrency {args.concurrency}; bootstrap {args.bootstrap}; "
          f"this process's peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print()
    print("\n".join(stage_table(by_copies)))
    print()
    print("\n".join(linear_table(by_copies)))
    print()
    print("Harness share (all stages' CPU ÷ probes, probes = instances × methods):")
    print("\n".join(share_table(by_copies, args.gpu_figure)))


if __name__ == "__main__":
    main()
