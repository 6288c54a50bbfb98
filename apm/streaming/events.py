"""Event memory, in the spirit of StreamForest and OASIS: the stream cut into events at scene changes.

As frames arrive, a cut is made where consecutive frames differ on their pixels (mean absolute
difference of small thumbnails, decoded at a reduced JPEG scale, the top and bottom ``margin`` left
out: clock and caption strips are not the scene) once the open event has lasted ``min_event_s``, or
when it reaches ``max_event_s``.
Each closed event keeps its middle frame as keyframe and a one-sentence description written by the
run's writer backbone from ``describe_frames`` of its frames; a description depends on its event's frames
alone, so it is written while the stream goes on, and a probe (or the export) waits for the descriptions
of the events closed before it. A probe retrieves the ``top_k`` events
whose descriptions match the instance best (BM25, as ``retrieval_bm25``; only matches above 0) from
the visible sessions and the current one, and answers through the run's backbone with their
keyframes, the earlier sessions' descriptions as text memory, and the ``recent_frames`` latest frames.

State per session: ``<session>.events.json`` (events, descriptions, the user's turns) and one
``<session>.<second>.jpg`` keyframe per event.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from apm.backbones.base import ask
from apm.data import clock
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Turn
from apm.data.model import Session
from apm.memory.base import Note
from apm.records.atomic import write_atomically, write_redacted
from apm.records.declaration import Declaration
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem, TurnLog, earlier_states
from apm.streaming.written import best_matches, write_about
from apm.video.select import uniform_indices

DESCRIBE = ("You watch a short event from an egocentric video. Describe in one sentence what is visible "
            "and what the wearer does: objects, colours, places, any words shown.")


@dataclass(frozen=True)
class Event:
    """A stretch of one session between two scene changes, with its keyframe and description."""

    session: Session
    start: int
    end: int
    keyframe: Frame
    description: str

    def note(self) -> str:
        """The event as a line of text memory: its time span and description."""
        return f"[{clock.label(self.start)} to {clock.split(self.end)[1]}] {self.description}"

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "keyframe": self.keyframe.wall_clock,
                "offset": self.keyframe.offset, "description": self.description}


THUMBNAIL = (32, 24)
"""The size scene changes are measured at."""


def thumbnail(frame: Frame, margin: float, size: tuple[int, int] = THUMBNAIL) -> np.ndarray:
    """The frame shrunk to ``size`` without its top and bottom ``margin`` (a fraction of its height). The
    JPEG is decoded at the smallest of its DCT scales (1/2 to 1/8) that still covers ``size``, or, when
    that scale is 1/8, the frame cache's preview is taken: the same pixels, decoded once when the cache
    was built (the cost of every frame the system observes)."""
    from PIL import Image

    if previewed(frame, margin, size):
        assert frame.preview is not None
        im = frame.preview.image()
    else:
        im = Image.open(io.BytesIO(frame.jpeg))
        im.draft("RGB", _covered(margin, size))
    with im:
        width, height = im.size
        box = (0, round(height * margin), width, round(height * (1 - margin)))
        return np.asarray(im.convert("RGB").crop(box).resize(size, Image.Resampling.BILINEAR), np.float32)


def previewed(frame: Frame, margin: float, size: tuple[int, int] = THUMBNAIL) -> bool:
    """Whether :func:`thumbnail` takes the frame's preview (microseconds) rather than decoding its JPEG."""
    return frame.preview is not None and frame.preview.serves(_covered(margin, size))


def _covered(margin: float, size: tuple[int, int]) -> tuple[int, int]:
    """The size whose crop of the ``margin`` rows still covers ``size``."""
    return size[0], round(size[1] / (1 - 2 * margin))


def change(a: np.ndarray, b: np.ndarray) -> float:
    """How much two thumbnails differ: mean absolute difference over pixels and channels (0–255)."""
    return float(np.abs(a - b).mean())


class EventMemory(StreamingSystem):
    """Event-structured memory: events cut on pixels, described by the writer, retrieved with BM25."""

    name = "Event Memory"
    declaration = Declaration("specialised", streaming=True, persistent=True, tag="reference system",
                              representation="event_tree")
    needs_writer = True
    through_backbone = True

    def __init__(self, cut: float = 4.0, min_event_s: int = 4, max_event_s: int = 60, margin: float = 0.1,
                 describe_frames: int = 4, max_tokens: int = 48, top_k: int = 3, recent_frames: int = 4,
                 name: str | None = None):
        super().__init__(name)
        self.cut, self.min_event_s, self.max_event_s, self.margin = cut, min_event_s, max_event_s, margin
        self.describe_frames, self.max_tokens = describe_frames, max_tokens
        self.top_k, self.recent_frames = top_k, recent_frames
        self.events: list[asyncio.Future[tuple[Event, str | None]]] = []

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.earlier: list[Event] = []
        self.turns = TurnLog()
        for session, _, kept in earlier_states(context, ".events.json"):
            self.earlier += [self._load(session, e) for e in kept["events"]]
            self.turns.read(kept)
        self.events = []
        """This session's closed events, each with its writer's error, as their descriptions are written."""
        self.open: list[Frame] = []
        self.latest: list[Frame] = []
        self.last: np.ndarray | None = None

    def _load(self, session: Session, kept: dict[str, Any]) -> Event:
        """An earlier session's event, its keyframe read from the state folder."""
        jpeg = session_path(self.context.state_dir, session, f".{kept['keyframe']}.jpg").read_bytes()
        frame = Frame(session.key, kept["offset"], kept["keyframe"], jpeg)
        return Event(session, kept["start"], kept["end"], frame, kept["description"])

    async def observe_frame(self, frame: Frame) -> None:
        if previewed(frame, self.margin):
            thumb = thumbnail(frame, self.margin)
        else:  # a JPEG decode: off the loop, so that other trajectories go on
            thumb = await asyncio.to_thread(thumbnail, frame, self.margin)
        scene_changed = self.last is not None and change(thumb, self.last) > self.cut
        long_enough = len(self.open) >= self.min_event_s
        if self.open and (scene_changed and long_enough or len(self.open) >= self.max_event_s):
            await self._close()
        self.open.append(frame)
        self.latest = [*self.latest, frame][-self.recent_frames :] if self.recent_frames else []
        self.last = thumb

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def _close(self) -> None:
        """Close the open event: its description is written while the stream goes on."""
        frames, self.open = self.open, []
        self.events.append(asyncio.ensure_future(self._described(frames)))

    async def _described(self, frames: list[Frame]) -> tuple[Event, str | None]:
        """The event of ``frames``: their middle frame and the writer's description of them; and the
        writer's error, if any."""
        shown = [frames[i] for i in uniform_indices(len(frames), self.describe_frames)]
        response = await write_about(self.context, DESCRIBE, shown, "Description:", self.max_tokens,
                                     f"event@{frames[0].label}")
        start, end = frames[0].wall_clock, frames[-1].wall_clock
        event = Event(self.context.session, start, end, frames[len(frames) // 2], response.text.strip())
        return event, response.error

    def _write(self, state_dir: Path, events: list[Event]) -> None:
        """The session's state files: one keyframe per event, then the events and turns."""
        for event in events:
            keyframe = event.keyframe
            write_atomically(session_path(state_dir, event.session, f".{keyframe.wall_clock}.jpg"), keyframe.jpeg)
        kept = {"events": [e.to_json() for e in events], "turns": self.turns.to_json()}
        write_redacted(session_path(state_dir, self.context.session, ".events.json"), kept)

    async def answer(self, probe: Probe) -> Answer:
        visible = set(probe.instance.visible_sessions)
        earlier = [e for e in self.earlier if e.session.key in visible]
        closed, latest, turns = list(self.events), self.latest, self.turns.shown(probe)
        probe.state_read()  # all it shows is taken: the events closed so far, the latest frames, the turns
        pool = earlier + [event for event, _ in await asyncio.gather(*closed)]
        chosen = [pool[i] for i in best_matches(probe.instance, [e.description for e in pool], self.top_k)]
        order = {s.key: s.index for s in probe.trajectory.sessions}
        frames = sorted({*(e.keyframe for e in chosen), *latest}, key=lambda f: (order[f.session], f.offset))
        notes = [Note(e.session, e.note(), e.end) for e in chosen if e.session != self.context.session]
        request = probe.request(frames=frames, notes=notes, turns=turns)
        return Answer(await ask(self.context.backbone, request, probe.instance), request)

    async def export(self, state_dir: Path) -> dict[str, Any]:
        if self.open:
            await self._close()
        described = await asyncio.gather(*self.events)
        events, errors = [event for event, _ in described], [error for _, error in described if error]
        await asyncio.to_thread(self._write, state_dir, events)  # each file is synced: off the loop
        return {"events": len(events), "writer_errors": len(errors), "error": errors[0] if errors else None}

    async def close(self) -> None:
        for pending in self.events:  # a replay that stopped mid-session leaves no description running
            pending.cancel()
