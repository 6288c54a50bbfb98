"""``apm-publish`` at the paper's scale: peak memory of the whole process tree (the W&B service
included), wall time and bytes written, for paper-shaped records, beside a bare read of the same
records (docs/performance.md, "apm-publish at the paper's scale"; issue 37, item 3).

``--methods`` methods of ``--per-method`` records each are synthesised (:func:`synthesise`): the
paper's task mix (:func:`apm.testing.fixtures.synthetic_lines`), judgements of the gate-passing probes,
and on every record a frame list of the method's size (:data:`FRAMES`: SimpleStream's 4 and 32, raw
video's 128 and 1,024, …), a text-summary-sized answer and a kept prompt (a system text, the
session's summary, the frames, the question; ``RUN_DIR/prompts/``) that reproduces its digest. Then,
each in a subprocess: the baseline — every record line decoded once with orjson, nothing kept
(:data:`BASELINE`) — and ``apm-publish ROOT --mode offline --bootstrap N --dir OUT``;
for each the wall seconds, the peak of the summed RSS of its process tree (sampled every
``--sample-s``) and the bytes it wrote (each file once, however many hard links name it). The records
carry no release (no ``config.json``), so the tables have no question texts and no thumbnails.

    .venv/bin/python bench/bench_publish.py [--methods 10] [--per-method 5600] [--work DIR] [--bootstrap 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from host import cpu_model

from apm.records.prompts import canon_digest, keep
from apm.records.rundir import RunDir
from apm.testing.fixtures import judgement, run_info, synthetic_lines, write_jsonl

FRAMES = (4, 32, 1024, 128, 1024, 128, 1024, 4, 4, 64)
"""Frames per request of the methods, in turn (bench/bench_view.py's ``PAPER_METHODS``)."""
SYSTEM = "You are a proactive assistant watching the user's egocentric video. " * 20
ANSWER = (
    "Answer: B. The summary of the earlier sessions says the user left the keys on the kitchen counter "
    "beside the kettle, and the recent frames show the counter with the kettle but no keys. "
) * 3


def _frames(n: int, session: str) -> list[dict[str, Any]]:
    return [
        {"session": session, "offset": float(i), "wall_clock": f"DAY1 11:{i // 60 % 60:02d}:{i % 60:02d}"}
        for i in range(n)
    ]


def paper_shaped(run_dir: Path, line: dict[str, Any], frames: int) -> dict[str, Any]:
    """``line`` with the method's frame list, a long answer and a kept prompt that reproduces its digest."""
    shown = _frames(frames, f"{line['day_id']}/{line['session_id']}")
    summary = f"Summary of {line['trajectory_id']} so far: " + "the user cooked, cleaned and went out. " * 40
    canon = [
        ["system", [SYSTEM]],
        ["user", [summary, *([f["session"], f["offset"]] for f in shown), f"Question of {line['key']}?"]],
    ]
    return {
        **line,
        "frames": shown,
        "output": ANSWER,
        "prompt": keep(run_dir, canon),
        "prompt_sha256": canon_digest(canon),
    }


def synthesise(root: Path, methods: int, per_method: int) -> int:
    """``methods`` run dirs under ``root`` of about ``per_method`` paper-shaped records each; the records written."""
    total = 0
    for m in range(methods):
        run_dir, rng = root / f"method{m:02d}", np.random.default_rng(m)
        run = run_info(memory=f"method{m:02d}")
        lines = synthetic_lines(rng, run, trajectories=10**6, skill=0.6)
        kept = [paper_shaped(run_dir, line, FRAMES[m % len(FRAMES)]) for _, line in zip(range(per_method), lines)]
        write_jsonl(RunDir(run_dir).records / "shard-0.jsonl", kept)
        judged = [r for r in kept if r["gate_pass"]]
        write_jsonl(RunDir(run_dir).judgements / "judge.jsonl", (judgement(r, 4) for r in judged))
        total += len(kept)
    return total


BASELINE = ("import sys, pathlib, orjson\n"
            "files = sorted(pathlib.Path(sys.argv[1]).rglob('records/*.jsonl'))\n"
            "print(sum(1 for p in files for line in p.open('rb') if orjson.loads(line)))\n")
"""The baseline: every record line read and decoded once, one at a time, nothing kept (the floor of any
reader of these records; ``pandas.read_json`` of them all holds them: 2.9 GiB for 14,000, 11 GiB and
growing when stopped at 56,000)."""


def tree_rss(proc: psutil.Process) -> int:
    """The summed RSS of a process and all its descendants (0 once it is gone)."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measured(command: list[str], env: dict[str, str], sample_s: float) -> tuple[float, int, str]:
    """Run ``command``: its wall seconds, the peak summed RSS of its process tree (bytes) and its output."""
    began = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        proc, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            peak = max(peak, tree_rss(proc))
            time.sleep(sample_s)
        wall = time.perf_counter() - began
        out.seek(0)
        text = out.read()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} … exited {child.returncode}:\n{text[-3000:]}")
    return wall, peak, text


def bytes_under(folder: Path) -> int:
    """The bytes of the files under ``folder``, each file once however many hard links name it."""
    sizes = {(s.st_dev, s.st_ino): s.st_size for s in (p.stat() for p in folder.rglob("*") if p.is_file())}
    return sum(sizes.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", type=int, default=10)
    p.add_argument("--per-method", type=int, default=5600)
    p.add_argument("--bootstrap", type=int, default=0, help="apm-publish's replicates")
    p.add_argument("--sample-s", type=float, default=0.1)
    p.add_argument("--work", type=Path, help="keep the records and the publish folder here")
    p.add_argument("--reuse", action="store_true", help="publish the records already under --work/runs")
    args = p.parse_args()
    load = os.getloadavg()
    with nullcontext(args.work) if args.work else tempfile.TemporaryDirectory() as work:
        work = Path(work).resolve()
        runs, out, home = work / "runs", work / "publish", work / "wandb-home"
        for folder in (out, home) if args.reuse else (runs, out, home):
            shutil.rmtree(folder, ignore_errors=True)
        began = time.perf_counter()
        count = (sum(1 for p in runs.rglob("records/*.jsonl") for _ in p.open("rb")) if args.reuse
                 else synthesise(runs, args.methods, args.per_method))
        made = time.perf_counter() - began
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")},
            "WANDB_SILENT": "true",
            **{v: str(home / v.lower()) for v in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR")},
        }
        base = measured([sys.executable, "-c", BASELINE, str(runs)], env, args.sample_s)
        pub = measured(
            [
                sys.executable,
                "-m",
                "apm.cli.publish",
                str(runs),
                "--mode",
                "offline",
                "--dir",
                str(out),
                "--bootstrap",
                str(args.bootstrap),
            ],
            env,
            args.sample_s,
        )
        result = {
            "command": f"python {' '.join(sys.argv)}",
            "cpu": cpu_model(),
            "load_at_start": load,
            "load_at_end": os.getloadavg(),
            "records": count,
            "records_bytes": bytes_under(runs),
            "synthesis_s": made,
            "baseline": {"wall_s": base[0], "peak_rss_mib": base[1] / 2**20},
            "apm_publish": {
                "wall_s": pub[0],
                "peak_rss_mib": pub[1] / 2**20,
                "bytes_written": bytes_under(out) + bytes_under(home),
            },
        }
        pub_ = result["apm_publish"]
        pub_["ms_per_record"] = 1000 * pub[0] / count
        pub_["bytes_per_record"] = pub_["bytes_written"] / count
    print(json.dumps(result, indent=1))



if __name__ == "__main__":
    main()
