"""Benchmark: ``apm.reduce.load_runs`` on a few thousand records, this checkout against another (a baseline).

Writes synthetic runs (``apm.testing.fixtures.synthetic_run``) once, and a copy of them as a runner before
format versions wrote them (no ``format_version``, none of the fields that came later: every line is migrated
on read), then times ``load_runs`` on each in a child process per checkout (``PYTHONPATH``), the checkouts
taking turns ``--repeats`` times; each figure is the median of ``load_runs``' CPU time. Run:
``PYTHONPATH=$PWD .venv/bin/python bench/bench_record_load.py --baseline /path/to/other/checkout
[--records 5000] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from apm.records.version import BEFORE_VERSION_1, FIELD
from apm.testing import fixtures

RECORDS_PER_TRAJECTORY = 62
"""Mean records per synthetic trajectory (as ``bench_reduce``)."""
TIMED = (
    "import sys, time; from apm.reduce.load import load_runs; t = time.process_time(); "
    "runs = load_runs([sys.argv[1]]); print(time.process_time() - t, len(runs.records))"
)
"""``load_runs`` in a child: its CPU seconds (this process's ``time.process_time``: on a shared machine the
wall time is mostly other jobs') and the records kept."""


def generate(root: Path, records: int, methods: int) -> None:
    """``methods`` runs totalling about ``records`` records, with their judgements and memory lines."""
    per_method = max(1, records // (methods * RECORDS_PER_TRAJECTORY))
    for i in range(methods):
        run = fixtures.run_info("raw_video", f"backbone-{i}")
        fixtures.synthetic_run(root / f"run{i:02d}", run, per_method, seed=i, shards=2)


def _older(block: dict, later: dict) -> dict:
    """``block`` without the fields :data:`BEFORE_VERSION_1` says older lines lack (nested tables: inside)."""
    out = {}
    for name, value in block.items():
        if name in later and not isinstance(later[name], dict):
            continue
        out[name] = _older(value, later[name]) if name in later and isinstance(value, dict) else value
    return out


def as_older(root: Path, to: Path) -> None:
    """A copy of the runs under ``root`` at ``to`` as written before format versions."""
    for path in root.rglob("*.jsonl"):
        kind = path.parent.name
        lines = [json.loads(raw) for raw in path.read_text().splitlines()]
        older = [{k: v for k, v in _older(line, BEFORE_VERSION_1[kind]).items() if k != FIELD} for line in lines]
        target = to / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(json.dumps(line) + "\n" for line in older))


def timed(checkout: Path, root: Path) -> tuple[float, int]:
    """``load_runs`` CPU seconds on ``root`` (and records kept) in a child process importing ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", TIMED, str(root)], env=env, cwd=checkout, check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path, required=True, help="another checkout of apm (e.g. main's)")
    p.add_argument("--records", type=int, default=5000)
    p.add_argument("--methods", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        current, older = Path(tmp) / "current", Path(tmp) / "older"
        generate(current, args.records, args.methods)
        as_older(current, older)
        times: dict[tuple[str, str], list[float]] = {}
        kept: dict[tuple[str, str], int] = {}
        for _ in range(args.repeats):
            for name, checkout in (("baseline", args.baseline.resolve()), ("this", here)):
                for data, root in (("current lines", current), ("older lines", older)):
                    seconds, kept[name, data] = timed(checkout, root)
                    times.setdefault((name, data), []).append(seconds)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    for (name, data), seconds in times.items():
        median = statistics.median(seconds)
        print(
            f"{name:9} {data:14} {kept[name, data]:6} records kept  median CPU {median * 1000:7.1f} ms  "
            f"(runs: {', '.join(f'{s * 1000:.0f}' for s in seconds)})"
        )


if __name__ == "__main__":
    main()
