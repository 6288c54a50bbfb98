"""The online inference protocol (Section 3.3) over one shard of trajectories.

Per trajectory, sessions run in their real order: first the session's instances (concurrently,
bounded by ``concurrency``; each sees prior-session memory and its own causal prefix, and nothing
another instance said), then the memory protocol's session-end update, whose bytes on disk are
measured. Trajectories run concurrently with each other. Records are appended as instances finish;
a rerun skips keys already on record and sessions whose memory update is on record.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apm.backbones.base import GenerationSettings, Response
from apm.data import clock
from apm.data.instances import Instance, Turn, candidate_instances
from apm.data.model import Release, Session, Trajectory
from apm.memory.base import MemoryProtocol, SessionView, state_bytes
from apm.prompts import turn_text
from apm.runner.context import Prepared, prepare
from apm.runner.outcome import judge_output
from apm.runner.records import JsonlAppender, done_keys, latest_by, read_folder
from apm.video.cache import FrameCache
from apm.video.decode import VideoDecodeError
from apm.video.frames import Frame
from apm.video.select import CausalityError, uniform_indices


@dataclass
class RunSetup:
    """Everything one run needs; built by the Hydra app or by tests."""

    release: Release
    run_dir: Path
    run_info: dict[str, str]
    """``dataset``, ``memory``, ``backbone``, ``config_hash``: copied onto every record."""
    protocol: MemoryProtocol
    backbone: Any
    writer: Any
    cache: FrameCache
    max_frames: int
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    concurrency: int = 8
    shard_label: str = "shard-0-of-1"
    rerun_errors: bool = False


@dataclass
class RunStats:
    total: int = 0
    skipped: int = 0
    new: int = 0
    errors: int = 0
    sessions_updated: int = 0
    started: float = field(default_factory=time.perf_counter)


OnRecord = Callable[[dict[str, Any]], None]


def session_interactions(release: Release, trajectory: Trajectory, session: Session) -> tuple[Turn, ...]:
    """User turns during ``session``: ERA questions and registrations, once each, in time order."""
    turns: set[Turn] = set()
    for c in release.candidates:
        if c.trajectory_id != trajectory.trajectory_id:
            continue
        for inst in candidate_instances(c, trajectory):
            turns.update(
                Turn(t.kind, t.time, turn_text(t, inst))
                for t in inst.turns
                if t.kind != "interval_marker" and session.start <= t.time <= session.end
            )
    return tuple(sorted(turns, key=lambda t: (t.time, t.kind, t.text)))


def session_frames(cache: FrameCache, session: Session, limit: int) -> tuple[Frame, ...]:
    """The whole session (up to its end time, however long the video) sampled uniformly to ``limit``."""
    if limit <= 0:
        return ()
    entry = cache.entry(session.video)
    within = min(entry.count, int(session.duration * entry.rate) + 1)  # never past the session's end
    chosen = uniform_indices(within, limit)
    return tuple(
        Frame(session.key, float(entry.offset(i)), session.start + int(entry.offset(i)), jpeg)
        for i, jpeg in zip(chosen, entry.jpegs(chosen))
    )


def make_record(setup: RunSetup, inst: Instance, trajectory: Trajectory, prepared: Prepared | None,
                response: Response, prep_s: float, memory_bytes: int) -> dict[str, Any]:
    """The output contract for one instance (``docs/records.md``)."""
    session = trajectory.session(inst.session)
    outcome = judge_output(inst, response.text, response.finish_reason) if response.ok else None
    parsed = outcome.parsed if outcome else None
    prefix_s = float(inst.probe_time - session.start)
    ttft = prep_s + response.ttft_s if response.ttft_s is not None else None
    fields = inst.candidate.fields
    return {
        "key": inst.key,
        "run": setup.run_info,
        "trajectory_id": inst.trajectory_id,
        "day_id": session.day_id,
        "session_id": session.session_id,
        "candidate_id": inst.candidate_id,
        "task": inst.task,
        "family": inst.family,
        "probe_id": inst.probe_id,
        "polarity": inst.polarity,
        "probe_time": clock.label(inst.probe_time),
        "window_start": clock.label(inst.window_start) if inst.window_start is not None else None,
        "evidence_available": inst.evidence_available,
        "original_candidate_id": fields.get("original_candidate_id") if inst.task == "EA" else None,
        "correct_option": inst.correct_option,
        "output": response.text,
        "finish_reason": response.finish_reason,
        "parse_status": parsed.status if parsed else None,
        "parse_error": parsed.error if parsed else None,
        "decision": parsed.decision if parsed else None,
        "answer": parsed.answer if parsed else None,
        "correct": outcome.correct if outcome else None,
        "gate_pass": outcome.gate_pass if outcome else None,
        "frames": [f.describe() for f in prepared.frames] if prepared else [],
        "prompt_version": _prompt_version(),
        "prompt_sha256": prepared.prompt_sha256 if prepared else None,
        "latency": {
            "prep_s": prep_s,
            "ttft_s": ttft,
            "total_s": prep_s + response.total_s,
            "prefix_s": prefix_s,
            "rtf": ttft / prefix_s if ttft is not None and prefix_s > 0 else None,
            "engine_ttft_s": response.ttft_s,
            "engine_total_s": response.total_s,
            "elapsed_s": response.elapsed_s,
        },
        "tokens": {"prompt": response.prompt_tokens, "completion": response.completion_tokens},
        "truncation": response.truncation.to_dict() if response.truncation else None,
        "memory_bytes": memory_bytes,
        "error": response.error,
        "attempts": response.attempts,
        "shard": setup.shard_label,
    }


def _prompt_version() -> str:
    from apm.prompts import PROMPT_VERSION

    return PROMPT_VERSION


def frame_budget(backbone: Any, default: int) -> int:
    """Frames ``backbone`` takes per request: its ``max_frames`` (0: none), or ``default`` if unset."""
    cap = getattr(backbone, "max_frames", None)
    return default if cap is None else int(cap)


async def _prebuild(cache: FrameCache, trajectories: list[Trajectory]) -> None:
    """Decode every session of the shard before any instance is timed (TTFT and RTF exclude decoding)."""
    def build(session: Session) -> None:
        try:
            cache.entry(session.video)
        except VideoDecodeError:
            pass  # each instance that needs this video records the error itself

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="apm-decode") as pool:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(pool, build, x) for t in trajectories for x in t.sessions))


def memory_on_record(memory_dir: Path, rerun_errors: bool) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest memory line of each (trajectory, session) (``latest_by``); with ``rerun_errors``,
    failed updates are left out, so they are done again."""
    last = latest_by(read_folder(memory_dir), lambda m: (m["trajectory_id"], f"{m['day_id']}/{m['session_id']}"))
    return {k: m for k, m in last.items() if not (rerun_errors and m.get("error"))}


def _after_failed_update(inst: Instance, memory_done: dict, trajectories: list[Trajectory]) -> bool:
    """Whether ``inst`` saw memory that a failed (now redone) session update should have written."""
    traj = next(t for t in trajectories if t.trajectory_id == inst.trajectory_id)
    index = traj.session(inst.session).index
    return any((traj.trajectory_id, s.key) not in memory_done for s in traj.sessions[:index])


class OnlineRun:
    """One run of the online protocol; ``await OnlineRun(setup).run(trajectories, instances)``."""

    def __init__(self, setup: RunSetup, on_record: OnRecord | None = None, progress: Any = None):
        self.setup = setup
        self.on_record = on_record or (lambda rec: None)
        self.progress = progress
        self.stats = RunStats()
        self._sem = asyncio.Semaphore(setup.concurrency)

    async def run(self, trajectories: list[Trajectory], instances: list[Instance]) -> RunStats:
        s = self.setup
        done = done_keys(s.run_dir / "records", s.rerun_errors)
        memory_done = memory_on_record(s.run_dir / "memory", s.rerun_errors)
        if s.rerun_errors:
            done -= {i.key for i in instances if _after_failed_update(i, memory_done, trajectories)}
        by_session: dict[tuple[str, str], list[Instance]] = defaultdict(list)
        for inst in instances:
            by_session[(inst.trajectory_id, inst.session)].append(inst)
        self.stats.total = len(instances)
        self.stats.skipped = sum(1 for i in instances if i.key in done)
        if self.progress is not None:
            self.progress.reset(total=self.stats.total)
            self.progress.update(self.stats.skipped)
        self._records = JsonlAppender(s.run_dir / "records" / f"{s.shard_label}.jsonl")
        self._memory = JsonlAppender(s.run_dir / "memory" / f"{s.shard_label}.jsonl")
        await _prebuild(s.cache, trajectories)
        try:
            await asyncio.gather(*(self._trajectory(t, by_session, done, memory_done) for t in trajectories))
        finally:
            self._records.close()
            self._memory.close()
        return self.stats

    async def _trajectory(self, traj: Trajectory, by_session, done: set[str], memory_done: dict) -> None:
        s = self.setup
        state_dir = s.run_dir / "memory_state" / traj.trajectory_id
        memory_bytes = 0
        prior_seconds = 0
        for session in traj.sessions:
            todo = [i for i in by_session.get((traj.trajectory_id, session.key), []) if i.key not in done]
            await asyncio.gather(*(self._instance(traj, i, state_dir, memory_bytes) for i in todo))
            prior_seconds += session.duration
            key = (traj.trajectory_id, session.key)
            if key in memory_done:
                memory_bytes = memory_done[key]["bytes"]
                continue
            memory_bytes = await self._end_session(traj, session, state_dir, prior_seconds)

    async def _end_session(self, traj: Trajectory, session: Session, state_dir: Path, prior_seconds: int) -> int:
        s = self.setup
        limit = min(s.protocol.session_frames, frame_budget(s.writer, s.protocol.session_frames))
        frames = await asyncio.to_thread(session_frames, s.cache, session, limit)
        view = SessionView(traj, session, session_interactions(s.release, traj, session), frames)
        began = time.perf_counter()
        facts = await s.protocol.end_session(view, state_dir, s.writer)
        update_s = time.perf_counter() - began
        size = state_bytes(state_dir)
        error = facts.pop("error", None)
        self.stats.errors += error is not None
        self._memory.append({
            "run": s.run_info,
            "trajectory_id": traj.trajectory_id,
            "day_id": session.day_id,
            "session_id": session.session_id,
            "session_index": session.index,
            "bytes": size,
            "prior_hours": prior_seconds / 3600,
            "update_s": update_s,
            "error": error,
            **facts,
        })
        self.stats.sessions_updated += 1
        return size

    def _prepare(self, traj: Trajectory, inst: Instance, state_dir: Path) -> Prepared:
        s = self.setup
        history = s.protocol.history(inst, traj, state_dir)
        return prepare(s.cache, traj, inst, history, s.max_frames, s.settings)

    async def _instance(self, traj: Trajectory, inst: Instance, state_dir: Path, memory_bytes: int) -> None:
        s = self.setup
        async with self._sem:
            began = time.perf_counter()
            prepared = None
            try:
                prepared = await asyncio.to_thread(self._prepare, traj, inst, state_dir)
            except CausalityError:
                raise  # a protocol that shows the future is a bug: stop rather than record invalid results
            except Exception as e:  # noqa: BLE001 — a bad video, an unreadable state file: recorded; the run goes on
                response = Response(error=f"preparation failed: {type(e).__name__}: {e}", attempts=0)
                prep_s = time.perf_counter() - began
            else:
                prep_s = time.perf_counter() - began
                response = await s.backbone.generate(prepared.request)
        record = make_record(s, inst, traj, prepared, response, prep_s, memory_bytes)
        self._records.append(record)
        self.stats.new += 1
        self.stats.errors += record["error"] is not None
        if self.progress is not None:
            self.progress.update(1)
        self.on_record(record)
