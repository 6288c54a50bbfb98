"""Which line of a key wins: the greatest revision, then the newest write stamp, never the file name (a
rerun with another shard count writes to a file that sorts before the old ones) and never a clock that
runs ahead on another machine."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from support.runner import compose_run, release_sessions

from apm.backbones.base import Response
from apm.backbones.baselines import RandomBaseline
from apm.cli import status as apm_status
from apm.records.jsonl import JsonlAppender, done_keys, latest_records, read_folder
from apm.records.select import REVISION, STAMP, latest_by
from apm.reduce.load import load_memory, load_records
from apm.runner.app import run_async, run_dir_of
from apm.runner.online import newest_memory_lines
from apm.scale import scheduler, status
from apm.synth import generate

DOWN = "APM_TEST_BACKBONE_DOWN"


class DownWhileFlagged(RandomBaseline):
    """The random baseline, answering only errors while ``$APM_TEST_BACKBONE_DOWN`` names an existing file."""

    async def answer_instance(self, request, instance):
        if Path(os.environ.get(DOWN, "/nonexistent")).exists():
            return Response(error="HTTP 503: backbone unavailable")
        return await super().answer_instance(request, instance)


def write_lines(path: Path, lines: list[dict]) -> None:
    """``lines`` as a JSONL file (stamped or not, exactly as given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_greater_stamp_wins_whatever_the_file_name(tmp_path):
    write_lines(tmp_path / "shard-0-of-1.jsonl", [{"key": "a", "error": None, STAMP: 200}])
    write_lines(tmp_path / "shard-0-of-2.jsonl", [{"key": "a", "error": "503", STAMP: 100}])
    assert latest_records(tmp_path)["a"][STAMP] == 200
    assert done_keys(tmp_path, rerun_errors=True) == {"a"}


def test_stamped_beats_unstamped_and_unstamped_keep_file_order():
    lines = [{"key": "a", "n": 0, STAMP: 5}, {"key": "a", "n": 1},  # a line of an old run, read later
             {"key": "b", "n": 2}, {"key": "b", "n": 3},            # an old run only: the later line
             {"key": "c", "n": 4, STAMP: 9}, {"key": "c", "n": 5, STAMP: 9}]  # equal stamps: the later line
    assert {k: v["n"] for k, v in latest_by(lines, lambda line: line["key"]).items()} == {"a": 0, "b": 3, "c": 5}


def test_a_greater_revision_wins_whatever_the_stamps():
    """A line written after its key's line was read supersedes it, even from a clock an hour behind."""
    hour = 3_600 * 10**9
    lines = [{"key": "a", "n": 0, REVISION: 1, STAMP: 5 * hour}, {"key": "a", "n": 1, REVISION: 2, STAMP: 4 * hour},
             {"key": "b", "n": 2, STAMP: 9 * hour}, {"key": "b", "n": 3, REVISION: 1, STAMP: 1},  # before revisions
             {"key": "c", "n": 4, REVISION: 2, STAMP: 7}, {"key": "c", "n": 5, REVISION: 2, STAMP: 6}]  # tie: stamp
    assert {k: v["n"] for k, v in latest_by(lines, lambda line: line["key"]).items()} == {"a": 1, "b": 3, "c": 4}


def test_one_writer_never_ties_and_leaves_the_callers_object_alone(tmp_path, monkeypatch):
    monkeypatch.setattr("apm.records.jsonl.time.time_ns", lambda: 1_000)  # a clock that does not move
    w = JsonlAppender(tmp_path / "a.jsonl")
    other = JsonlAppender(tmp_path / "b.jsonl")
    record = {"key": "k", "error": None}
    written = [w.append(record), other.append(record), w.append(record)]
    w.close()
    other.close()
    assert record == {"key": "k", "error": None}
    stamps = [line[STAMP] for line in written]
    assert stamps == sorted(set(stamps)) and stamps[0] >= 1_000
    assert sorted(line[STAMP] for line in read_folder(tmp_path)) == stamps


@pytest.fixture
def tiny(tmp_path):
    return generate(tmp_path / "rel" / "tiny", seed=0, scale="tiny")


def test_rerun_with_fewer_shards_supersedes_the_errors_of_the_first(tiny, tmp_path, monkeypatch):
    """First run: 2 shards, backbone and summary writer down; rerun=errors with 1 shard and both up."""
    down = tmp_path / "down"
    down.touch()
    monkeypatch.setenv(DOWN, str(down))
    monkeypatch.setenv("APM_TEST_WRITER_DOWN", str(down))
    monkeypatch.setattr(scheduler, "available", lambda: False)
    overrides = ["memory=text_summary", "backbone=random", "backbone._target_=test_write_order.DownWhileFlagged",
                 "+backbone@writer=random", "writer._target_=support.backbones.FlakyWriter", "dataset.tasks=[ER,PRM]"]

    def run(*extra: str):
        cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*overrides, *extra])
        return asyncio.run(run_async(cfg)), run_dir_of(cfg)

    first = [run("shard.count=2", f"shard.index={i}")[0] for i in range(2)]
    assert all(s.new > 0 and s.errors == s.new and s.failed_updates == s.sessions_updated for s in first)
    down.unlink()
    rerun, run_dir = run("shard.count=1", "rerun=errors")
    assert rerun.new == sum(s.new for s in first)

    latest = latest_records(run_dir / "records")
    assert len(latest) == rerun.new and all(r["error"] is None for r in latest.values())
    memory = newest_memory_lines(run_dir / "memory")
    assert len(memory) == release_sessions(tiny) and all(m["bytes"] > 0 for m in memory.values())

    again, _ = run("shard.count=1", "rerun=errors")
    assert (again.new, again.sessions_updated, again.skipped) == (0, 0, rerun.new)

    rows = status.sweep_status(tmp_path / "runs")
    assert {r.shard for r in rows} == {"shard-0-of-1", "shard-0-of-2", "shard-1-of-2"}
    assert all(r.state == "done" and r.errors == 0 for r in rows)
    assert apm_status.main([str(tmp_path / "runs")]) == 0


def test_errors_from_a_node_an_hour_ahead_are_superseded_by_a_rerun(tiny, tmp_path, monkeypatch):
    """Issue 20: a first run on a node whose clock is 1 h ahead (backbone and writer down), then a
    ``rerun=errors`` rerun on a node with the right clock: the rerun's lines win, the run converges."""
    down = tmp_path / "down"
    down.touch()
    monkeypatch.setenv(DOWN, str(down))
    monkeypatch.setenv("APM_TEST_WRITER_DOWN", str(down))
    overrides = ["memory=text_summary", "backbone=random", "backbone._target_=test_write_order.DownWhileFlagged",
                 "+backbone@writer=random", "writer._target_=support.backbones.FlakyWriter", "dataset.tasks=[ER,PRM]"]
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", overrides)
    rerun_cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*overrides, "rerun=errors"])
    true_clock = __import__("time").time_ns
    monkeypatch.setattr("apm.records.jsonl.time.time_ns", lambda: true_clock() + 3_600 * 10**9)
    first = asyncio.run(run_async(cfg))
    assert first.new > 0 and first.errors == first.new and first.failed_updates == first.sessions_updated
    monkeypatch.setattr("apm.records.jsonl.time.time_ns", true_clock)  # the other node: its own process, its clock
    monkeypatch.setattr("apm.records.jsonl._last_stamp", 0)
    down.unlink()
    rerun = asyncio.run(run_async(rerun_cfg))
    assert rerun.new == first.new and rerun.errors == 0 == rerun.failed_updates
    run_dir = run_dir_of(cfg)
    assert all(r["error"] is None for r in latest_records(run_dir / "records").values())
    assert all(m["error"] is None for m in newest_memory_lines(run_dir / "memory").values())
    reduced = load_records([run_dir])
    assert len(reduced) == first.new and reduced["error"].isna().all()
    assert load_memory([run_dir])["bytes"].gt(0).all()
    again = asyncio.run(run_async(rerun_cfg))
    assert (again.new, again.sessions_updated, again.skipped) == (0, 0, first.new)
