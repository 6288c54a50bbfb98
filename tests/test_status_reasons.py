"""``apm-status`` says, per failed, cancelled or held shard, why (its last error line, the scheduler's
reason), where to look (its log) and what resumes it; ``dup`` counts only true duplicates, not the
re-measurements that supersede a key's record (``latency.sample``: docs/records.md, "Latency")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.runner import records

from apm.cli import status as apm_status
from apm.records.rundir import RunDir
from apm.scale import status
from apm.synth import generate
from apm.testing import fixtures

KEYS = {i: [f"T{i}/c{j}/query" for j in range(4)] for i in range(3)}
FAKE_SACCT = """#!/bin/sh
case "$*" in
  *JobID,State*) printf '7_0|COMPLETED\\n7_2|CANCELLED by 0\\n' ;;
  *JobID,Reason*) printf '7_0|None\\n7_2|None\\n' ;;
esac
"""
FAKE_SQUEUE = """#!/bin/sh
case "$*" in
  *%T*) printf '7_1|PENDING\\n' ;;
  *%r*) printf '7_1|BeginTime\\n' ;;
esac
"""


def _shard(run: Path, index: int, done: int, events: list[dict]) -> None:
    label = f"shard-{index}-of-3"
    folder = RunDir(run).job(label)
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps({"shard": label, "instances": 4, "keys": KEYS[index]}))
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "records").mkdir(exist_ok=True)
    lines = [fixtures.record("ER", k.split("/")[1], "query", k.split("/")[0]) for k in KEYS[index][:done]]
    (run / "records" / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


@pytest.fixture
def sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three shards submitted by apm-submit as array 7: done, held back after a requeue (BeginTime), cancelled
    after an error; SLURM's ``sacct`` and ``squeue`` are scripts that say so."""
    root = tmp_path / "out"
    run = root / "synthetic" / "simplestream" / "random-abc"
    logs = root / ".submitit"
    now, host = time.time(), socket.gethostname()

    def submitted(i: int) -> dict:
        job = f"7_{i}"
        return {
            "event": "submitted",
            "time": now - 99,
            "job_id": job,
            "log": str(logs / job / f"{job}_0_log.out"),
            "overrides": ["hydra/launcher=slurm", "memory=none", "dataset.tasks=[ER]", f"shard.index={i}"],
        }

    started = {"event": "started", "time": now - 60, "host": host, "pid": 1, "on_record": 0}
    _shard(
        run,
        0,
        4,
        [
            submitted(0),
            {**started, "job_id": "7_0"},
            {"event": "ended", "time": now, "job_id": "7_0", "status": "finished"},
        ],
    )
    _shard(run, 1, 2, [submitted(1), {**started, "job_id": "7_1"}])
    _shard(run, 2, 1, [submitted(2), {**started, "job_id": "7_2"}])
    (logs / "7_2").mkdir(parents=True)
    (logs / "7_2" / "7_2_0_log.out").write_text("apm-run: starting\n")
    (logs / "7_2" / "7_2_0_log.err").write_text(
        "none · Random: 1/4 instances (25%), 0 errors, 0.50 inst/s, ETA 0:00:06\n"
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "none · Random: 1/4 instances (25%), 0 errors, 0.10 inst/s, ETA 0:00:30\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in (("sacct", FAKE_SACCT), ("squeue", FAKE_SQUEUE)):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return root


def test_a_cancelled_and_a_held_shard_say_why_where_and_how_to_resume(sweep: Path) -> None:
    rows = {r.shard: r for r in status.sweep_status(sweep)}
    done, held, cancelled = (rows[f"shard-{i}-of-3"] for i in range(3))
    assert (held.state, held.reason) == ("pending", "BeginTime")
    assert held.resume == "scontrol update JobId=7_1 StartTime=now"
    assert cancelled.state == "cancelled" and cancelled.reason is None  # sacct's "None" is no reason
    assert cancelled.last_error == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert cancelled.log == str(sweep / ".submitit" / "7_2" / "7_2_0_log.err")
    assert cancelled.resume == "apm-submit hydra/launcher=slurm memory=none 'dataset.tasks=[ER]' shard.index=2"
    assert (done.reason, done.last_error, done.log, done.resume) == (None, None, None, None)


def test_the_table_names_them_below_and_json_carries_them(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert apm_status.main([str(sweep)]) == 1
    table = capsys.readouterr().out.splitlines()
    at = table.index("synthetic/simplestream/random-abc shard-2-of-3: cancelled (job 7_2)")
    assert table[at + 1 : at + 4] == [
        "  last error: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        f"  log:        {sweep / '.submitit' / '7_2' / '7_2_0_log.err'}",
        "  resume:     apm-submit hydra/launcher=slurm memory=none 'dataset.tasks=[ER]' shard.index=2",
    ]
    held = table.index("synthetic/simplestream/random-abc shard-1-of-3: pending (job 7_1)")
    assert table[held + 1] == "  reason:     BeginTime (the scheduler's)"
    assert table[-1].startswith("3 shards: ")
    assert apm_status.main([str(sweep), "--json"]) == 1
    cancelled = json.loads(capsys.readouterr().out.splitlines()[2])
    assert cancelled["resume"].startswith("apm-submit ") and cancelled["log"].endswith("7_2_0_log.err")


def test_a_missing_shard_is_resumed_with_its_siblings_overrides(sweep: Path) -> None:
    run = sweep / "synthetic" / "simplestream" / "random-abc"
    for label in ("shard-1-of-3", "shard-2-of-3"):
        (run / "records" / f"{label}.jsonl").unlink()
        for path in sorted(RunDir(run).job(label).iterdir()):
            path.unlink()
        RunDir(run).job(label).rmdir()
    missing = {r.shard: r for r in status.sweep_status(sweep)}["shard-2-of-3"]
    assert missing.state == "missing"
    assert missing.resume == "apm-submit hydra/launcher=slurm memory=none 'dataset.tasks=[ER]' shard.index=2"


def test_latency_re_measurements_are_no_duplicates_and_a_job_records_its_log_and_overrides(
    tmp_path: Path, monkeypatch
) -> None:
    """A real job (``latency.sample=1``: one probe per task measured again in isolation) with its stderr in a
    file, as SLURM keeps it; a line written twice is a duplicate."""
    monkeypatch.setattr(status.scheduler, "available", lambda: False)
    release = generate(tmp_path / "rel", seed=3, scale="tiny")
    overrides = [
        f"dataset.root={release}",
        f"output_root={tmp_path / 'out'}",
        f"frames.cache_dir={tmp_path / 'c'}",
        "memory=none",
        "backbone=random",
        "latency.sample=1",
        "logging.wandb.mode=disabled",
        "preflight=false",
        "dataset.limit=12",
    ]
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    with open(tmp_path / "job.err", "w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "apm.cli.run", *overrides],
            stdout=subprocess.DEVNULL,
            stderr=log,
            timeout=300,
            env=env,
        )
    assert done.returncode == 0, (tmp_path / "job.err").read_text()[-2000:]
    (row,) = status.sweep_status(tmp_path / "out")
    run_dir = tmp_path / "out" / row.run
    remeasured = [r for r in records(run_dir) if r["latency"]["mode"] == "isolated"]
    assert remeasured and row.duplicates == 0
    started = next(e for e in status.ledger.read_events(run_dir, row.shard) if e["event"] == "started")
    assert started["log"] == str(tmp_path / "job.err")
    assert started["overrides"] == overrides

    again = next(run_dir.glob("records/*.jsonl"))
    again.write_text(again.read_text() + again.read_text().splitlines(keepends=True)[0])
    assert status.sweep_status(tmp_path / "out")[0].duplicates == 1
