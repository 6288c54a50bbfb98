"""Benchmark: ``event_memory``'s harness CPU per probe on paper-length sessions (issue 37, item 4).

``apm-run`` of ``memory=event_memory`` with the instant ``random`` backbone and writer, so that only the
harness and the system are timed (frame feed, scene cuts, BM25 retrieval, records, start-up), over a
``paper``-shaped synthetic release; beside it, in the same minutes, the same run of a streaming system that
keeps nothing (the replay's floor), and optionally the same command in another checkout (``--baseline``,
e.g. ``main``'s). CPU is the user + system seconds of the ``apm-run`` process and of every process under it
(``os.wait4`` of the child, and :class:`process_tree.TreePeak` for workers it did not reap), ÷ probes. The
release and its frame cache are built first and not timed. Run::

    PYTHONPATH=$PWD .venv/bin/python bench/bench_event_memory.py --work /tmp/bem [--trajectories 2] \\
        [--baseline /path/to/main-checkout] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from host import cpu_model
from process_tree import TreePeak

from apm.backbones.base import Backbone, Request, Response
from apm.synth import generate

HERE = Path(__file__).resolve().parents[1]


class FixedWriter(Backbone):
    """An instant writer: every event's description is the same sentence (no model in the measurement)."""

    name = "Fixed writer (bench)"

    def __init__(self, name: str | None = None, max_frames: int | None = None) -> None:
        self.max_frames = max_frames

    async def generate(self, request: Request) -> Response:
        return Response(text="The wearer walks past a red mug on a wooden table.", finish_reason="stop")


BUILD = """import sys; from pathlib import Path
from apm.data.release import load_release; from apm.video.cache import build_release_cache
build_release_cache(load_release(Path(sys.argv[1]) / "release"), Path(sys.argv[1]) / "cache", progress=False)"""

SYSTEMS = {
    "event_memory": ["memory=event_memory", "+backbone@writer=always_silent",
                     "writer._target_=bench_event_memory.FixedWriter"],
    "null stream (the replay's floor)": ["memory=none", "memory._target_=bench_streaming.NullStream",
                                         "~memory.recent_frames", "memory.name='Null stream (bench)'"],
}



def timed_run(checkout: Path, work: Path, overrides: list[str]) -> tuple[float, float, int]:
    """One ``apm-run`` importing ``checkout``: (CPU s of its process tree, wall s, probes recorded)."""
    out = work / "runs"
    shutil.rmtree(out, ignore_errors=True)  # a kept run would resume and time nothing
    args = [f"dataset.root={work / 'release'}", f"output_root={out}", f"frames.cache_dir={work / 'cache'}",
            "backbone=random", "logging.wandb.mode=disabled", "logging.progress=false", *overrides]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(HERE / "bench")])}
    began = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", "from apm.cli.run import main; main()", *args], env=env,
                             cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with TreePeak(child.pid) as tree:
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status):
        said = child.stderr.read().decode()[-2000:] if child.stderr else ""
        raise SystemExit(f"apm-run failed in {checkout}: {said}")
    reaped = usage.ru_utime + usage.ru_stime
    unreaped = sum(cpu for pid, cpu in tree.used.items() if pid != child.pid)  # workers it did not wait for
    probes = sum(len(p.read_text().splitlines()) for p in out.rglob("records/*.jsonl"))
    return reaped + unreaped, wall, probes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True, help="release, cache and runs (a release there is reused)")
    p.add_argument("--trajectories", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline", type=Path, help="another checkout of apm (e.g. main's), run in turn")
    args = p.parse_args()
    work = args.work.resolve()
    if not (work / "release" / "trajectories.json").is_file():
        generate(work / "release", seed=0, scale="paper", limit_trajectories=args.trajectories, progress=False)
    checkouts = {"this checkout": HERE, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    for checkout in checkouts.values():  # each checkout's own cache format, built before anything is timed
        subprocess.run([sys.executable, "-c", BUILD, str(work)], env={**os.environ, "PYTHONPATH": str(checkout)},
                       check=True)
    load_before = os.getloadavg()[0]
    samples: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    for _ in range(args.repeats):  # the rows take turns, so a change of load falls on all of them
        for system, overrides in SYSTEMS.items():
            for name, checkout in checkouts.items():
                samples.setdefault((system, name), []).append(timed_run(checkout, work, overrides))
    load_after = os.getloadavg()[0]
    print(f"Machine: {cpu_model()}, {os.cpu_count()} CPUs; 1-minute load average {load_before:.2f} before, "
          f"{load_after:.2f} after; {args.trajectories} paper-shaped trajectories; median of {args.repeats}.\n")
    print("| system | code | probes | CPU ms / probe (whole run, every process) | wall (s) |")
    print("| --- | --- | ---: | ---: | ---: |")
    rows = []
    for (system, name), runs in samples.items():
        cpu = statistics.median(c for c, _, _ in runs)
        wall = statistics.median(w for _, w, _ in runs)
        probes = runs[0][2]
        rows.append({"system": system, "code": name, "probes": probes, "cpu_ms_per_probe": 1000 * cpu / probes,
                     "wall_s": wall, "runs": runs})
        print(f"| {system} | {name} | {probes} | {1000 * cpu / probes:.1f} | {wall:.1f} |")
    (work / "bench_event_memory.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
