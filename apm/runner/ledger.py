"""Per-shard job ledger in ``<run dir>/jobs/shard-<i>-of-<n>/``: the plan and the jobs' events.

``plan.json`` (written when a job starts) lists the shard's instance keys, so progress is known from
the records alone; it also says how many of them this job selected (``dataset.limit`` /
``dataset.trajectories``) and how many instances all shards of the config hold together
(``population``), so a reduction knows the whole a method should cover (docs/scores.md, "Coverage").
``ledger.jsonl`` gets one line per event: ``submitted`` (by ``apm-submit``), ``started`` and
``ended`` (by the runner), each with the scheduler's job id, so ``apm-status`` can ask SLURM about
the job, or judge it from the ledger where there is no scheduler.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any, Iterable

from apm.records.atomic import read_plan_file, write_json_atomically
from apm.records.jsonl import JsonlAppender, done_keys, read_jsonl
from apm.records.rundir import RunDir


def scheduler_job_id() -> str | None:
    """This process's SLURM job id (``<array job>_<task>`` for an array task), or None outside SLURM."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def append_event(run_dir: Path, shard: str, event: str, **fields: Any) -> None:
    """Append one event line (flushed and synced) to the shard's ledger."""
    appender = JsonlAppender(RunDir(Path(run_dir)).ledger(shard))
    try:
        appender.append({"event": event, "time": time.time(), **fields})
    finally:
        appender.close()


def read_events(run_dir: Path, shard: str) -> list[dict[str, Any]]:
    path = RunDir(Path(run_dir)).ledger(shard)
    return list(read_jsonl(path)) if path.exists() else []


def read_plan(run_dir: Path, shard: str) -> dict[str, Any] | None:
    path = RunDir(Path(run_dir)).plan(shard)
    return read_plan_file(path) if path.exists() else None


def job_started(run_dir: Path, shard: str, trajectories: Iterable[Any], instances: Iterable[Any],
                selected: int, population: int, overrides: list[str] | None = None) -> None:
    """Write the shard's plan and a ``started`` event (with how much was already on record, for ETAs; the
    file this process's stderr goes to, its ``log``; and the ``overrides`` it was started with, which
    ``apm-status`` hands to ``apm-submit`` to run it again)."""
    keys = [i.key for i in instances]
    trajectories = list(trajectories)
    plan = {
        "shard": shard,
        "instances": len(keys),
        "selected": selected,
        "population": population,
        "trajectories": [t.trajectory_id for t in trajectories],
        "video_seconds": sum(t.video_seconds for t in trajectories),
        "keys": keys,
    }
    run = RunDir(Path(run_dir))
    write_json_atomically(run.plan(shard), plan)
    on_record = len(done_keys(run.records) & set(keys))
    append_event(run_dir, shard, "started", job_id=scheduler_job_id(), host=socket.gethostname(), pid=os.getpid(),
                 restarts=int(os.environ.get("SLURM_RESTART_COUNT", 0)), on_record=on_record, log=stderr_file(),
                 overrides=overrides)


def stderr_file() -> str | None:
    """The file this process's stderr is written to (a SLURM job's log, ``2> log``), or None (a terminal,
    a pipe, a deleted file)."""
    try:
        path = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def job_ended(run_dir: Path, shard: str, stats: Any, error: BaseException | None) -> None:
    """An ``ended`` event: ``finished`` with the run's counts, or ``interrupted`` with why."""
    if stats is not None and error is None:
        append_event(run_dir, shard, "ended", job_id=scheduler_job_id(), status="finished",
                     new=stats.new, errors=stats.errors, failed_updates=stats.failed_updates)
    else:
        append_event(run_dir, shard, "ended", job_id=scheduler_job_id(), status="interrupted",
                     error=f"{type(error).__name__}: {error}" if error else None)
