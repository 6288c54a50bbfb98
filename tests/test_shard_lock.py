"""One writer per shard: a second job on a shard is refused (naming the holder), a lock left by a
killed job is taken over, and two writers of one session's memory never trip over each other's
temporary files."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.backbones import FlakyWriter
from support.runner import compose_run, records, run

from apm.backbones.baselines import RandomBaseline
from apm.data.instances import Turn
from apm.data.model import Session, Trajectory
from apm.memory.base import SessionView
from apm.memory.text import TextSummary
from apm.memory.video import RawVideo
from apm.runner.app import run_dir_of

REPO = Path(__file__).resolve().parents[1]


class Sluggish(RandomBaseline):
    """The random baseline at half a second a request: a run that holds its shard for a while."""

    async def answer_instance(self, request, instance):
        await asyncio.sleep(0.5)
        return await super().answer_instance(request, instance)


def _apm_run(tiny: Path, out: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests")}
    return subprocess.Popen(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={out}",
         f"frames.cache_dir={cache}", "logging.wandb.mode=disabled", "logging.progress=false",
         "memory=none", "backbone=random", "concurrency=1", "backbone._target_=test_shard_lock.Sluggish"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _wait_for(condition, seconds: float) -> None:
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_a_second_job_on_a_shard_is_refused_naming_the_holder(tiny, tmp_path):
    out, cache = tmp_path / "runs", tmp_path / "cache"
    first = _apm_run(tiny, out, cache)
    try:
        _wait_for(lambda: any(p.stat().st_size for p in out.rglob("records/*.jsonl")), 120)
        second = _apm_run(tiny, out, cache)
        try:
            said, _ = second.communicate(timeout=60)
        finally:
            second.kill()
        assert second.returncode != 0, said
        last = said.strip().splitlines()[-1]
        assert f"pid {first.pid}" in last and socket.gethostname() in last, said
        assert first.poll() is None  # the holder is not disturbed
    finally:
        first.kill()
        first.wait()


def test_a_lock_left_by_a_killed_job_is_taken_over(tiny, tmp_path):
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=none", "backbone=random",
                                                                    "dataset.tasks=[ER]"])
    lock = run_dir_of(cfg) / "locks" / "shard-0-of-1.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from apm.records.lock import WriterLock;"
         "lock = WriterLock(Path(sys.argv[1]), {'host': 'elsewhere', 'pid': 1}).acquire();"
         "print('held', flush=True); time.sleep(600)", str(lock)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert "elsewhere" in lock.read_text()  # the dead holder's lock file is still there
    run_dir = run(cfg)
    assert records(run_dir)
    assert f'"pid": {os.getpid()}' in lock.read_text()


def test_a_held_lock_is_refused_at_once_or_waited_for(tmp_path):
    from apm.records.lock import LockHeld, WriterLock

    path = tmp_path / "locks" / "x.lock"
    with WriterLock(path, {"host": "h1", "pid": 11}):
        with pytest.raises(LockHeld) as refused:
            WriterLock(path, {"host": "h2", "pid": 22}).acquire()
        assert refused.value.holder == {"host": "h1", "pid": 11}
    first = WriterLock(path, {"host": "h1", "pid": 11}).acquire()
    threading.Timer(0.3, first.release).start()
    began = time.perf_counter()
    with WriterLock(path, {"host": "h2", "pid": 22}, wait=True):
        assert time.perf_counter() - began >= 0.25
        assert '"pid": 22' in path.read_text()


@pytest.mark.parametrize("protocol", [TextSummary(), RawVideo(), RawVideo(keep_sessions=1)],
                         ids=["text", "video", "restricted"])
def test_two_writers_of_one_session_never_crash_on_temporary_files(tmp_path, protocol):
    video = tmp_path / "v.mp4"
    video.write_bytes(os.urandom(4096))
    sessions = tuple(Session("T", "DAY1", f"S00{i}", i, 60 * i, 60 * i + 10, video) for i in range(2))
    trajectory = Trajectory("T", "test", "race", sessions)
    state_dir = tmp_path / "state"
    crashes: list[BaseException] = []

    def write(view: SessionView, gate: threading.Barrier) -> None:
        gate.wait()
        try:
            asyncio.run(protocol.end_session(view, state_dir, FlakyWriter()))
        except BaseException as e:  # noqa: BLE001 — counted
            crashes.append(e)

    for i in range(150):
        session = sessions[i % 2]
        view = SessionView(trajectory, session, (Turn("registration", session.start + 1, "remind me"),))
        gate = threading.Barrier(2)
        writers = [threading.Thread(target=write, args=(view, gate)) for _ in range(2)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
    assert not crashes, f"{len(crashes)} crashes, e.g. {crashes[0]!r}"
    assert not list(state_dir.glob("*.tmp"))


def test_a_refused_job_leaves_no_trace_and_the_lock_is_reentrant(tiny, tmp_path):
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", ["memory=none", "backbone=random",
                                                                    "dataset.tasks=[ER]"])
    run_dir = run(cfg)  # takes the shard twice in one process (the job, then the run inside it)
    lock = run_dir / "locks" / "shard-0-of-1.lock"
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p != lock}
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from apm.records.lock import WriterLock;"
         "lock = WriterLock(Path(sys.argv[1]), {'host': 'elsewhere', 'pid': 1}).acquire();"
         "print('held', flush=True); time.sleep(600)", str(lock)],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SystemExit, match="host elsewhere pid 1"):
            run(cfg)
        after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p != lock}
        assert after == before  # no config, manifest, ledger event or record was touched
    finally:
        holder.kill()
        holder.wait()


RACE = ["memory=raw_video", "backbone=random", "backbone._target_=support.backbones.HeldWhileFlagged",
        "dataset.tasks=[ER,CT,PRM]"]
"""Jobs whose memory state is measured (raw video: deterministic bytes and digests)."""


def _job(tiny: Path, out: Path, cache: Path, hold: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "APM_TEST_HOLD": str(hold)}
    return subprocess.Popen(
        [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={out}",
         f"frames.cache_dir={cache}", "logging.wandb.mode=disabled", "logging.progress=false", *RACE, *extra],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _memory_and_records(run_dir: Path) -> tuple[dict, dict, int]:
    """Each session's newest state (bytes, digest), each key's memory as shown, and the record lines."""
    from apm.records.jsonl import latest_records
    from apm.runner.online import newest_memory_lines

    memory = {k: (m["bytes"], m["state_sha256"]) for k, m in newest_memory_lines(run_dir / "memory").items()}
    shown = {k: (r["memory_bytes"], r["memory_sha256"]) for k, r in latest_records(run_dir / "records").items()}
    return memory, shown, len(records(run_dir))


@pytest.fixture(scope="module")
def single_run(tiny, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    return _memory_and_records(run(compose_run(tiny, tmp / "runs", tmp / "cache", RACE)))


@pytest.mark.parametrize("repeat", range(3))
def test_jobs_of_two_shard_counts_at_once_leave_a_single_runs_memory(tiny, tmp_path, single_run, repeat):
    """Issue 20: shard.count=2 and shard.count=3 started together on one run dir: the second to start
    is refused (naming the other count) while the first holds; finishing the first's count gives the
    single run's storage, state digests and no duplicate calls."""
    out, cache, hold = tmp_path / "runs", tmp_path / "cache", tmp_path / "hold"
    hold.touch()
    jobs = {count: _job(tiny, out, cache, hold, f"shard.count={count}", "shard.index=0") for count in (2, 3)}
    try:
        _wait_for(lambda: any(job.poll() is not None for job in jobs.values()), 90)
    finally:
        hold.unlink()
        said = {count: job.communicate(timeout=300)[0] for count, job in jobs.items()}
    refused = [count for count, job in jobs.items() if job.returncode != 0]
    assert len(refused) == 1, said
    winner = ({2, 3} - set(refused)).pop()
    line = said[refused[0]].strip().splitlines()[-1]
    assert f"jobs of shard.count={winner} (host {socket.gethostname()} pid {jobs[winner].pid})" in line, line
    assert f"a job of shard.count={refused[0]}" in line, line
    run_dir = next(out.rglob("config.json")).parent
    assert not (run_dir / "jobs" / f"shard-0-of-{refused[0]}").exists()  # the refused job left nothing
    for index in range(1, winner):
        run(compose_run(tiny, out, cache, [*RACE, f"shard.count={winner}", f"shard.index={index}"]))
    memory, shown, lines = _memory_and_records(run_dir)
    assert memory == single_run[0]
    assert shown == single_run[1]
    assert lines == len(shown) == single_run[2]



def test_another_count_is_refused_naming_a_job_that_has_joined_but_not_yet_taken_its_shard(tmp_path):
    """The race CI met: a job of shard.count=2 has joined its count's group but not yet taken its shard's
    lock when a job of shard.count=3 is refused; the refusal still names it (host and pid), not "a job"."""
    from types import SimpleNamespace

    from apm.records.lock import GroupHeld, WriterLock, take_group
    from apm.runner.shard_lock import other_count_line

    joined, shard = take_group(tmp_path, "count-2"), WriterLock(tmp_path / "shard-0-of-2.lock", {"host": "node12",
                                                                                                 "pid": 4242})
    taking = threading.Timer(0.3, shard.acquire)  # the other job, a moment later: its shard's lock
    try:
        with pytest.raises(GroupHeld) as refused:
            take_group(tmp_path, "count-3")
        taking.start()
        line = other_count_line(SimpleNamespace(run_dir=tmp_path, shard_label="shard-0-of-3"), refused.value)
    finally:
        taking.join()
        shard.release()
        joined.release()
    assert "jobs of shard.count=2 (host node12 pid 4242); a job of shard.count=3" in line, line
