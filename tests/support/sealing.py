"""Adversaries of issue 34, item 2 ("sealed by construction"): in-process methods that read what the
contract must not hand them — the instance's identity (which names its polarity), the annotations,
other candidates' turns — or that report their state where it is not counted
(tests/test_sealed_methods.py shows each is refused, blinded or marked)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, Request, Response, ask
from apm.backbones.baselines import intervene, silent
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Instance, Turn
from apm.data.model import Trajectory
from apm.memory.base import History, MemoryProtocol, SessionView, prior_sessions
from apm.records.atomic import write_atomically
from apm.records.declaration import Declaration
from apm.streaming.base import FAST_WEIGHTS, Answer, Probe, SessionContext, StreamingSystem, read_earlier
from support.spies import spy_log

POSITIVE_PROBE = re.compile(r"(?:^|/)pos\d*$")
"""A probe id (or an instance key ending in one) that names a positive probe."""
PROBE_ID = re.compile(r"(?:^|/)(?:pos|neg)\d*$")
"""A probe id (or an instance key ending in one): ``pos``, ``pos3``, ``neg0`` …"""


def decided(task: str, positive: bool) -> str:
    """An Appendix E answer: INTERVENE where ``positive`` (SILENT otherwise) for an adaptive ``task``."""
    return json.dumps(intervene(task, "read it", answer="A", proactive_response="now") if positive
                      else silent("read it"))


class RequestIdReader(Backbone):
    """A backbone that never looks at a frame: it answers INTERVENE when the request's id names a
    positive probe, SILENT otherwise (an option ``A`` to a question). ``SEEN``: every id it was sent."""

    name = "Request-id reader (adversary)"
    SEEN: list[str] = spy_log([])

    def __init__(self, name: str | None = None, max_frames: int | None = 0):
        self.name = name or self.name
        self.max_frames = max_frames

    async def generate(self, request: Request) -> Response:
        RequestIdReader.SEEN.append(request.request_id)
        text = request.messages[-1].parts[-1]
        asked = getattr(text, "text", "")
        adaptive = "SILENT" in asked or "INTERVENE" in asked
        out = (json.dumps({"decision": "INTERVENE", "answer": "A", "proactive_response": "now", "reason": "id"})
               if POSITIVE_PROBE.search(request.request_id) else json.dumps(silent("id"))) if adaptive \
            else json.dumps({"answer": "A"})
        return Response(text=out, ttft_s=0.0, total_s=0.0, finish_reason="stop")


class KeyReader(StreamingSystem):
    """A streaming system that never looks at a frame: it answers from its probe's instance identity
    (``key``, ``probe_id``, ``polarity``). ``READ``: what each probe's instance carried."""

    name = "Key reader (adversary)"
    declaration = Declaration("specialised", streaming=True, persistent=False)
    READ: list[dict[str, Any]] = spy_log([])

    async def begin(self, context: SessionContext) -> None:
        self.context = context

    async def observe_frame(self, frame: Frame) -> None:
        pass

    async def answer(self, probe: Probe) -> Answer:
        inst = probe.instance
        KeyReader.READ.append({"key": inst.key, "probe_id": inst.probe_id, "polarity": inst.polarity})
        positive = inst.polarity == "positive" or bool(POSITIVE_PROBE.search(inst.key)) \
            or bool(POSITIVE_PROBE.search(inst.probe_id))
        text = decided(inst.task, positive) if inst.family == "adaptive" else json.dumps({"answer": "A"})
        return Answer(Response(text=text, ttft_s=0.0, total_s=0.0, finish_reason="stop"))

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {}


def _annotations(instance: Instance) -> dict[str, Any]:
    """What an instance carries that only the runner and a reference may read."""
    fields = instance.candidate.fields
    return {"key": instance.key, "probe_id": instance.probe_id, "polarity": instance.polarity,
            "correct_option": instance.correct_option, "evidence_available": instance.evidence_available,
            "evidence_moments": fields.get("evidence_moments"), "correct_option_id": fields.get("correct_option_id"),
            "positive_heartbeat": fields.get("positive_heartbeat"), "fields": sorted(fields)}


class AnnotationReader(MemoryProtocol):
    """A protocol declared ``general`` that reads the annotations of the instance it is handed (and would
    show the evidence, as the oracle control does). ``READ``: what each instance carried."""

    name = "Annotation reader (adversary)"
    declaration = Declaration("general", streaming=False, persistent=False)
    READ: list[dict[str, Any]] = spy_log([])

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        type(self).READ.append(_annotations(instance))
        return History()


class ReferenceAnnotationReader(AnnotationReader):
    """The same, declared a ``reference`` (a control, as the oracle evidence is): it may read them."""

    name = "Reference annotation reader (test)"
    declaration = Declaration("reference", streaming=False, persistent=False, tag="test control")
    READ: list[dict[str, Any]] = spy_log([])


class EveryonesTurns(MemoryProtocol):
    """A protocol that keeps every turn said in a session (every candidate's) and shows an instance all
    those of its earlier visible sessions, whoever's conversation they belong to."""

    name = "Everyone's turns (adversary)"
    declaration = Declaration("general", streaming=False, persistent=True)

    async def end_session(self, view: SessionView, state_dir: Path, writer: Any = None) -> dict:
        turns = [{"kind": t.kind, "time": t.time, "text": t.text, "candidate_id": t.candidate_id}
                 for t in view.interactions]
        write_atomically(session_path(state_dir, view.session, ".turns.json"), json.dumps(turns).encode())
        return {}

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        turns: list[Turn] = []
        for session in prior_sessions(instance, trajectory):
            path = session_path(state_dir, session, ".turns.json")
            kept = json.loads(path.read_text()) if path.exists() else []
            turns += [Turn(t["kind"], t["time"], t["text"], t["candidate_id"]) for t in kept]
        return History(turns=tuple(turns))


class EveryonesTurnsStream(StreamingSystem):
    """A streaming system that keeps every turn it observes and shows a probe all those of its earlier
    visible sessions, whoever's conversation they belong to (no :func:`apm.streaming.base.own_turns`)."""

    name = "Everyone's turns, streamed (adversary)"
    declaration = Declaration("specialised", streaming=True, persistent=True)

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        _, self.turns = read_earlier(context, ".turns.json", lambda session, content, path: [])

    async def observe_frame(self, frame: Frame) -> None:
        pass

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def answer(self, probe: Probe) -> Answer:
        visible = {probe.trajectory.session(k) for k in probe.instance.visible_sessions[:-1]}
        shown = [t for t in self.turns.earlier if any(s.contains(t.time) for s in visible)]
        request = probe.request(turns=shown)
        return Answer(await ask(self.context.backbone, request, probe.instance), request)

    async def export(self, state_dir: Path) -> dict[str, Any]:
        write_atomically(session_path(state_dir, self.context.session, ".turns.json"),
                         json.dumps({"turns": self.turns.to_json()}).encode())
        return {}


class VideoAsFastWeights(StreamingSystem):
    """A system that is not parametric but keeps every frame's JPEG under ``fast_weights/``: raw video
    filed where only a parametric system's adapted weights are measured apart."""

    name = "Video as fast weights (adversary)"
    declaration = Declaration("specialised", streaming=True, persistent=True, representation="visual_features")

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.frames: list[Frame] = []

    async def observe_frame(self, frame: Frame) -> None:
        self.frames.append(frame)

    async def answer(self, probe: Probe) -> Answer:
        return Answer(Response(text=json.dumps({"answer": "A"}), ttft_s=0.0, total_s=0.0, finish_reason="stop"))

    async def export(self, state_dir: Path) -> dict[str, Any]:
        for frame in self.frames:
            name = f"{self.context.session.key.replace('/', '_')}_{frame.wall_clock}.jpg"
            write_atomically(state_dir / FAST_WEIGHTS / name, frame.jpeg)
        return {"kept": len(self.frames)}


class ExportsNothing(VideoAsFastWeights):
    """A system declared persistent that exports nothing at all."""

    name = "Exports nothing (adversary)"
    declaration = Declaration("specialised", streaming=True, persistent=True, representation="visual_features")

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {}
