"""The online inference protocol (Section 3.3) over one shard of trajectories.

Per trajectory, sessions run in their real order: first the session's instances (concurrently,
bounded by ``concurrency``; each sees prior-session memory and its own causal prefix, and nothing
another instance said), then the memory protocol's session-end update, whose bytes on disk are
measured. Trajectories run concurrently with each other. Records are appended as instances finish.

A shard is written by one process at a time (``holding_shard``). A rerun first puts each trajectory's
state folder back to the newest state on record that it still holds whole (``restore_state``), then
updates every session after it again, and skips an instance only if its record was made with the
memory it would be shown now (``memory_sha256``), so a lost or changed state is redone with every
instance that saw it (docs/records.md, "Resume checks the memory state").
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, GenerationSettings, Response, Truncation, ask
from apm.backbones.fail_fast import FailFast
from apm.data import clock
from apm.data.frames import Frame
from apm.data.instances import Instance, Turn, candidate_instances
from apm.data.model import Release, Session, Trajectory
from apm.memory.base import MemoryProtocol, SessionView, StateManifest, manifest_sha256, state_manifest
from apm.prompts import turn_text
from apm.records.jsonl import JsonlAppender, latest_by, latest_records, read_folder
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
from apm.runner import causality, latency
from apm.runner.config import FrameLayout, Rerun
from apm.runner.context import Prepared
from apm.runner.ledger import scheduler_job_id
from apm.runner.outcome import apply_gate
from apm.runner.request import prepare_instance, state_dir_of
from apm.streaming.base import StreamingSystem
from apm.video.cache import FrameCache
from apm.video.decode import VideoDecodeError
from apm.video.select import CausalityError, uniform_indices


@dataclass
class RunSetup:
    """Everything one run needs; built by the Hydra app or by tests."""

    release: Release
    run_dir: Path
    run_info: dict[str, Any]
    """``dataset``, ``memory``, ``backbone``, ``config_hash``: copied onto every record."""
    protocol: MemoryProtocol | StreamingSystem
    backbone: Backbone
    writer: Backbone
    cache: FrameCache
    max_frames: int
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    layout: FrameLayout = FrameLayout.uniform
    """How each request's frames are chosen and sent (``frames.layout``)."""
    concurrency: int = 8
    shard_label: str = "shard-0-of-1"
    rerun: Rerun | None = None
    """``errors``: what failed runs again; ``all``: that and whatever other code made (``RunConfig.rerun``)."""
    wait_for_lock: bool = False
    """Whether a job on a shard another job holds waits for it, instead of stopping at once."""
    fail_fast: int = 3
    """Stop after this many consecutive auth / not-found / connection failures (0: never)."""
    latency_mode: bool = False
    """Isolated latency: memory updates wait for the instance slots too, and keys whose newest record
    was measured under load run again (``apm.runner.latency``)."""


@dataclass
class RunStats:
    total: int = 0
    skipped: int = 0
    new: int = 0
    errors: int = 0
    sessions_updated: int = 0
    refused: list[str] = field(default_factory=list)
    """Why each instance refused for causality was refused (its record's error says it too)."""
    started: float = field(default_factory=time.perf_counter)


OnRecord = Callable[[dict[str, Any]], None]

NO_MEMORY: dict[str, Any] = {"bytes": 0, "state_sha256": manifest_sha256({})}
"""What an instance of a trajectory's first session is shown: the empty state."""


def session_interactions(release: Release, trajectory: Trajectory, session: Session) -> tuple[Turn, ...]:
    """User turns during ``session``: ERA questions and registrations, once per candidate, in time
    order, each with the candidate it belongs to (a memory shows an instance only its own)."""
    turns: set[Turn] = set()
    for c in release.candidates:
        if c.trajectory_id != trajectory.trajectory_id:
            continue
        for inst in candidate_instances(c, trajectory):
            turns.update(
                replace(t, text=turn_text(t, inst))
                for t in inst.turns
                if t.kind != "interval_marker" and session.start <= t.time <= session.end
            )
    return tuple(sorted(turns, key=lambda t: (t.time, t.kind, t.text, t.candidate_id)))


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
                response: Response, prep_s: float, shown: dict[str, Any], in_flight: int = 0) -> dict[str, Any]:
    """The output contract for one instance (``docs/records.md``); ``shown``: the memory line of the
    state it saw (``NO_MEMORY`` in a trajectory's first session); ``in_flight``: requests in flight when
    it was sent, itself included."""
    session = trajectory.session(inst.session)
    outcome = apply_gate(inst, response.text, response.finish_reason) if response.ok else None
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
            **latency.conditions(setup, in_flight, response),
        },
        "tokens": {"prompt": response.prompt_tokens, "completion": response.completion_tokens},
        "truncation": response.truncation.to_dict() if response.truncation else None,
        "memory_bytes": shown["bytes"],
        "memory_sha256": shown["state_sha256"],
        "error": response.error,
        "attempts": response.attempts,
        "shard": setup.shard_label,
    }


def _prompt_version() -> str:
    from apm.prompts import PROMPT_VERSION

    return PROMPT_VERSION


def frame_budget(backbone: Backbone, default: int) -> int:
    """Frames ``backbone`` takes per request: its ``max_frames`` (0: none), or ``default`` if unset."""
    cap = backbone.max_frames
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


def newest_memory_lines(memory_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest memory line of each (trajectory, session) (``latest_by``), failed updates included."""
    return latest_by(read_folder(memory_dir), lambda m: (m["trajectory_id"], f"{m['day_id']}/{m['session_id']}"))


def recorded_lines(traj: Trajectory, memory_done: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """The memory lines of the trajectory's first sessions, as far as each has one with its ``state``
    (a line written before states were recorded cannot be checked, so it counts as missing)."""
    lines = []
    for session in traj.sessions:
        line = memory_done.get((traj.trajectory_id, session.key))
        if line is None or "state" not in line:
            break
        lines.append(line)
    return lines


def restore_state(state_dir: Path, states: list[StateManifest]) -> int:
    """Put ``state_dir`` back to the newest of ``states`` (the state after each session, in order) that
    it still holds file for file (size and SHA-256), deleting every other file; return how many
    sessions that state covers: the index of the first session whose update is to be (re)done."""
    held = state_manifest(state_dir)
    kept = next((n for n in range(len(states), 0, -1)
                 if all(held.get(path) == entry for path, entry in states[n - 1].items())), 0)
    wanted = states[kept - 1] if kept else {}
    for path in list(state_dir.rglob("*")) if state_dir.exists() else []:
        if path.is_file() and path.relative_to(state_dir).as_posix() not in wanted:
            path.unlink()
    return kept


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


def other_count_line(setup: RunSetup, held: GroupHeld) -> str:
    """The refusal of a job whose shard count differs from that of the jobs writing the run dir now,
    naming one of them (their shards' lock files say who they are)."""
    count = held.path.name.removesuffix(GROUP_SUFFIX).removeprefix("count-")
    locks = sorted(held.path.parent.glob(f"shard-*-of-{count}.lock"))
    holder = next((read_holder(p) for p in locks if held_elsewhere(p)), None)
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
    locks = setup.run_dir / "locks"
    try:
        count = take_group(locks, f"count-{shard_count(setup.shard_label)}")
    except GroupHeld as held:
        raise ShardBusy(other_count_line(setup, held)) from None
    lock = WriterLock(locks / f"{setup.shard_label}.lock", lock_holder(), setup.wait_for_lock, reentrant=True)
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


_PRISTINE: dict[int, tuple[StreamingSystem, StreamingSystem]] = {}
"""Each streaming system's copy as configured, taken the first time a run uses it (keyed by identity, the
system kept beside its copy): a later run of the same system in this process (``latency.sample``'s
isolated pass) reuses it, since by then the system has observed sessions and holds its started backbone."""


def pristine(system: StreamingSystem) -> StreamingSystem:
    """``system`` as it was before its first run observed anything."""
    if id(system) not in _PRISTINE:
        _PRISTINE[id(system)] = (system, copy.deepcopy(system))
    return _PRISTINE[id(system)][1]


class OnlineRun:
    """One run of the online protocol; ``await OnlineRun(setup).run(trajectories, instances)``."""

    def __init__(self, setup: RunSetup, on_record: OnRecord | None = None, progress: Any = None):
        self.setup = setup
        self.on_record = on_record or (lambda rec: None)
        self.progress = progress
        self.stats = RunStats()
        self._sem = asyncio.Semaphore(setup.concurrency)
        self._in_flight = 0
        self._fail_fast = FailFast(setup.fail_fast, setup.backbone.advice)
        self._pristine = pristine(setup.protocol) if isinstance(setup.protocol, StreamingSystem) else None

    def fresh_system(self) -> StreamingSystem:
        """A copy of the run's streaming system as configured, before it observed anything: what a
        restricted instance is answered by, so nothing it kept from other sessions can reach it."""
        assert self._pristine is not None  # only a streaming system's replay asks for one
        return copy.deepcopy(self._pristine)

    async def run(self, trajectories: list[Trajectory], instances: list[Instance]) -> RunStats:
        with holding_shard(self.setup):
            return await self._run(trajectories, instances)

    async def _run(self, trajectories: list[Trajectory], instances: list[Instance]) -> RunStats:
        s = self.setup
        self._newest_records = latest_records(s.run_dir / "records")
        self._newest_memory = newest_memory_lines(s.run_dir / "memory")
        on_record = {k: rec for k, rec in self._newest_records.items()
                     if not self._redo(rec) and not latency.needs_isolated(s, rec) and not causality.refused(rec)}
        memory_done = {k: m for k, m in self._newest_memory.items() if not self._redo(m)}
        by_session: dict[tuple[str, str], list[Instance]] = defaultdict(list)
        for inst in instances:
            by_session[(inst.trajectory_id, inst.session)].append(inst)
        self.stats.total = len(instances)
        if self.progress is not None:
            self.progress.reset(total=self.stats.total)
        self._records = JsonlAppender(s.run_dir / "records" / f"{s.shard_label}.jsonl")
        self._memory = JsonlAppender(s.run_dir / "memory" / f"{s.shard_label}.jsonl")
        await _prebuild(s.cache, trajectories)
        tasks = [asyncio.ensure_future(self._trajectory(t, by_session, on_record, memory_done)) for t in trajectories]
        try:
            await asyncio.gather(*tasks)
        finally:  # a run that stops (fail fast, a causality bug) cancels the rest before the files close
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._records.close()
            self._memory.close()
        return self.stats

    def _redo(self, line: dict[str, Any]) -> bool:
        """Whether ``rerun`` runs a line's instance or update again: ``errors``, a line with an error;
        ``all``, that too and any line made by other code (``run.code``), so a requeued or repeated
        ``rerun=all`` resumes what it has redone instead of starting over."""
        s = self.setup
        failed = s.rerun in (Rerun.errors, Rerun.all) and line.get("error") is not None
        return failed or (s.rerun == Rerun.all and line["run"].get("code") != s.run_info.get("code"))

    async def _trajectory(self, traj: Trajectory, by_session, on_record: dict, memory_done: dict) -> None:
        s = self.setup
        if isinstance(s.protocol, StreamingSystem):  # it ingests the stream itself: apm.runner.streaming
            from apm.runner.streaming import replay_trajectory

            return await replay_trajectory(self, traj, by_session, on_record, memory_done)
        state_dir = state_dir_of(s, traj)
        recorded = recorded_lines(traj, memory_done)
        kept = await asyncio.to_thread(restore_state, state_dir, [line["state"] for line in recorded])
        shown = NO_MEMORY
        prior_seconds = 0
        for session in traj.sessions:
            todo = self._todo(by_session.get((traj.trajectory_id, session.key), []), on_record, shown)
            await asyncio.gather(*(self._instance(traj, i, state_dir, shown) for i in todo))
            prior_seconds += session.duration
            if session.index < kept:
                shown = recorded[session.index]
            else:
                shown = await self._end_session(traj, session, state_dir, prior_seconds)

    def _todo(self, instances: list[Instance], on_record: dict, shown: dict[str, Any]) -> list[Instance]:
        """The instances still to run: all but those on record with the memory they would be shown now."""
        todo = [i for i in instances if on_record.get(i.key, {}).get("memory_sha256") != shown["state_sha256"]]
        self.stats.skipped += len(instances) - len(todo)
        if self.progress is not None:
            self.progress.update(len(instances) - len(todo))
        return todo

    async def _end_session(self, traj: Trajectory, session: Session, state_dir: Path,
                           prior_seconds: int) -> dict[str, Any]:
        """Run the protocol's session-end update and append its memory line (returned): the state it
        left, file by file, and its size."""
        s = self.setup
        protocol = s.protocol
        assert isinstance(protocol, MemoryProtocol)  # a StreamingSystem is replayed by apm.runner.streaming instead
        limit = min(protocol.session_frames, frame_budget(s.writer, protocol.session_frames))
        frames = await asyncio.to_thread(session_frames, s.cache, session, limit)
        view = SessionView(traj, session, session_interactions(s.release, traj, session), frames)
        async with self._sem if s.latency_mode else nullcontext():  # isolated: nothing runs beside it
            began = time.perf_counter()
            facts = await protocol.end_session(view, state_dir, s.writer if protocol.needs_writer else None)
            update_s = time.perf_counter() - began
        return await self._memory_line(traj, session, state_dir, prior_seconds, update_s, facts)

    async def _memory_line(self, traj: Trajectory, session: Session, state_dir: Path, prior_seconds: int,
                           update_s: float, facts: dict[str, Any]) -> dict[str, Any]:
        """Measure the state a session's update left and append its memory line (returned)."""
        s = self.setup
        state = await asyncio.to_thread(state_manifest, state_dir)
        error = facts.pop("error", None)
        self.stats.errors += error is not None
        line = self._memory.append({
            "run": s.run_info,
            "trajectory_id": traj.trajectory_id,
            "day_id": session.day_id,
            "session_id": session.session_id,
            "session_index": session.index,
            "bytes": sum(entry["bytes"] for entry in state.values()),
            "prior_hours": prior_seconds / 3600,
            "update_s": update_s,
            "error": error,
            **facts,
            "state": state,
            "state_sha256": manifest_sha256(state),
        }, supersedes=self._newest_memory.get((traj.trajectory_id, session.key)))
        self.stats.sessions_updated += 1
        return line

    def _prepare(self, traj: Trajectory, inst: Instance, state_dir: Path) -> tuple[Prepared, Truncation | None]:
        return prepare_instance(self.setup, traj, inst, state_dir)

    async def _instance(self, traj: Trajectory, inst: Instance, state_dir: Path, shown: dict[str, Any]) -> None:
        s = self.setup
        async with self._sem:
            began = time.perf_counter()
            prepared, budget, in_flight = None, None, 0
            try:
                prepared, budget = await asyncio.to_thread(self._prepare, traj, inst, state_dir)
            except CausalityError as e:  # refused: an error on its record, and the run exits non-zero
                response = self.refuse(e)
                prep_s = time.perf_counter() - began
            except Exception as e:  # noqa: BLE001 — a bad video, an unreadable state file: recorded; the run goes on
                response = Response(error=f"preparation failed: {type(e).__name__}: {e}", attempts=0)
                prep_s = time.perf_counter() - began
            else:
                prep_s = time.perf_counter() - began
                self._in_flight += 1
                in_flight = self._in_flight
                try:
                    response = await ask(s.backbone, prepared.request, inst)
                finally:
                    self._in_flight -= 1
                response = replace(response, truncation=response.truncation or budget)
        self._keep(make_record(s, inst, traj, prepared, response, prep_s, shown, in_flight), response)

    def refuse(self, error: CausalityError) -> Response:
        """The response of an instance refused for causality: never asked; counted for the run's exit."""
        self.stats.refused.append(str(error))
        return Response(error=f"{causality.REFUSED}{error}", attempts=0)

    def _keep(self, record: dict[str, Any], response: Response) -> None:
        """Append an instance's record, count it and pass it on; stop when the endpoint keeps failing."""
        self._records.append(record, supersedes=self._newest_records.get(record["key"]))
        self.stats.new += 1
        self.stats.errors += record["error"] is not None
        if self.progress is not None:
            self.progress.update(1)
        self.on_record(record)
        self._fail_fast.observe(response)
