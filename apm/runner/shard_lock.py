"""Who writes a shard (docs/scale.md): one process at a time holds the shard's lock, and the jobs writing
a run dir at once share one shard count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from apm.records.lock import (
    GROUP_SUFFIX,
    GroupHeld,
    LockHeld,
    WriterLock,
    held_elsewhere,
    read_holder,
    take_group,
    this_process,
)
from apm.records.rundir import RunDir
from apm.runner.ledger import scheduler_job_id
from apm.runner.setup import RunSetup


class ShardBusy(SystemExit):
    """Another process holds the shard: this one stops with the one line that names it (exit status 1)."""


def lock_holder() -> dict[str, Any]:
    """Who this process is, for the shard's lock file: host, pid, SLURM job id and since when."""
    return {**this_process(), "job_id": scheduler_job_id()}


def busy_line(setup: RunSetup, holder: dict[str, Any] | None) -> str:
    """The refusal of a second job on a shard, naming the job that holds it."""
    who = (f"host {holder.get('host')} pid {holder.get('pid')} (SLURM job {holder.get('job_id') or '-'}, "
           f"since {holder.get('since')})" if holder else "a job that is only now writing its lock file")
    return f"apm-run: {setup.shard_label} of {setup.run_dir} is being written by {who}; not starting a second writer"


def shard_count(label: str) -> int:
    """The shard count of a shard label (``shard-<i>-of-<n>`` → n)."""
    return int(label.rsplit("-of-", 1)[1])


NAMING_WAIT_S = 2.0
"""How long a refusal waits for a job of the running count to be named: a job joins its count's group
just before it takes its shard's lock, the file that names it."""


def running_holder(locks: Path, count: str) -> dict[str, Any] | None:
    """A job of shard count ``count`` holding its shard's lock, as that lock file names it; waited for
    up to ``NAMING_WAIT_S`` (``None`` after), since the group is joined a moment before the shard."""
    deadline = time.monotonic() + NAMING_WAIT_S
    while True:
        for path in sorted(locks.glob(f"shard-*-of-{count}.lock")):
            if held_elsewhere(path) and (holder := read_holder(path)):
                return holder
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def other_count_line(setup: RunSetup, held: GroupHeld) -> str:
    """The refusal of a job whose shard count differs from that of the jobs writing the run dir now,
    naming one of them (their shards' lock files say who they are)."""
    count = held.path.name.removesuffix(GROUP_SUFFIX).removeprefix("count-")
    holder = running_holder(held.path.parent, count)
    who = f"host {holder.get('host')} pid {holder.get('pid')}" if holder else "a job"
    return (f"apm-run: {setup.run_dir} is being written by jobs of shard.count={count} ({who}); a job of "
            f"shard.count={shard_count(setup.shard_label)} would share their trajectories' memory state; "
            "not starting (run it once they have ended)")


@contextmanager
def holding_shard(setup: RunSetup) -> Iterator[None]:
    """Hold the run dir for this job's shard count (``locks/count-<n>.group.lock``, shared by the jobs
    of one count, refused to any other count) and the shard's lock (``locks/<shard>.lock``) while its
    records, memory lines and state are written: a second job on the shard raises ``ShardBusy`` at
    once, or waits with ``wait_for_lock``; a job of another shard count is refused at once."""
    locks = RunDir(setup.run_dir).locks
    try:
        count = take_group(locks, f"count-{shard_count(setup.shard_label)}")
    except GroupHeld as held:
        raise ShardBusy(other_count_line(setup, held)) from None
    lock = WriterLock(RunDir(setup.run_dir).shard_lock(setup.shard_label), lock_holder(), setup.wait_for_lock,
                      reentrant=True)
    try:
        lock.acquire()
    except LockHeld as held:
        count.release()
        raise ShardBusy(busy_line(setup, held.holder)) from None
    try:
        yield
    finally:
        lock.release()
        count.release()
