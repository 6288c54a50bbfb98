"""Benchmark: ``apm-reduce`` on ~1M synthetic records vs. pandas just loading the same JSONL.

Targets (issue 24 item 3): ``apm.reduce.load_runs`` loads at least 100,000 records/s, and the full
reduction (load, scores with 1,000 bootstrap replicates, tables, figures) takes at most 0.5× the wall
time of ``pd.read_json(lines=True)`` loading the records, judgements and memory files, with at most 1/3
of its peak memory. Each of the three steps runs in its own child process; its peak resident memory is
the largest sum over the child and every process under it (``apm-reduce``'s loader workers), sampled
from ``/proc`` (``process_tree.TreePeak``), and so is its CPU (never below what ``os.wait4`` reports).
Run: ``.venv/bin/python bench/bench_reduce.py [--records 1000000] [--methods 20]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from process_tree import Sampler, TreePeak

from apm.reduce.load import WORKERS, load_runs
from apm.testing import fixtures

RECORDS_PER_TRAJECTORY = 62
"""Mean records per synthetic trajectory (~26 candidates, adaptive ones with ~4.5 probes)."""
LOAD_RATE = 100_000
"""Target: records loaded per second by ``apm.reduce.load_runs``."""
WALL_RATIO = 0.5
"""Target: at most this fraction of the pandas load's wall time for ``apm-reduce``."""
MEMORY_RATIO = 1 / 3
"""Target: at most this fraction of the pandas load's peak resident memory for ``apm-reduce``."""


def generate(root: Path, records: int, methods: int) -> int:
    """Write ``methods`` runs (4 record shards each) totalling about ``records`` records."""
    per_method = max(1, records // (methods * RECORDS_PER_TRAJECTORY))
    backbones = ["Qwen3-VL-8B-Instruct", "InternVL3.5-8B", "Seed-2.0-Lite", "Gemini 3.6 Flash"]
    memories = ["none", "raw_video", "text_summary", "hermes", "oasis"]
    for i in range(methods):
        run = fixtures.run_info(memories[i % len(memories)], f"{backbones[i // len(memories) % len(backbones)]}-{i}")
        fixtures.synthetic_run(root / f"run{i:02d}", run, per_method, seed=i, skill=0.3 + 0.03 * i, shards=4)
    return sum(1 for f in root.rglob("records/*.jsonl") for _ in f.open("rb"))


def pandas_load(root: Path) -> None:
    """pd.read_json(lines=True) over every records, judgements and memory file (the baseline)."""
    for kind in ("records", "judgements", "memory"):
        pd.concat([pd.read_json(f, lines=True) for f in sorted(root.rglob(f"{kind}/*.jsonl"))])


@dataclass(frozen=True)
class Step:
    """One step's wall seconds, peak resident memory (MiB) and CPU seconds, measured on its own child
    process and every process under it, and what it printed."""

    wall_s: float
    peak_mib: float
    cpu_s: float
    printed: str


def child(command: list[str]) -> Step:
    """Run ``command`` as a child process: its wall time, the peak of its tree's summed resident memory
    (never below its own ``ru_maxrss``) and the CPU of it and every process it reaped."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with TreePeak(proc.pid) as tree:
        printed = proc.stdout.read()  # to the pipe's end; os.wait4 then reaps the child with its usage
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{command[:4]}: exit {os.waitstatus_to_exitcode(status)}")
    cpu = max(tree.cpu_s, usage.ru_utime + usage.ru_stime)
    return Step(wall, max(tree.peak_kib, usage.ru_maxrss) / 1024, cpu, printed)


class LoadSampler(Sampler):
    """The 1-minute load average sampled every 2 s while the steps run (the machine may be shared)."""

    def __init__(self) -> None:
        super().__init__(2.0)
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--methods", type=int, default=20)
    p.add_argument("--bootstrap", type=int, default=1000)
    p.add_argument("--step", choices=("pandas", "load"), help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.step == "pandas":
        pandas_load(args.root)
        return 0
    if args.step == "load":
        start = time.perf_counter()
        load_runs([args.root], workers=WORKERS)  # as apm-reduce loads
        print(f"{time.perf_counter() - start}")  # the load alone, imports not counted
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        start = time.perf_counter()
        n = generate(root, args.records, args.methods)
        size = sum(f.stat().st_size for f in root.rglob("*.jsonl")) / 2**20
        print(f"generated {n:,} records ({size:,.0f} MiB JSONL) in {time.perf_counter() - start:.1f} s", flush=True)
        me = [sys.executable, __file__, "--root", str(root), "--step"]
        with LoadSampler() as load_average:
            baseline = child([*me, "pandas"])
            loaded = child([*me, "load"])
            reduced = child([sys.executable, "-m", "apm.cli.reduce", str(root), "--out", str(Path(tmp) / "out"),
                             "--bootstrap", str(args.bootstrap)])
    load_s = float(loaded.printed.split()[-1])
    rate = n / load_s
    wall, memory = reduced.wall_s / baseline.wall_s, reduced.peak_mib / baseline.peak_mib
    samples = load_average.samples
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, pandas {pd.__version__}")
    print(f"load average (1 min) during the steps: mean {sum(samples) / len(samples):.2f}, max {max(samples):.2f}")
    print(f"CPU (s, with workers): pandas {baseline.cpu_s:.1f}, load_runs {loaded.cpu_s:.1f}, "
          f"apm-reduce {reduced.cpu_s:.1f}")
    rows = [("pd.read_json(lines=True), all files", baseline.wall_s, baseline.peak_mib, ""),
            ("apm.reduce.load_runs alone", load_s, loaded.peak_mib,
             f"  ({rate:,.0f} records/s; target >= {LOAD_RATE:,})"),
            (f"apm-reduce end to end (bootstrap {args.bootstrap})", reduced.wall_s, reduced.peak_mib, "")]
    for label, seconds, mib, note in rows:
        print(f"{label + ':':<44}{seconds:7.1f} s  peak RSS {mib:7,.0f} MiB (all its processes){note}")
    print(f"apm-reduce / pandas load: wall {wall:.2f} (target <= {WALL_RATIO}), peak RSS {memory:.2f} "
          f"(target <= {MEMORY_RATIO:.2f})")
    met = rate >= LOAD_RATE and wall <= WALL_RATIO and memory <= MEMORY_RATIO
    print("targets: " + ("all met" if met else "NOT all met"))
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
