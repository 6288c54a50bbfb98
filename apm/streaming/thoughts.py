"""Thought memory, in the spirit of VST: the model writes short thoughts while it watches, and they are
its memory.

Every ``every_s`` seconds of a session's stream (after its ``every_s``-th, ``2·every_s``-th … frame,
and once more at the session end for the frames since the last one), the run's writer backbone writes
one thought from the ``think_frames`` latest frames and the previous thought (so thoughts chain, across
sessions too). A thought is formed at the wall clock of the latest frame it was written from. A probe
recalls ``top_k`` thoughts of the visible earlier sessions and the current one — ``recall="bm25"``
(default): those that match the instance best (BM25, as ``retrieval_bm25``; only matches above 0);
``recall="latest"``: the latest ones — and answers through the run's backbone with them as text
notes (oldest first), plus the ``recent_frames`` latest frames.

State per session: ``<session>.thoughts.json`` (each thought's time, video offset and text; the user's
turns). The instruction is this reference's own, not one of the paper's Appendix E prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from apm.backbones.base import ask
from apm.data import clock
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Turn
from apm.data.model import Session
from apm.memory.base import Note
from apm.records.atomic import write_redacted
from apm.records.declaration import Declaration
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem, TurnLog, earlier_states
from apm.streaming.written import best_matches, write_about

THINK = ("You are watching an egocentric video as it streams. In one or two sentences, write down what "
         "you notice in the latest seconds that may matter later: objects, colours, places, any words "
         "shown, and what the wearer does.")
PREVIOUS = "Your previous thought:"
CUE = "Thought:"
RECALLS = ("bm25", "latest")
"""How a probe picks its thoughts: the best BM25 matches to its question, or the latest ones."""


@dataclass(frozen=True)
class Thought:
    """What the model wrote at second ``time`` (video offset ``offset``) of a session while watching it."""

    session: Session
    time: int
    offset: float
    text: str

    def note(self) -> Note:
        """The thought as a text memory, stamped with when it was written (its formed-at time)."""
        return Note(self.session, f"[{clock.label(self.time)}] {self.text}", self.time)

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "offset": self.offset, "text": self.text}


class ThoughtMemory(StreamingSystem):
    """Reasoning-thought memory: thoughts written by the writer as the stream goes, recalled at answer time."""

    name = "Thought Memory (VST-like)"
    declaration = Declaration("specialised", streaming=True, persistent=True, tag="reference system",
                              representation="reasoning_thoughts")
    needs_writer = True
    through_backbone = True

    def __init__(self, every_s: int = 10, think_frames: int = 4, max_tokens: int = 48,
                 recall: Literal["bm25", "latest"] = "bm25", top_k: int = 4, recent_frames: int = 4,
                 name: str | None = None):
        super().__init__(name)
        if recall not in RECALLS:
            raise ValueError(f"thought_memory: recall must be one of {list(RECALLS)}, not {recall!r}")
        if every_s < 1 or think_frames < 1:
            raise ValueError("thought_memory: every_s and think_frames must be at least 1")
        self.every_s, self.think_frames, self.max_tokens = every_s, think_frames, max_tokens
        self.recall, self.top_k, self.recent_frames = recall, top_k, recent_frames

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.earlier: list[Thought] = []
        self.turns = TurnLog()
        for session, _, kept in earlier_states(context, ".thoughts.json"):
            self.earlier += [Thought(session, t["time"], t["offset"], t["text"]) for t in kept["thoughts"]]
            self.turns.read(kept)
        self.thoughts: list[Thought] = []
        self.unthought: list[Frame] = []
        """The frames since the latest thought (the next one is written when ``every_s`` have come)."""
        self.latest: list[Frame] = []
        self.errors: list[str] = []

    async def observe_frame(self, frame: Frame) -> None:
        self.unthought.append(frame)
        self.latest = [*self.latest, frame][-max(self.think_frames, self.recent_frames) :]
        if len(self.unthought) >= self.every_s:
            await self._think()

    async def observe_turn(self, turn: Turn) -> None:
        self.turns.hear(turn)

    async def _think(self) -> None:
        """Write the next thought from the latest frames and the previous thought."""
        frame = self.unthought[-1]
        self.unthought = []
        previous = (self.earlier + self.thoughts)[-1:]
        instruction = "\n\n".join([THINK, *(f"{PREVIOUS} {t.text}" for t in previous)])
        response = await write_about(self.context, instruction, self.latest[-self.think_frames :], CUE,
                                     self.max_tokens, f"thought@{frame.label}")
        if response.error:
            self.errors.append(response.error)
        self.thoughts.append(Thought(self.context.session, frame.wall_clock, frame.offset, response.text.strip()))

    def recalled(self, probe: Probe) -> list[Thought]:
        """The thoughts the probe is shown, oldest first: of its visible sessions, picked by ``recall``."""
        visible = set(probe.instance.visible_sessions)
        pool = [t for t in self.earlier if t.session.key in visible] + self.thoughts
        if self.recall == "latest":
            return pool[-self.top_k :] if self.top_k else []
        return [pool[i] for i in best_matches(probe.instance, [t.text for t in pool], self.top_k)]

    async def answer(self, probe: Probe) -> Answer:
        frames = self.latest[-self.recent_frames :] if self.recent_frames else []
        notes = [t.note() for t in self.recalled(probe)]
        request = probe.request(frames=frames, notes=notes, turns=self.turns.shown(probe))
        return Answer(await ask(self.context.backbone, request, probe.instance), request)

    async def export(self, state_dir: Path) -> dict[str, Any]:
        if self.unthought:
            await self._think()
        kept = {"thoughts": [t.to_json() for t in self.thoughts], "turns": self.turns.to_json()}
        write_redacted(session_path(state_dir, self.context.session, ".thoughts.json"), kept)
        return {"thoughts": len(self.thoughts), "writer_errors": len(self.errors),
                "error": self.errors[0] if self.errors else None}
