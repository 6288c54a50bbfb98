"""``apm-status`` on a sweep built on disk: one shard finished, one running, one failed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from apm.cli import status as apm_status
from apm.records.rundir import RunDir
from apm.runner import ledger
from apm.scale import scheduler, status
from apm.testing import fixtures

KEYS = {i: [f"T{i}/c{j}/query" for j in range(10)] for i in range(3)}


def record(key: str, error: str | None = None) -> dict:
    """A complete record line for ``key`` (readers skip incomplete ones)."""
    trajectory, candidate, probe = key.split("/")
    return fixtures.record("ER", candidate, probe, trajectory, error=error)


def write_shard(run: Path, index: int, done: int, errors: int, events: list[dict]) -> None:
    label = f"shard-{index}-of-3"
    folder = RunDir(run).job(label)
    folder.mkdir(parents=True)
    keys = KEYS[index]
    (folder / "plan.json").write_text(json.dumps({"shard": label, "instances": len(keys), "keys": keys}))
    (folder / "ledger.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "records").mkdir(exist_ok=True)
    lines = [record(k, "boom" if n < errors else None) for n, k in enumerate(keys[:done])]
    (run / "records" / f"{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    run = tmp_path / "synthetic" / "simplestream" / "random-abc"
    host, now = socket.gethostname(), time.time()
    started = lambda job, pid, t: {"event": "started", "time": t, "job_id": job, "host": host, "pid": pid,  # noqa: E731
                                   "on_record": 0}
    write_shard(run, 0, 10, 2, [started("7_0", 1, now - 60), {"event": "ended", "time": now, "job_id": "7_0",
                                                                 "status": "finished"}])
    write_shard(run, 1, 4, 0, [started("7_1", os.getpid(), now - 20)])
    write_shard(run, 2, 3, 0, [started("7_2", dead_pid(), now - 30)])
    return tmp_path


def by_shard(root: Path) -> dict[str, status.ShardStatus]:
    return {r.shard: r for r in status.sweep_status(root)}


def test_status_from_records_and_ledger_alone(sweep, monkeypatch):
    monkeypatch.setattr(scheduler, "available", lambda: False)
    rows = by_shard(sweep)
    assert set(rows) == {"shard-0-of-3", "shard-1-of-3", "shard-2-of-3"}
    done, running, failed = rows["shard-0-of-3"], rows["shard-1-of-3"], rows["shard-2-of-3"]
    assert (done.state, done.done, done.total, done.errors, done.failed) == ("done with errors", 10, 10, 2, False)
    assert (running.state, running.done, running.total, running.active) == ("running", 4, 10, True)
    assert running.eta_s == pytest.approx(30, rel=0.2)  # 4 records in 20 s, 6 to go
    assert (failed.state, failed.done, failed.failed, failed.eta_s) == ("died", 3, True, None)
    assert {r.run for r in rows.values()} == {"synthetic/simplestream/random-abc"}


def test_status_asks_the_scheduler_when_there_is_one(sweep, monkeypatch):
    asked: list[str] = []
    said = {"7_0": "COMPLETED", "7_1": "PENDING", "7_2": "CANCELLED"}
    monkeypatch.setattr(scheduler, "states", lambda ids: asked.extend(ids) or said)
    rows = by_shard(sweep)
    assert sorted(asked) == sorted(said)  # every shard's last job, asked about
    # the scheduler's word over the ledger's (which says running and died): a finished shard stays done
    assert [rows[f"shard-{i}-of-3"].state for i in range(3)] == ["done with errors", "pending", "cancelled"]
    assert rows["shard-2-of-3"].failed and not rows["shard-1-of-3"].failed


def test_cli_table_json_and_exit_code(sweep, monkeypatch, capsys):
    monkeypatch.setattr(scheduler, "available", lambda: False)
    assert apm_status.main([str(sweep)]) == 1  # a failed shard
    table = capsys.readouterr().out
    assert "3 shards: 1 died, 1 done with errors, 1 running · 17/30 instances · 2 errors" in table
    assert apm_status.main([str(sweep), "--json"]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["shard"], r["state"], r["done"], r["failed"]) for r in rows] == [
        ("shard-0-of-3", "done with errors", 10, False), ("shard-1-of-3", "running", 4, False),
        ("shard-2-of-3", "died", 3, True)]


def test_shard_without_plan_counts_its_own_records(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, "available", lambda: False)
    records = tmp_path / "run" / "records"
    records.mkdir(parents=True)
    (records / "shard-0-of-2.jsonl").write_text(2 * (json.dumps(record("T0/a/query")) + "\n"))
    row, other = status.sweep_status(tmp_path)
    assert (row.shard, row.done, row.total, row.duplicates, row.state) == ("shard-0-of-2", 1, None, 1, "not started")
    assert (other.shard, other.state, other.failed) == ("shard-1-of-2", "missing", True)  # never started


def test_a_plan_that_cannot_be_written_leaves_no_temporary_file(tmp_path):
    """The plan is written through ``apm.records.atomic`` (a writer's own temporary name, flushed to
    disk, removed when the rename fails), not a hand-rolled ``.plan.json.<pid>``."""
    shard = "shard-0-of-1"
    blocked = RunDir(tmp_path).plan(shard)
    (blocked / "in-the-way").mkdir(parents=True)  # a folder where plan.json goes: the rename fails
    with pytest.raises(OSError):
        ledger.job_started(tmp_path, shard, [], [], selected=0, population=0)
    assert sorted(p.name for p in blocked.parent.iterdir()) == [blocked.name]
