"""Adversarial memory protocols and streaming systems: each shows an instance one thing it may not see
(tests/test_causality.py proves the runner refuses every one, whoever built the request)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from apm.backbones.base import FramePart, Message, Request, Response, TextPart, ask
from apm.backbones.perceiver import PixelPerceiver
from apm.data import clock
from apm.data.frames import Frame
from apm.data.instances import Instance, Turn
from apm.data.model import Session, Trajectory
from apm.memory.base import History, MemoryProtocol, Note
from apm.prompts.render import fill, read_probe
from apm.records.declaration import Declaration
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem
from apm.video.select import CausalityError, Span
from support.spies import spy_log


class FutureNote(MemoryProtocol):
    """A note written at the end of the trajectory's last session, shown to every instance."""

    name = "Future Note (adversary)"

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        last = trajectory.sessions[-1]
        return History(notes=(Note(last, "what happens last", last.end),))


class BackdatedNote(MemoryProtocol):
    """A note said to be of the current session but formed one second after the probe."""

    name = "Backdated Note (adversary)"

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        return History(notes=(Note(trajectory.session(instance.session), "later", instance.probe_time + 1),))


class FutureTurn(MemoryProtocol):
    """A registration said one second after the probe."""

    name = "Future Turn (adversary)"

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        return History(turns=(Turn("registration", instance.probe_time + 1, "remind me", instance.candidate_id),))


class FutureFrame(MemoryProtocol):
    """The current session's video up to one second after the probe."""

    name = "Future Frame (adversary)"

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        current = trajectory.session(instance.session)
        return History(spans=(Span(current.key, current.start, instance.probe_time + 1),))


class FirstSessionNote(MemoryProtocol):
    """The first session's note, formed at its end, shown to every instance after it: causal in time,
    but hidden from an EA instance whose two most recent completed sessions exclude it."""

    name = "First Session Note (adversary)"

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        first = trajectory.sessions[0]
        if instance.session == first.key:
            return History()
        return History(notes=(Note(first, "the first session", first.end),))


class StreamedFuture(StreamingSystem):
    """A streaming system that shows the future: ``show="note"``: the last session's note (and, when the
    request refuses it, answers anyway without it); ``show="frame"``: reports a frame one second after the
    probe as what its answer drew on."""

    name = "Streamed Future (adversary)"
    persistent = False

    def __init__(self, show: str = "note", name: str | None = None):
        super().__init__(name)
        self.show = show

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.latest: Frame | None = None

    async def observe_frame(self, frame: Frame) -> None:
        self.latest = frame

    async def answer(self, probe: Probe) -> Answer:
        last = probe.trajectory.sessions[-1]
        request = probe.request()
        if self.show == "note":
            try:
                request = probe.request(notes=[Note(last, "what happens last", last.end)])
            except CausalityError:
                pass  # swallow the refusal and answer anyway
        late = ()
        if self.show == "frame" and self.latest is not None:
            late = (replace(self.latest, offset=self.latest.offset + 1, wall_clock=self.latest.wall_clock + 1),)
        return Answer(await ask(self.context.backbone, request, probe.instance), request, late)

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {}


class Omniscient(StreamingSystem):
    """Reads everything it can reach and shows none of it: every frame it is ever fed, kept on itself
    across sessions (against the contract), and whatever its probe's instance carries. It answers the
    content of a multiple-choice question (A–D, never E) through a pixel perceiver of its own over all
    it kept, so it is right wherever what it was fed holds the evidence; it reports no request or frames,
    so no check on what it shows can catch it."""

    name = "Omniscient (adversary)"
    persistent = False
    READ: dict[str, dict[str, Any]] = spy_log({})
    """What each probe's instance carried: its correct option, evidence availability and field names."""
    OBSERVED: list[int] = spy_log([])
    """The wall-clock second of every frame any copy was fed."""

    def __init__(self, name: str | None = None):
        super().__init__(name)
        self.everything: dict[int, Frame] = {}
        self.sessions: dict[str, Session] = {}

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.sessions[context.session.key] = context.session

    async def observe_frame(self, frame: Frame) -> None:
        self.everything[frame.wall_clock] = frame
        Omniscient.OBSERVED.append(frame.wall_clock)

    async def answer(self, probe: Probe) -> Answer:
        inst = probe.instance
        Omniscient.READ[inst.key] = {"correct_option": inst.correct_option, "polarity": inst.polarity,
                                     "evidence_available": inst.evidence_available,
                                     "fields": sorted(inst.candidate.fields)}
        asked = probe.request().messages[-1].parts[-1]
        assert isinstance(asked, TextPart)
        content = _content_question(asked.text)
        earlier = [f"[Video of earlier session {key}, {clock.label(s.start)} to {clock.split(s.end)[1]}]"
                   for key, s in self.sessions.items() if key != inst.session]
        now = self.sessions[inst.session]
        headers = "\n".join([*earlier, f"[Current session {now.key}, {clock.label(now.start)} to "
                                        f"{clock.split(inst.probe_time)[1]}]"])
        frames = [FramePart(self.everything[t]) for t in sorted(self.everything)]
        request = Request(messages=(Message("user", (TextPart(headers), *frames, TextPart(content))),))
        return Answer(await PixelPerceiver().generate(request))

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {}


def _content_question(text: str) -> str:
    """``text`` with an EA probe asked as the plain MCQA of its content (options A–D, never E)."""
    name, fields = read_probe(text) or ("", {})
    if name != "ea":
        return text
    ea = fill("ea", fields)
    return text.removesuffix(ea) + fill("mcqa", {k: v for k, v in fields.items() if k != "OPTION E"})


class AnswerFileReader(StreamingSystem):
    """Finds ``candidates.jsonl`` beside the session videos and answers from it (measured on main: CS,
    Perception, Adaptive 100 / 100 / 100, Storage 0 B/h with Persistent ✓). In process nothing stops it:
    its rows say so ("not sealed"); behind the boundary the seal refuses the read (tests/test_boundary.py)."""

    name = "Answer File Reader (adversary)"
    declaration = Declaration("specialised", streaming=True, persistent=True)

    async def begin(self, context: SessionContext) -> None:
        release = next(p for p in context.session.video.parents if (p / "candidates.jsonl").exists())
        self.answers = {}
        for line in (release / "candidates.jsonl").read_text().splitlines():
            c = json.loads(line)
            self.answers[c["candidate_id"]] = c.get("correct_option_id")

    async def observe_frame(self, frame: Frame) -> None:
        pass

    async def answer(self, probe: Probe) -> Answer:
        option = self.answers.get(probe.instance.candidate_id)
        return Answer(Response(text=json.dumps({"answer": option}) if option else "", ttft_s=0.0))

    async def export(self, state_dir: Path) -> dict[str, Any]:
        return {}
