"""Benchmark: ``apm-reduce`` on ~1M synthetic records vs. pandas just loading the same JSONL.

Target (issue 6): the full reduction (load, scores with 1,000 bootstrap replicates, tables, figures)
finishes within 3× the time ``pd.read_json(lines=True)`` needs to load the records, judgements and
memory files. Run: ``.venv/bin/python bench/bench_reduce.py [--records 1000000] [--methods 20]``.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from apm.reduce.load import load_runs
from apm.testing import fixtures

RECORDS_PER_TRAJECTORY = 62
"""Mean records per synthetic trajectory (~26 candidates, adaptive ones with ~4.5 probes)."""


def generate(root: Path, records: int, methods: int) -> int:
    """Write ``methods`` runs (4 record shards each) totalling about ``records`` records."""
    per_method = max(1, records // (methods * RECORDS_PER_TRAJECTORY))
    backbones = ["Qwen3-VL-8B-Instruct", "InternVL3.5-8B", "Seed-2.0-Lite", "Gemini 3.6 Flash"]
    memories = ["none", "raw_video", "text_summary", "hermes", "oasis"]
    for i in range(methods):
        run = fixtures.run_info(memories[i % len(memories)], f"{backbones[i // len(memories) % len(backbones)]}-{i}")
        fixtures.synthetic_run(root / f"run{i:02d}", run, per_method, seed=i, skill=0.3 + 0.03 * i, shards=4)
    return sum(1 for f in root.rglob("records/*.jsonl") for _ in f.open("rb"))


def pandas_load(root: Path) -> float:
    """Seconds for pd.read_json(lines=True) over every records, judgements and memory file."""
    start = time.perf_counter()
    for kind in ("records", "judgements", "memory"):
        pd.concat([pd.read_json(f, lines=True) for f in sorted(root.rglob(f"{kind}/*.jsonl"))])
    return time.perf_counter() - start


def timed(fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--methods", type=int, default=20)
    p.add_argument("--bootstrap", type=int, default=1000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        start = time.perf_counter()
        n = generate(root, args.records, args.methods)
        size = sum(f.stat().st_size for f in root.rglob("*.jsonl")) / 2**20
        print(f"generated {n:,} records ({size:,.0f} MiB JSONL) in {time.perf_counter() - start:.1f} s")
        baseline = pandas_load(root)
        raw = timed(load_runs, [root])
        command = [sys.executable, "-m", "apm.cli.reduce", str(root), "--out", str(Path(tmp) / "out"),
                   "--bootstrap", str(args.bootstrap)]
        reduce_s = timed(subprocess.run, command, check=True)
    ratio = reduce_s / baseline
    cpu = platform.processor() or platform.machine()
    print(f"machine: {platform.platform()}, {cpu}, Python {platform.python_version()}")
    print(f"pd.read_json(lines=True), all files: {baseline:.1f} s")
    print(f"apm.reduce.load_runs (orjson) alone: {raw:.1f} s")
    print(f"apm-reduce end to end (bootstrap {args.bootstrap}, tables, figures): {reduce_s:.1f} s")
    print(f"ratio apm-reduce / pandas load: {ratio:.2f} (target <= 3)")
    return 0 if ratio <= 3.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
