"""The one replay loop of the online protocol (Section 3.3) over one shard of trajectories, for memory
protocols and streaming systems alike (docs/architecture.md, "The replay loop").

Per trajectory, sessions run in their real order. A method goes through each session as its kind says
(:class:`SessionReplay`): a streaming system (:class:`StreamReplay`) is fed the session's frames and
turns in wall-clock order, answers each probe from its state at the probe time and exports its state at
the session end; a memory protocol (:class:`ProtocolReplay`) is the degenerate system that ignores the
stream: its instances are answered concurrently (bounded by ``concurrency``) from the state on disk,
each seeing prior-session memory and its own causal prefix and nothing another instance said, then its
session-end update runs. Either way the state a session leaves is measured on disk and recorded as a
memory line. Trajectories run concurrently with each other. Records are appended as instances finish.

A shard is written by one process at a time (``apm.runner.shard_lock``). A rerun first puts each
trajectory's state folder back to the newest state on record that it still holds whole
(``restore_state``), then updates every session after it again, and skips an instance only if its record
was made with the memory it would be shown now (``memory_sha256``), so a lost or changed state is redone
with every instance that saw it (docs/records.md, "Resume checks the memory state").
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from apm.backbones.base import Request, Response, ask
from apm.backbones.fail_fast import FailFast
from apm.data.frames import Frame
from apm.data.instances import Instance, Turn, candidate_instances, instance_view
from apm.data.model import Release, Session, Trajectory
from apm.memory.base import History, MemoryProtocol, SessionView, StateManifest, manifest_sha256, state_manifest
from apm.prompts import turn_text
from apm.records.identity import differing
from apm.records.jsonl import JsonlAppender, latest_records, read_folder
from apm.records.model import InstanceRecord, MemoryLine
from apm.records.rundir import RunDir
from apm.records.select import latest_by
from apm.records.version import FORMAT_VERSION
from apm.runner import causality, latency, streaming
from apm.runner.causality import check_shown
from apm.runner.config import Rerun
from apm.runner.record import NO_MEMORY, make_record
from apm.runner.request import prepare_instance, state_dir_of
from apm.runner.setup import RunSetup, frame_budget
from apm.runner.shard_lock import holding_shard
from apm.runner.slots import SLOT_WAIT, Slots, SlottedBackbone
from apm.streaming.base import (
    Answer,
    Probe,
    SessionContext,
    StreamingSystem,
    fast_weights_apart,
    session_seed,
    storage_bytes,
)
from apm.video.cache import FrameCache
from apm.video.decode import VideoDecodeError
from apm.video.select import CausalityError, uniform_indices


@dataclass
class RunStats:
    total: int = 0
    skipped: int = 0
    new: int = 0
    errors: int = 0
    """New records with an error."""
    sessions_updated: int = 0
    failed_updates: int = 0
    """Memory updates of this run that failed (their lines carry the error)."""
    refused: list[str] = field(default_factory=list)
    """Why each instance refused for causality was refused (its record's error says it too)."""
    started: float = field(default_factory=time.perf_counter)


OnRecord = Callable[[dict[str, Any]], None]
BySession = dict[tuple[str, str], list[Instance]]
"""A run's instances by ``(trajectory_id, session key)``."""
OnRecordByKey = dict[str, dict[str, Any]]
"""The newest record of each key that the run does not redo."""


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


def session_frames(cache: FrameCache, session: Session, limit: int, previews: bool = False) -> tuple[Frame, ...]:
    """The whole session (up to its end time, however long the video) sampled uniformly to ``limit``; each
    frame with its preview if ``previews`` (the streaming feed: a system may look at every frame)."""
    if limit <= 0:
        return ()
    entry = cache.entry(session.video)
    within = min(entry.count, int(session.duration * entry.rate) + 1)  # never past the session's end
    chosen = uniform_indices(within, limit)
    read = entry.jpegs_with_previews(chosen) if previews else [(jpeg, None) for jpeg in entry.jpegs(chosen)]
    return tuple(
        Frame(session.key, offset, session.start + whole, jpeg, preview=preview)
        for (offset, whole), (jpeg, preview) in zip(map(entry.seconds, chosen), read)
    )


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


def longest_first(trajectories: list[Trajectory]) -> list[Trajectory]:
    """The order trajectories start in and their requests are served: the most video first (ties in the
    given order), so no long replay is left running alone at the end of a run."""
    return sorted(trajectories, key=lambda t: -sum(x.duration for x in t.sessions))


class OnlineRun:
    """One run of the online protocol; ``await OnlineRun(setup).run(trajectories, instances)``. What a
    method's session replay uses of it is public: ``setup``, ``stats``, ``slots`` (the instance slots),
    ``sending``, ``todo``, ``keep``, ``refuse`` and ``memory_line``."""

    def __init__(self, setup: RunSetup, on_record: OnRecord | None = None, progress: Any = None):
        self.setup = setup
        self.on_record = on_record or (lambda rec: None)
        self.progress = progress
        self.stats = RunStats()
        self.slots = Slots(setup.concurrency)
        """The ``concurrency`` slots every request (and, in latency mode, every update) takes one of."""
        self.priority: dict[str, int] = {}
        """Each trajectory's rank in :func:`longest_first`: its requests' priority for a slot."""
        self.in_flight = 0
        """Requests in flight now (recorded with each request: ``latency.in_flight``)."""
        self._fail_fast = FailFast(setup.fail_fast, setup.backbone.advice)
        self.method: SessionReplay = (StreamReplay(self, setup.protocol) if isinstance(setup.protocol, StreamingSystem)
                                      else ProtocolReplay(self, setup.protocol))

    async def run(self, trajectories: list[Trajectory], instances: list[Instance]) -> RunStats:
        with holding_shard(self.setup):
            return await self._run(trajectories, instances)

    async def _run(self, trajectories: list[Trajectory], instances: list[Instance]) -> RunStats:
        s = self.setup
        run = RunDir(s.run_dir)
        self._newest_records = latest_records(run.records)
        self._newest_memory = newest_memory_lines(run.memory)
        on_record = {k: rec for k, rec in self._newest_records.items()
                     if not self._redo(rec) and not latency.needs_isolated(s, rec) and not causality.refused(rec)}
        memory_done = {k: m for k, m in self._newest_memory.items() if not self._redo(m)}
        by_session: BySession = defaultdict(list)
        for inst in instances:
            by_session[(inst.trajectory_id, inst.session)].append(inst)
        self.stats.total = len(instances)
        if self.progress is not None:
            self.progress.reset(total=self.stats.total)
        self._records = JsonlAppender(run.records_file(s.shard_label))
        self._memory = JsonlAppender(run.memory_file(s.shard_label))
        await _prebuild(s.cache, trajectories)
        trajectories = longest_first(trajectories)
        self.priority = {t.trajectory_id: rank for rank, t in enumerate(trajectories)}
        tasks = [asyncio.ensure_future(self.trajectory(t, by_session, on_record, memory_done)) for t in trajectories]
        try:
            await asyncio.gather(*tasks)
        finally:  # a run that stops (fail fast, a causality bug) cancels the rest before the files close
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.method.close()
            self._records.close()
            self._memory.close()
        return self.stats

    def _redo(self, line: dict[str, Any]) -> bool:
        """Whether ``rerun`` runs a line's instance or update again: ``errors``, a line with an error;
        ``all``, that too and any line made by other code or another model (``run.code``, ``run.model``), so
        a requeued or repeated ``rerun=all`` resumes what it has redone instead of starting over."""
        s = self.setup
        failed = s.rerun in (Rerun.errors, Rerun.all) and line.get("error") is not None
        return failed or (s.rerun == Rerun.all and bool(differing(line["run"], s.run_info)))

    async def trajectory(self, traj: Trajectory, by_session: BySession, on_record: OnRecordByKey,
                         memory_done: dict[tuple[str, str], dict[str, Any]]) -> None:
        """The loop: restore the state on record, replay each session the method's way (answering what is
        not on record, updating what is not), then the instances the method answers apart."""
        method = self.method
        state_dir = state_dir_of(self.setup, traj)
        everything = [by_session.get((traj.trajectory_id, x.key), []) for x in traj.sessions]
        instances = [[i for i in insts if not method.held_back(traj, i)] for insts in everything]
        recorded = recorded_lines(traj, memory_done)
        redo = method.resume_at(recorded, instances, on_record)
        async with method.replaying(traj):
            try:
                kept = await asyncio.to_thread(restore_state, state_dir, [line["state"] for line in recorded[:redo]])
                shown = NO_MEMORY
                prior_seconds = 0
                for session in traj.sessions:
                    todo = self.todo(instances[session.index], on_record, shown)
                    prior_seconds += session.duration
                    update = session.index >= kept
                    line = None
                    if todo or update:
                        line = await method.session(traj, session, state_dir, todo, shown, prior_seconds, update)
                    shown = recorded[session.index] if line is None else line
                held_back = [i for insts in everything for i in insts if method.held_back(traj, i)]
                if held_back:
                    await method.answer_held_back(traj, held_back, on_record)
                await method.answered(traj)  # the trajectory's answers end with its replay
            finally:
                await method.abandon(traj)

    def todo(self, instances: list[Instance], on_record: OnRecordByKey, shown: dict[str, Any]) -> list[Instance]:
        """The instances still to run: all but those on record with the memory they would be shown now."""
        todo = [i for i in instances if on_record.get(i.key, {}).get("memory_sha256") != shown["state_sha256"]]
        self.stats.skipped += len(instances) - len(todo)
        if self.progress is not None:
            self.progress.update(len(instances) - len(todo))
        return todo

    async def memory_line(self, traj: Trajectory, session: Session, state_dir: Path, prior_seconds: int,
                          update_s: float, facts: dict[str, Any]) -> dict[str, Any]:
        """Measure the state a session's update left and append its memory line (returned)."""
        s = self.setup
        state = await asyncio.to_thread(state_manifest, state_dir)
        error = facts.pop("error", None)
        self.stats.failed_updates += error is not None
        line = self._memory.append_line(MemoryLine, {
            "format_version": FORMAT_VERSION,
            "run": s.run_info,
            "trajectory_id": traj.trajectory_id,
            "day_id": session.day_id,
            "session_id": session.session_id,
            "session_index": session.index,
            **storage_bytes(state, fast_weights_apart(s.protocol)),
            "prior_hours": prior_seconds / 3600,
            "update_s": update_s,
            "error": error,
            "writer_parse_status": None,  # a summary writer's facts say
            "writer_total_s": None,
            **facts,
            "state": state,
            "state_sha256": manifest_sha256(state),
        }, supersedes=self._newest_memory.get((traj.trajectory_id, session.key)))
        self.stats.sessions_updated += 1
        return line

    @contextmanager
    def sending(self) -> Iterator[int]:
        """Count one request in flight while it is sent; yields the count, itself included."""
        self.in_flight += 1
        try:
            yield self.in_flight
        finally:
            self.in_flight -= 1

    def refuse(self, error: CausalityError) -> Response:
        """The response of an instance refused for causality: never asked; counted for the run's exit."""
        self.stats.refused.append(str(error))
        return Response(error=f"{causality.REFUSED}{error}", attempts=0)

    def keep(self, record: dict[str, Any], response: Response) -> None:
        """Append an instance's record, count it and pass it on; stop when the endpoint keeps failing."""
        self._records.append_line(InstanceRecord, record, supersedes=self._newest_records.get(record["key"]))
        self.stats.new += 1
        self.stats.errors += record["error"] is not None
        if self.progress is not None:
            self.progress.update(1)
        self.on_record(record)
        self._fail_fast.observe(response)

    def check_stopped(self) -> None:
        """Raise the run's fail-fast stop, if it came: nothing is sent after it."""
        self._fail_fast.check()


class SessionReplay(abc.ABC):
    """How a kind of method goes through the loop's sessions; the defaults are what every method shares."""

    def __init__(self, run: OnlineRun) -> None:
        self.run = run
        self.answering: dict[str, list[asyncio.Future[None]]] = defaultdict(list)
        """The answers each trajectory has in flight beside its replay (:meth:`beside`)."""

    async def beside(self, traj: Trajectory, answer: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        """Start ``answer`` and return once it has read the state it shows (it sets the event it is
        given) or ended: the rest of it goes on beside the replay until :meth:`answered`. An answer that
        failed before (a fail-fast stop, a causality bug) is raised here."""
        answering = self.answering[traj.trajectory_id]
        for done in [task for task in answering if task.done()]:
            answering.remove(done)
            done.result()
        state_read = asyncio.Event()
        answered = asyncio.ensure_future(answer(state_read))
        answering.append(answered)
        waiting = asyncio.ensure_future(state_read.wait())
        await asyncio.wait((answered, waiting), return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()

    async def answered(self, traj: Trajectory) -> None:
        """Wait for the answers the trajectory has in flight (:meth:`beside`)."""
        answering = self.answering[traj.trajectory_id]
        while answering:
            await answering.pop(0)

    async def abandon(self, traj: Trajectory) -> None:
        """Cancel the answers a trajectory that stopped still has in flight."""
        pending = self.answering.pop(traj.trajectory_id, [])
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def held_back(self, traj: Trajectory, inst: Instance) -> bool:
        """Whether an instance is answered apart, after the trajectory's sessions (none by default)."""
        return False

    def replaying(self, traj: Trajectory) -> AbstractAsyncContextManager[None]:
        """What the kind holds while a trajectory replays (nothing by default: each request takes a slot)."""
        return nullcontext()

    def resume_at(self, recorded: list[dict[str, Any]], instances: list[list[Instance]],
                  on_record: OnRecordByKey) -> int:
        """How many of the sessions with a memory line on record may keep it: all, by default (an
        instance is answered from the state on disk, whatever session it is in)."""
        return len(recorded)

    @abc.abstractmethod
    async def session(self, traj: Trajectory, session: Session, state_dir: Path, todo: list[Instance],
                      shown: dict[str, Any], prior_seconds: int, update: bool) -> dict[str, Any] | None:
        """Answer ``todo`` (each shown ``shown``) and, with ``update``, run the session's update and
        return its memory line (None: no update; the line on record stands)."""

    async def answer_held_back(self, traj: Trajectory, instances: list[Instance], on_record: OnRecordByKey) -> None:
        """Answer the instances :meth:`held_back` kept out of the sessions (a kind that holds none back
        is never asked)."""
        raise NotImplementedError(f"{type(self).__name__} holds no instance back")

    async def close(self) -> None:
        """Release what the method holds once the run is done (nothing by default)."""


class ProtocolReplay(SessionReplay):
    """A memory protocol: the system that ignores the stream. A session's instances are answered
    concurrently from the state on disk, then the protocol's session-end update runs."""

    def __init__(self, run: OnlineRun, protocol: MemoryProtocol) -> None:
        super().__init__(run)
        self.protocol = protocol

    async def session(self, traj: Trajectory, session: Session, state_dir: Path, todo: list[Instance],
                      shown: dict[str, Any], prior_seconds: int, update: bool) -> dict[str, Any] | None:
        """Start every instance; once each has read the state on disk (its request prepared), run the
        update, while their requests are still in flight (:meth:`beside`): a session's answers never wait
        for another session's, only its update for its instances' preparation."""
        await asyncio.gather(*(self.beside(traj, partial(self.instance, traj, i, state_dir, shown)) for i in todo))
        return await self.end_session(traj, session, state_dir, prior_seconds) if update else None

    async def end_session(self, traj: Trajectory, session: Session, state_dir: Path,
                          prior_seconds: int) -> dict[str, Any]:
        """Run the protocol's session-end update and append its memory line (returned): the state it
        left, file by file, and its size."""
        s, protocol = self.run.setup, self.protocol
        limit = min(protocol.session_frames, frame_budget(s.writer, protocol.session_frames))
        frames = await asyncio.to_thread(session_frames, s.cache, session, limit)
        view = SessionView(traj, session, session_interactions(s.release, traj, session), frames)
        async with self.run.slots if s.latency_mode else nullcontext():  # isolated: nothing runs beside it
            began = time.perf_counter()
            facts = await protocol.end_session(view, state_dir, s.writer if protocol.needs_writer else None)
            update_s = time.perf_counter() - began
        return await self.run.memory_line(traj, session, state_dir, prior_seconds, update_s, facts)

    async def instance(self, traj: Trajectory, inst: Instance, state_dir: Path, shown: dict[str, Any],
                       state_read: asyncio.Event) -> None:
        """Prepare one instance's request from the state on disk (then set ``state_read``), send it and
        keep its record."""
        run, s = self.run, self.run.setup
        async with run.slots:
            run.check_stopped()  # answers beside a replay learn of a fail-fast stop before they send
            began = time.perf_counter()
            prepared, budget, in_flight = None, None, 0
            try:
                try:
                    prepared, budget = await asyncio.to_thread(prepare_instance, s, traj, inst, state_dir)
                finally:
                    state_read.set()
            except CausalityError as e:  # refused: an error on its record, and the run exits non-zero
                response = run.refuse(e)
                prep_s = time.perf_counter() - began
            except Exception as e:  # noqa: BLE001 — a bad video, an unreadable state file: recorded; the run goes on
                response = Response(error=f"preparation failed: {type(e).__name__}: {e}", attempts=0)
                prep_s = time.perf_counter() - began
            else:
                prep_s = time.perf_counter() - began
                with run.sending() as in_flight:
                    response = await ask(s.backbone, prepared.request, inst)
                response = replace(response, truncation=response.truncation or budget)
        run.keep(make_record(s, inst, traj, prepared, response, prep_s, shown, in_flight), response)


REPLAYS_PER_SLOT = 2
"""Trajectories replaying at once per request slot, for a system that replays ``through_backbone``: more
than one, so the slots stay busy while some replays observe frames between their requests; bounded, as a
replay holds its session's frames."""


class StreamReplay(SessionReplay):
    """A streaming system (``apm.runner.streaming``): each session is begun from the state exported
    before it, fed its frames and turns in wall-clock order with each probe answered at its time, and
    exported. A trajectory replays through its own copy of the system (which keeps in-session state on
    itself). A system that declares ``through_backbone`` replays up to :data:`REPLAYS_PER_SLOT` ×
    ``concurrency`` trajectories at once, each of its requests taking a slot by the trajectory's priority
    (:func:`longest_first`), and the stream goes on once a probe has read the state it shows; any other holds
    one slot per trajectory for its whole replay (``concurrency`` trajectories at once), and a system that
    declares ``serial`` is the run's one object, one trajectory at a time. Every restricted
    (EA) instance is answered apart, by a fresh copy of the system fed only its visible sessions
    (docs/streaming-systems.md, "Restricted instances (EA)").

    Resume: a session's in-session state is never saved, so a crash loses it. A rerun keeps the states
    on record only up to the first session with an instance not on record, and replays every session
    from there (from its start, so its state is rebuilt exactly), answering only what is not on record."""

    def __init__(self, run: OnlineRun, system: StreamingSystem) -> None:
        super().__init__(run)
        self.system = system
        self.serial = asyncio.Lock()
        """Held while a trajectory replays through a ``serial`` system (one object, one session at a time)."""
        self.systems: dict[str, StreamingSystem] = {}
        """The system each trajectory replaying now goes through."""
        self.overlapping = system.through_backbone and not system.serial and not run.setup.latency_mode
        """Whether replays hold no slot between requests and probes overlap the stream (``through_backbone``;
        never in latency mode, where a trajectory replays alone and nothing runs beside a timed request)."""
        self.replays = asyncio.Semaphore(REPLAYS_PER_SLOT * run.setup.concurrency)

    @asynccontextmanager
    async def replaying(self, traj: Trajectory) -> AsyncIterator[None]:
        """Hold a place while the trajectory replays (:attr:`overlapping`: one of :attr:`replays`; else one
        of the run's slots), through its own copy of the system as configured (a ``serial`` system: the
        run's one object, holding it alone)."""
        held = self.replays if self.overlapping else self.run.slots
        async with self.serial if self.system.serial else nullcontext(), held:
            system = self.systems[traj.trajectory_id] = (self.system if self.system.serial
                                                         else self.run.setup.fresh_system())
            try:
                yield
            finally:
                del self.systems[traj.trajectory_id]
                if system is not self.system:
                    await system.close()

    def held_back(self, traj: Trajectory, inst: Instance) -> bool:
        return streaming.restricted(traj, inst)

    async def close(self) -> None:
        await self.system.close()

    def resume_at(self, recorded: list[dict[str, Any]], instances: list[list[Instance]],
                  on_record: OnRecordByKey) -> int:
        return streaming.first_replay(recorded, instances, on_record)

    async def session(self, traj: Trajectory, session: Session, state_dir: Path, todo: list[Instance],
                      shown: dict[str, Any], prior_seconds: int, update: bool) -> dict[str, Any]:
        """One session through the system: begin, observe and answer in time order, export. Every
        session before :meth:`resume_at` has all its instances on record, so each replayed one updates."""
        assert update, "a streaming session is replayed whole or not at all (resume_at)"
        system = self.systems[traj.trajectory_id]
        updates = await self.stream_session(system, traj, session, state_dir, todo, shown)
        began = time.perf_counter()
        facts = await system.export(state_dir)
        update_s = time.perf_counter() - began
        facts = {**facts, "observe_s": updates.total}
        return await self.run.memory_line(traj, session, state_dir, prior_seconds, update_s, facts)

    async def stream_session(self, system: StreamingSystem, traj: Trajectory, session: Session, state_dir: Path,
                             todo: list[Instance], shown: dict[str, Any]) -> streaming.UpdateClock:
        """Begin ``session`` from ``state_dir``, observe its frames and turns and answer ``todo`` in time
        order; the session's updates (``observe_s``)."""
        s = self.run.setup
        channel, writer = streaming.reference_channel(s, todo), s.writer if system.needs_writer else None
        if self.overlapping:
            rank = self.run.priority[traj.trajectory_id]
            channel = SlottedBackbone(channel, self.run.slots, rank)
            writer = None if writer is None else SlottedBackbone(writer, self.run.slots, rank)
        try:
            frames = await asyncio.to_thread(session_frames, s.cache, session, streaming.EVERY_FRAME, previews=True)
            unseen = None
        except VideoDecodeError as e:  # streamed without its video: its probes record why, the trajectory goes on
            frames, unseen = (), f"preparation failed: {type(e).__name__}: {e}"
        events = streaming.stream_events(session, frames, session_interactions(s.release, traj, session))
        probes = sorted(todo, key=lambda i: (i.probe_time, i.key))
        updates = streaming.UpdateClock()
        seed = session_seed(traj, session, s.settings.seed)
        await system.begin(SessionContext(traj, session, state_dir, channel, writer, seed))
        for at, event in events:
            while probes and probes[0].probe_time < at:
                await self.answer_probe(system, traj, probes.pop(0), updates, shown, unseen)
            observed = system.observe_frame(event) if isinstance(event, Frame) else system.observe_turn(event)
            await updates.timed(observed, at)
        for inst in probes:
            await self.answer_probe(system, traj, inst, updates, shown, unseen)
        return updates

    async def answer_probe(self, system: StreamingSystem, traj: Trajectory, inst: Instance,
                           updates: streaming.UpdateClock, shown: dict[str, Any], unseen: str | None) -> None:
        """Ask the system one instance from its current state and keep the record (:meth:`answer`). An
        :attr:`overlapping` system is awaited only until it has read its state (``Probe.state_read``, or
        composing its request); the rest of the answer goes on :meth:`beside` the stream."""
        at_probe = replace(updates)  # the updates as of the probe, whatever the stream does meanwhile
        answer = partial(self.answer, system, traj, inst, at_probe, shown, unseen)
        if self.overlapping:
            await self.beside(traj, answer)
        else:
            await answer(asyncio.Event())

    async def answer(self, system: StreamingSystem, traj: Trajectory, inst: Instance,
                     updates: streaming.UpdateClock, shown: dict[str, Any], unseen: str | None,
                     state_read: asyncio.Event) -> None:
        """Ask the system one instance (as :func:`apm.data.instances.instance_view`: no annotations), set
        ``state_read`` once it has read its state, and keep the record (``unseen``: why the session's video
        could not be streamed; the instance records it without being asked). The record's wall time
        leaves out the requests' waits for a slot."""
        run, s = self.run, self.run.setup
        began = time.perf_counter()
        waited: list[float] = []
        noting = SLOT_WAIT.set(waited)
        in_flight = 0
        if unseen is not None:
            answer = Answer(Response(error=unseen, attempts=0))
        else:
            with run.sending() as in_flight:
                refusals: list[CausalityError] = []

                def compose(history: History, frames: tuple[Frame, ...]) -> Request:
                    try:
                        return streaming.compose_request(s, traj, inst, refusals, history, frames)
                    finally:
                        state_read.set()

                try:
                    probe = Probe(instance_view(inst, s.seal), traj, compose, state_read.set)
                    answer = await streaming.ask(system, probe)
                    sent = answer.request.frames if answer.request is not None else ()
                    check_shown(traj, inst, History(), (*answer.frames, *sent))
                    if refusals:
                        raise refusals[0]
                except CausalityError as e:  # refused: an error on its record, and the run exits non-zero
                    answer = Answer(run.refuse(refusals[0] if refusals else e))  # the key's words, not the id's
        SLOT_WAIT.reset(noting)
        wall = time.perf_counter() - began - sum(waited)
        run.keep(streaming.streaming_record(s, inst, traj, answer, wall, updates, shown, in_flight), answer.response)

    async def answer_held_back(self, traj: Trajectory, instances: list[Instance], on_record: OnRecordByKey) -> None:
        """Answer restricted instances, per visible set, from a fresh copy of the system that was fed the
        set's completed sessions alone, from an empty state; the state after them is cached per visible
        set, so a rerun rebuilds it only when it is gone or changed."""
        groups: dict[tuple[str, ...], list[Instance]] = {}
        for inst in instances:
            groups.setdefault(inst.visible_sessions, []).append(inst)
        for visible, group in groups.items():
            state_dir = streaming.visible_state_dir(self.run.setup, traj, visible)
            system = self.run.setup.fresh_system()
            try:
                shown = await self.build_visible_state(system, traj, visible[:-1], state_dir)
                todo = self.run.todo(group, on_record, shown)
                if todo:
                    await self.stream_session(system, traj, traj.session(visible[-1]), state_dir, todo, shown)
                    await self.answered(traj)  # before the copy they ask goes
            finally:
                await system.close()

    async def build_visible_state(self, system: StreamingSystem, traj: Trajectory, sessions: tuple[str, ...],
                                  state_dir: Path) -> dict[str, Any]:
        """The state ``system`` exports after ``sessions`` alone, as a memory line's ``bytes`` (and
        ``fast_weight_bytes``) and ``state_sha256``: the cached one if ``state_dir`` still holds it whole,
        else built again."""
        held = await asyncio.to_thread(streaming.cached_visible_state, state_dir)
        if held is None:
            for key in sessions:
                await self.stream_session(system, traj, traj.session(key), state_dir, [], NO_MEMORY)
                await system.export(state_dir)
            held = await asyncio.to_thread(streaming.keep_visible_state, state_dir)
        return {**storage_bytes(held, fast_weights_apart(self.system)), "state_sha256": manifest_sha256(held)}
