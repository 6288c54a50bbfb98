"""The replay of a trajectory through a streaming memory system (``apm.streaming.base``).

Per session, in order: ``begin`` from the state exported after the previous session; the session's
1-FPS frames (from the frame cache) and user turns in wall-clock order, each one ``observe_*`` call
(a timed memory update); at each probe time, once everything up to it is observed and nothing after
it, ``answer`` for each instance probed then; at the end ``export``, whose state is measured and
recorded as every protocol's memory line. One session replays at a time per run (the system keeps
in-session state on itself); shards run in parallel. A system is asked about an instance view (no
annotations), and every restricted (EA) instance is answered by a fresh copy of the system fed only
its visible sessions, from a state cached per visible set (docs/streaming-systems.md, "Restricted
instances (EA)").

Resume: a session's in-session state is never saved, so a crash loses it. A rerun puts the state
folder back to the newest state on record that it still holds whole and that precedes the first
session with an instance not on record, replays every session from there (from its start, so its
state is rebuilt exactly) and answers only what is not on record (docs/records.md).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apm.backbones.base import Backbone, Message, Request, Response
from apm.data.frames import Frame
from apm.data.ids import id_path
from apm.data.instances import Instance, Turn, instance_view
from apm.data.model import Session, Trajectory
from apm.memory.base import History, manifest_sha256, state_manifest
from apm.prompts import system_prompt
from apm.records.atomic import write_atomically
from apm.records.declaration import declared
from apm.runner.causality import check_shown
from apm.runner.context import build_parts, prompt_digest
from apm.runner.online import (
    NO_MEMORY,
    make_record,
    recorded_lines,
    restore_state,
    session_frames,
    session_interactions,
)
from apm.runner.request import state_dir_of
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem
from apm.video.decode import VideoDecodeError
from apm.video.select import CausalityError

if TYPE_CHECKING:
    from apm.runner.online import OnlineRun, RunSetup

EVERY_FRAME = 1 << 30
"""``session_frames`` limit that keeps every cached frame of a session."""

_STREAMS: weakref.WeakKeyDictionary[OnlineRun, asyncio.Lock] = weakref.WeakKeyDictionary()
"""One lock per run: a system holds one session's state at a time."""


@dataclass
class UpdateClock:
    """The memory updates of a session so far: their total time and the last one's."""

    total: float = 0.0
    last: float | None = None

    async def timed(self, update: Awaitable[None]) -> None:
        """Await one update and count its time."""
        began = time.perf_counter()
        await update
        self.last = time.perf_counter() - began
        self.total += self.last


def stream_events(session: Session, frames: tuple[Frame, ...],
                  turns: tuple[Turn, ...]) -> list[tuple[float, Frame | Turn]]:
    """The session's frames and turns as ``(absolute time, event)`` in time order (a frame before a turn
    of the same instant); a frame's time is its session start plus its exact video offset."""
    timed: list[tuple[float, int, Frame | Turn]] = [(session.start + f.offset, 0, f) for f in frames]
    timed += [(float(t.time), 1, t) for t in turns]
    timed.sort(key=lambda e: (e[0], e[1]))
    return [(at, event) for at, _, event in timed]


def compose_request(setup: RunSetup, trajectory: Trajectory, instance: Instance, refusals: list[CausalityError],
                    history: History, frames: tuple[Frame, ...]) -> Request:
    """The run's request layout (``apm.runner.context``) around what a system chose to show, checked
    (``apm.runner.causality``); a refusal is kept in ``refusals`` too, so a system that catches the
    ``CausalityError`` still has its instance refused."""
    try:
        check_shown(trajectory, instance, history, frames)
    except CausalityError as e:
        refusals.append(e)
        raise
    messages = (
        Message.text("system", system_prompt()),
        Message("user", tuple(build_parts(trajectory, instance, history, list(frames))), time=instance.probe_time),
    )
    return Request(messages=messages, settings=setup.settings, request_id=instance.key,
                   trajectory_id=instance.trajectory_id)


def _missing(instances: list[Instance], on_record: dict[str, Any], shown: dict[str, Any]) -> bool:
    """Whether an instance is not on record with the memory it would be shown (``shown``)."""
    return any(on_record.get(i.key, {}).get("memory_sha256") != shown["state_sha256"] for i in instances)


def first_replay(recorded: list[dict[str, Any]], instances: list[list[Instance]], on_record: dict[str, Any]) -> int:
    """The first session to replay: the first whose update is not on record, or an earlier one with an
    instance that is not (its in-session state is gone, so it is replayed from its start)."""
    for index in range(len(recorded)):
        if _missing(instances[index], on_record, recorded[index - 1] if index else NO_MEMORY):
            return index
    return len(recorded)


def restricted(traj: Trajectory, inst: Instance) -> bool:
    """Whether an instance may see fewer sessions than all up to its own (EA after two completed sessions)."""
    upto = [x.key for x in traj.sessions[: traj.session(inst.session).index + 1]]
    return list(inst.visible_sessions) != upto


async def replay_trajectory(run: OnlineRun, traj: Trajectory, by_session, on_record: dict, memory_done: dict) -> None:
    """Replay the trajectory's sessions that are not wholly on record, in order (module docstring); then
    answer each restricted instance from a state built from its visible sessions alone."""
    s = run.setup
    state_dir = state_dir_of(s, traj)
    everything = [by_session.get((traj.trajectory_id, x.key), []) for x in traj.sessions]
    instances = [[i for i in insts if not restricted(traj, i)] for insts in everything]
    recorded = recorded_lines(traj, memory_done)
    redo = first_replay(recorded, instances, on_record)
    kept = await asyncio.to_thread(restore_state, state_dir, [line["state"] for line in recorded[:redo]])
    shown = NO_MEMORY
    prior_seconds = 0
    lock = _STREAMS.setdefault(run, asyncio.Lock())
    for session in traj.sessions:
        todo = run._todo(instances[session.index], on_record, shown)
        prior_seconds += session.duration
        if session.index < kept:
            shown = recorded[session.index]
            continue
        async with lock, run._sem:
            shown = await replay_session(run, traj, session, state_dir, todo, shown, prior_seconds)
    groups: dict[tuple[str, ...], list[Instance]] = {}
    for inst in (i for insts in everything for i in insts if restricted(traj, i)):
        groups.setdefault(inst.visible_sessions, []).append(inst)
    for visible, group in groups.items():
        await answer_from_visible(run, traj, visible, group, on_record, lock)


async def replay_session(run: OnlineRun, traj: Trajectory, session: Session, state_dir: Path,
                         todo: list[Instance], shown: dict[str, Any], prior_seconds: int) -> dict[str, Any]:
    """One session through the system: begin, observe and answer in time order, export; returns its memory line."""
    system = run.setup.protocol
    assert isinstance(system, StreamingSystem)  # replay_trajectory runs only for a StreamingSystem
    clock = await stream_session(run, system, traj, session, state_dir, todo, shown)
    began = time.perf_counter()
    facts = await system.export(state_dir)
    update_s = time.perf_counter() - began
    facts = {**facts, "observe_s": clock.total}
    return await run._memory_line(traj, session, state_dir, prior_seconds, update_s, facts)


async def stream_session(run: OnlineRun, system: StreamingSystem, traj: Trajectory, session: Session,
                         state_dir: Path, todo: list[Instance], shown: dict[str, Any]) -> UpdateClock:
    """Begin ``session`` from ``state_dir``, observe its frames and turns and answer ``todo`` in time
    order; the session's updates (``observe_s``)."""
    s = run.setup
    try:
        frames, unseen = await asyncio.to_thread(session_frames, s.cache, session, EVERY_FRAME), None
    except VideoDecodeError as e:  # streamed without its video: its probes record why, the trajectory goes on
        frames, unseen = (), f"preparation failed: {type(e).__name__}: {e}"
    events = stream_events(session, frames, session_interactions(s.release, traj, session))
    probes = sorted(todo, key=lambda i: (i.probe_time, i.key))
    clock = UpdateClock()
    await system.begin(SessionContext(traj, session, state_dir, reference_channel(s.backbone, todo), s.writer))
    for at, event in events:
        while probes and probes[0].probe_time < at:
            await answer_probe(run, system, traj, probes.pop(0), clock, shown, unseen)
        observed = system.observe_frame(event) if isinstance(event, Frame) else system.observe_turn(event)
        await clock.timed(observed)
    for inst in probes:
        await answer_probe(run, system, traj, inst, clock, shown, unseen)
    return clock


def visible_state_dir(setup: RunSetup, traj: Trajectory, visible: tuple[str, ...]) -> Path:
    """Where the state built from a visible set's completed sessions alone is kept (beside the run's
    state, never measured as it: a restricted instance's own memory)."""
    name = "+".join(key.replace("/", "-") for key in visible[:-1])
    return id_path(setup.run_dir / "memory_state_visible", traj.trajectory_id) / name


async def answer_from_visible(run: OnlineRun, traj: Trajectory, visible: tuple[str, ...], group: list[Instance],
                              on_record: dict, lock: asyncio.Lock) -> None:
    """Answer restricted instances (all of ``visible``) from a fresh copy of the system that was fed
    ``visible``'s completed sessions alone, from an empty state; the state after them is cached per
    visible set, so a rerun rebuilds it only when it is gone or changed."""
    s = run.setup
    state_dir = visible_state_dir(s, traj, visible)
    system = run.fresh_system()
    async with lock, run._sem:
        shown = await build_visible_state(run, system, traj, visible[:-1], state_dir)
    todo = run._todo(group, on_record, shown)
    if todo:
        async with lock, run._sem:
            await stream_session(run, system, traj, traj.session(visible[-1]), state_dir, todo, shown)


async def build_visible_state(run: OnlineRun, system: StreamingSystem, traj: Trajectory, sessions: tuple[str, ...],
                              state_dir: Path) -> dict[str, Any]:
    """The state ``system`` exports after ``sessions`` alone, as a memory line's ``bytes`` and
    ``state_sha256``: the cached one if ``state_dir`` still holds it whole, else built again."""
    built = state_dir.with_name(state_dir.name + ".built.json")
    cached = json.loads(built.read_text()) if built.exists() else None
    held = await asyncio.to_thread(state_manifest, state_dir)
    if cached is None or cached != held:
        shutil.rmtree(state_dir, ignore_errors=True)
        built.unlink(missing_ok=True)
        state_dir.mkdir(parents=True)
        for key in sessions:
            await stream_session(run, system, traj, traj.session(key), state_dir, [], NO_MEMORY)
            await system.export(state_dir)
        held = await asyncio.to_thread(state_manifest, state_dir)
        write_atomically(built, json.dumps(held, sort_keys=True).encode())
    return {"bytes": sum(entry["bytes"] for entry in held.values()), "state_sha256": manifest_sha256(held)}


class ReferenceChannel(Backbone):
    """A reference baseline as a streaming system is handed it: asked about the instance view a probe
    carries, it answers about the full instance (only a reference reads annotations; a system never does).
    The run starts and closes the baseline itself."""

    answers_from_annotations = True

    def __init__(self, backbone: Backbone, instances: dict[str, Instance]) -> None:
        self.backbone, self._instances = backbone, instances
        self.name, self.declaration, self.max_frames = backbone.name, backbone.declaration, backbone.max_frames

    async def generate(self, request: Request) -> Response:
        return await self.backbone.generate(request)

    async def answer_instance(self, request: Request, view: Instance) -> Response:
        return await self.backbone.answer_instance(request, self._instances[view.key])


def reference_channel(backbone: Backbone, instances: list[Instance]) -> Backbone:
    """The run's backbone as a system gets it: a reference baseline behind a :class:`ReferenceChannel`
    for the session's instances; any other backbone as it is."""
    if backbone.answers_from_annotations:
        return ReferenceChannel(backbone, {i.key: i for i in instances})
    return backbone


async def answer_probe(run: OnlineRun, system: StreamingSystem, traj: Trajectory, inst: Instance,
                       clock: UpdateClock, shown: dict[str, Any], unseen: str | None = None) -> None:
    """Ask the system one instance (as :func:`apm.data.instances.instance_view`: no annotations) from
    its current state and keep the record (``unseen``: why the session's video could not be streamed;
    the instance records it without being asked)."""
    s = run.setup
    began = time.perf_counter()
    in_flight = 0
    if unseen is not None:
        answer = Answer(Response(error=unseen, attempts=0))
    else:
        run._in_flight += 1
        in_flight = run._in_flight
        refusals: list[CausalityError] = []
        try:
            probe = Probe(instance_view(inst), traj, partial(compose_request, s, traj, inst, refusals))
            answer = await ask(system, probe)
            sent = answer.request.frames if answer.request is not None else ()
            check_shown(traj, inst, History(), (*answer.frames, *sent))
            if refusals:
                raise refusals[0]
        except CausalityError as e:  # refused: an error on its record, and the run exits non-zero
            answer = Answer(run.refuse(e))
        finally:
            run._in_flight -= 1
    wall = time.perf_counter() - began
    run._keep(streaming_record(s, inst, traj, answer, wall, clock, shown, in_flight), answer.response)


async def ask(system: StreamingSystem, probe: Probe) -> Answer:
    """The system's answer; a failure other than a causality refusal becomes the answer's error."""
    try:
        return await system.answer(probe)
    except CausalityError:
        raise  # answer_probe refuses the instance
    except Exception as e:  # noqa: BLE001 — a failed answer is recorded; the run goes on
        return Answer(Response(error=f"answer failed: {type(e).__name__}: {e}", attempts=0))


def streaming_record(setup: RunSetup, inst: Instance, traj: Trajectory, answer: Answer, wall: float,
                     clock: UpdateClock, shown: dict[str, Any], in_flight: int) -> dict[str, Any]:
    """The instance record (``make_record``) with what the answer drew on and the latency of a streaming
    system (docs/records.md, "Latency"): ``ttft_s`` runs from the last required update (streaming) or
    from the start of the causal prefix's processing; ``rtf`` always covers the whole prefix."""
    response = answer.response
    streaming = getattr(declared(setup.protocol), "streaming", None) is not False  # undeclared: it streams
    before_generation = max(0.0, wall - response.total_s)
    lead = 0.0 if streaming else clock.total
    record = make_record(setup, inst, traj, None, response, lead + before_generation, shown, in_flight)
    request = answer.request
    record["frames"] = [f.describe() for f in answer.frames or (request.frames if request else ())]
    record["prompt_sha256"] = prompt_digest(request.messages) if request else None
    latency = record["latency"]
    ttft, prefix = latency["ttft_s"], latency["prefix_s"]
    processed = None if ttft is None else ttft + (clock.total if streaming else 0.0)
    latency.update(
        ttft_from="last_update" if streaming else "causal_prefix",
        update_s=clock.last,
        observe_s=clock.total,
        rtf=processed / prefix if processed is not None and prefix > 0 else None,
    )
    return record
