"""The cost of the process boundary (docs/boundary.md): the same keyframe system in process
(``examples/keyframe_stream.py``) and as a sealed child process (``apm_child.template``), over the same
paper-shaped trajectory, on the instant ``random`` backbone so only the harness and the system are timed.

Per frame: the sessions' ``observe_s`` (every ``observe_frame`` and ``observe_turn``) over the frames fed.
Per probe: the run's wall time less every update and export, over the probes (the answer's round trip,
records, and the children's start-up and close spread over the probes). CPU: this process's and every
child process's (``RUSAGE_CHILDREN``: the sealed children and their launcher), per frame fed. The two
routes give the same records and state digests (checked here, as ``tests/test_boundary.py`` does).

    .venv/bin/python bench/bench_boundary.py [--scale paper] [--trajectories 1] [--repeat 3] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from bench_streaming import cpu_model, lines, run

from apm.boundary import sandbox
from apm.data.release import load_release
from apm.synth import generate
from apm.video.cache import build_release_cache

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ROUTES = {
    "in process (examples/keyframe_stream.py)": [f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]",
                                                 "memory=keyframe_stream"],
    "child process, sealed (apm_child.template)": ["memory=child_template"],
}


def cpu_s() -> float:
    """CPU seconds of this process and of every child it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(root: Path, work: Path, overrides: list[str]) -> dict[str, Any]:
    shutil.rmtree(work / "runs", ignore_errors=True)
    cpu = cpu_s()
    run_dir, wall = run(root, work / "runs", work / "cache", [*overrides, "backbone=random"])
    cpu = cpu_s() - cpu
    recs, memory = lines(run_dir, "records"), lines(run_dir, "memory")
    frames = sum(int(3600 * m["prior_hours"]) for m in memory if m["session_index"] == max(
        x["session_index"] for x in memory if x["trajectory_id"] == m["trajectory_id"]))
    observed = sum(m["observe_s"] for m in memory)
    exported = sum(m["update_s"] for m in memory)
    return {"probes": len(recs), "frames": frames, "wall_s": wall, "cpu_s": cpu,
            "per_frame_us": 1e6 * observed / frames, "per_probe_ms": 1000 * (wall - observed - exported) / len(recs),
            "cpu_per_frame_us": 1e6 * cpu / frames,
            "outputs": {r["key"]: (r["output"], r["prompt_sha256"], r["memory_sha256"]) for r in recs}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scale", default="paper")
    p.add_argument("--trajectories", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3, help="runs of each route, alternated")
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args()
    os.environ.setdefault("APM_CHILD_PYTHON", sys.executable)
    sys.path.insert(0, str(EXAMPLES))
    with nullcontext(args.work) if args.work else tempfile.TemporaryDirectory() as work:
        work = Path(work)
        root = work / "release"
        if not (work / "cache").is_dir():
            generate(root, seed=0, scale=args.scale, limit_trajectories=args.trajectories)
            build_release_cache(load_release(root), work / "cache", progress=False)
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in ROUTES}
        for _ in range(args.repeat):
            for label, overrides in ROUTES.items():
                results[label].append(measure(root, work, overrides))
    first, second = (rs[0]["outputs"] for rs in results.values())
    assert first == second, "the two routes gave different records"
    load = os.getloadavg()
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"Landlock ABI {sandbox.landlock_abi()}, load average {load[0]:.1f} {load[1]:.1f}")
    one = next(iter(results.values()))[0]
    print(f"{args.trajectories} {args.scale}-shaped trajectory: {one['frames']} frames fed, {one['probes']} probes; "
          f"medians of {args.repeat} alternated runs (range)")
    print("| route | per frame fed (µs) | per probe (ms) | CPU per frame, all processes (µs) | wall (s) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, rs in results.items():
        cells = []
        for key, fmt in (("per_frame_us", ".0f"), ("per_probe_ms", ".1f"), ("cpu_per_frame_us", ".0f"),
                         ("wall_s", ".2f")):
            values = [r[key] for r in rs]
            cells.append(f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("records: identical outputs, prompt digests and memory digests through both routes")


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"bench: {time.perf_counter() - began:.0f} s")
