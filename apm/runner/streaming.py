"""What the replay loop (``apm.runner.online.StreamReplay``) needs to stream a session through a
streaming memory system (``apm.streaming.base``): the session's events in time order, the request
around what a system shows, the resume rule, the reference channel, where a restricted instance's
state is built, and the streaming fields of a record (docs/streaming-systems.md).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, Message, Request, Response
from apm.data.frames import Frame
from apm.data.ids import sessions_name
from apm.data.instances import Instance, Turn
from apm.data.model import Session, Trajectory
from apm.memory.base import History, StateManifest, state_manifest
from apm.prompts import system_prompt
from apm.records.atomic import write_atomically
from apm.records.declaration import declared
from apm.records.rundir import RunDir
from apm.runner.causality import refusal, violations
from apm.runner.context import build_parts, prompt_digest
from apm.runner.record import NO_MEMORY, make_record
from apm.runner.request import kept_prompt
from apm.runner.setup import RunSetup
from apm.streaming.base import Answer, Probe, StreamingSystem
from apm.video.select import CausalityError

EVERY_FRAME = 1 << 30
"""``session_frames`` limit that keeps every cached frame of a session."""


@dataclass
class UpdateClock:
    """The memory updates of a session so far: their total time, and the update the next answer requires
    (every ``observe_*`` call at the instant observed last: the probe second's frame and turns)."""

    total: float = 0.0
    required: float | None = None
    at: float | None = None
    """The instant of the events ``required`` timed."""

    async def timed(self, update: Awaitable[None], at: float) -> None:
        """Await the update of the event at ``at`` and count its time."""
        began = time.perf_counter()
        await update
        took = time.perf_counter() - began
        self.total += took
        earlier = self.required if at == self.at and self.required is not None else 0.0  # same instant: one update
        self.required, self.at = took + earlier, at


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
    (``apm.runner.causality``); a refusal is kept in ``refusals`` (naming the instance by its key, for the
    record), so a system that catches the ``CausalityError`` still has its instance refused. The system is
    told the instance by its opaque id alone, in the refusal it is raised and in the request."""
    found = violations(trajectory, instance, history, frames)
    if found:
        refusals.append(refusal(found))
        raise refusal(violations(trajectory, instance, history, frames, name=setup.opaque(instance.key)))
    messages = (
        Message.text("system", system_prompt()),
        Message("user", tuple(build_parts(trajectory, instance, history, list(frames))), time=instance.probe_time),
    )
    return Request(messages=messages, settings=setup.settings, request_id=setup.opaque(instance.key),
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


def visible_state_dir(setup: RunSetup, traj: Trajectory, visible: tuple[str, ...]) -> Path:
    """Where the state built from a visible set's completed sessions alone is kept (beside the run's
    state, never measured as it: a restricted instance's own memory)."""
    return RunDir(setup.run_dir).memory_state_visible(traj.trajectory_id) / sessions_name(visible[:-1])


def _built(state_dir: Path) -> Path:
    """Where the state a visible set's folder was left holding is noted (beside it)."""
    return state_dir.with_name(state_dir.name + ".built.json")


def cached_visible_state(state_dir: Path) -> StateManifest | None:
    """The state a visible set's folder holds, if it is still the one built there; else None, with the
    folder emptied for a new build."""
    built = _built(state_dir)
    cached = json.loads(built.read_text()) if built.exists() else None
    held = state_manifest(state_dir)
    if cached is not None and cached == held:
        return held
    shutil.rmtree(state_dir, ignore_errors=True)
    built.unlink(missing_ok=True)
    state_dir.mkdir(parents=True)
    return None


def keep_visible_state(state_dir: Path) -> StateManifest:
    """The state just built in a visible set's folder, noted so a rerun reuses it while it stays whole."""
    held = state_manifest(state_dir)
    write_atomically(_built(state_dir), json.dumps(held, sort_keys=True).encode())
    return held


class ReferenceChannel(Backbone):
    """A reference baseline as a streaming system is handed it: asked about the instance view a probe
    carries (``instances``: keyed by the views' opaque keys), it answers about the full instance (only a
    reference reads annotations; a system never does). The run starts and closes the baseline itself."""

    answers_from_annotations = True

    def __init__(self, backbone: Backbone, instances: dict[str, Instance]) -> None:
        self.backbone, self._instances = backbone, instances
        self.name, self.declaration, self.max_frames = backbone.name, backbone.declaration, backbone.max_frames

    async def generate(self, request: Request) -> Response:
        return await self.backbone.generate(request)

    async def answer_instance(self, request: Request, view: Instance) -> Response:
        return await self.backbone.answer_instance(request, self._instances[view.key])


def reference_channel(setup: RunSetup, instances: list[Instance]) -> Backbone:
    """The run's backbone as a system gets it: a reference baseline behind a :class:`ReferenceChannel`
    for the session's instances; any other backbone as it is."""
    if setup.backbone.answers_from_annotations:
        return ReferenceChannel(setup.backbone, {setup.opaque(i.key): i for i in instances})
    return setup.backbone


async def ask(system: StreamingSystem, probe: Probe) -> Answer:
    """The system's answer; a failure other than a causality refusal becomes the answer's error."""
    try:
        return await system.answer(probe)
    except CausalityError:
        raise  # the loop refuses the instance (StreamReplay.answer_probe)
    except Exception as e:  # noqa: BLE001 — a failed answer is recorded; the run goes on
        return Answer(Response(error=f"answer failed: {type(e).__name__}: {e}", attempts=0))


def streaming_record(setup: RunSetup, inst: Instance, traj: Trajectory, answer: Answer, wall: float,
                     updates: UpdateClock, shown: dict[str, Any], in_flight: int) -> dict[str, Any]:
    """The instance record (``make_record``) with what the answer drew on and the latency of a streaming
    system (docs/records.md, "Latency"): ``ttft_s`` runs from the start of the update the answer required
    (streaming: the probe second's, so where a chunk boundary falls does not move it) or from the start of
    the causal prefix's processing; ``rtf`` always covers the whole prefix."""
    response = answer.response
    streaming = getattr(declared(setup.protocol), "streaming", None) is not False  # undeclared: it streams
    before_generation = max(0.0, wall - response.total_s - (response.encode_s or 0.0))  # encoding: not the system's
    lead = (updates.required or 0.0) if streaming else updates.total
    record = make_record(setup, inst, traj, None, response, lead + before_generation, shown, in_flight)
    request = answer.request
    record["frames"] = [f.describe() for f in answer.frames or (request.frames if request else ())]
    record["prompt_sha256"] = prompt_digest(request.messages) if request else None
    record["prompt"] = kept_prompt(setup, request)
    latency = record["latency"]
    ttft, prefix = latency["ttft_s"], latency["prefix_s"]
    processed = None if ttft is None else updates.total + ttft - lead
    latency.update(
        ttft_from="last_update" if streaming else "causal_prefix",
        update_s=updates.required,
        observe_s=updates.total,
        rtf=processed / prefix if processed is not None and prefix > 0 else None,
    )
    return record
