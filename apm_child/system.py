"""What a streaming system sees on the child side of the boundary (docs/boundary.md): the session,
its frames and turns, the probes, and the harness it may ask the run's backbone through.

Everything here is plain data built from the wire; nothing names an answer (ids are opaque).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

PROTOCOL = 1
"""The protocol version this module speaks; the harness refuses a child that speaks another."""

DEVIATIONS = ("answers_write_state", "unseeded_sampling", "no_restorable_export", "prefix_recompute")
"""The ways an official loop may depart from the online protocol, as a system declares them."""


@dataclass(frozen=True)
class Session:
    """One session of the trajectory: ``key`` is ``DAYn/Sxxx``; ``start``/``end`` absolute seconds."""

    key: str
    day_id: str
    session_id: str
    index: int
    start: int
    end: int

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "Session":
        return cls(data["key"], data["day_id"], data["session_id"], int(data["index"]), int(data["start"]),
                   int(data["end"]))

    @property
    def file_stem(self) -> str:
        """A name for this session's state files, sorting in session order: ``0001_DAY1_S002``."""
        return "%04d_%s_%s" % (self.index, self.day_id, self.session_id)


@dataclass(frozen=True)
class Frame:
    """One 1-FPS frame: its session key, video offset (s), absolute wall-clock second and JPEG bytes."""

    session: str
    offset: float
    wall_clock: int
    jpeg: bytes = field(repr=False)

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "Frame":
        return cls(data["session"], float(data["offset"]), int(data["wall_clock"]), base64.b64decode(data["jpeg"]))

    def to_wire(self, by_reference: bool = False) -> Dict[str, Any]:
        """The frame for the harness; ``by_reference``: without its bytes (a frame the harness fed this
        session, unchanged: the harness has them)."""
        where = {"session": self.session, "offset": self.offset, "wall_clock": self.wall_clock}
        return where if by_reference else {**where, "jpeg": base64.b64encode(self.jpeg).decode("ascii")}


@dataclass(frozen=True)
class Turn:
    """What the user said at ``time`` (``kind``: question or registration); ``candidate`` is opaque, the
    same for every turn and probe of one conversation."""

    kind: str
    time: int
    text: str
    candidate: str

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "Turn":
        return cls(data["kind"], int(data["time"]), data.get("text", ""), data["candidate"])

    def to_wire(self) -> Dict[str, Any]:
        return {"kind": self.kind, "time": self.time, "text": self.text, "candidate": self.candidate}


@dataclass(frozen=True)
class Probe:
    """One instance to answer now: its question side only (``fields``: the question, its choices, the
    query point, the registration), never its answer, polarity or evidence."""

    id: str
    candidate: str
    task: str
    family: str
    session: str
    probe_time: int
    window_start: Optional[int]
    visible_sessions: Tuple[str, ...]
    turns: Tuple[Turn, ...]
    fields: Dict[str, Any]

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "Probe":
        return cls(data["id"], data["candidate"], data["task"], data["family"], data["session"],
                   int(data["probe_time"]), data.get("window_start"), tuple(data["visible_sessions"]),
                   tuple(Turn.from_wire(t) for t in data["turns"]), dict(data["fields"]))

    @property
    def question(self) -> str:
        """The question text (empty for a probe that has none, such as a window of a proactive task)."""
        return str(self.fields.get("question") or "")


@dataclass(frozen=True)
class Generated:
    """Generated text with its timing (``ttft_s`` from the start of generation) and token counts, or ``error``."""

    text: str = ""
    ttft_s: Optional[float] = None
    total_s: float = 0.0
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    error: Optional[str] = None


@dataclass(frozen=True)
class Reply(Generated):
    """What the run's backbone answered."""

    id: int = -1
    """Which of the probe's ``ask`` calls this is (an :class:`Answer` may name it); -1 for ``generate``."""

    @classmethod
    def from_wire(cls, data: Dict[str, Any]) -> "Reply":
        return cls(text=str(data.get("text") or ""), ttft_s=data.get("ttft_s"),
                   total_s=float(data.get("total_s") or 0.0), prompt_tokens=data.get("prompt_tokens"),
                   completion_tokens=data.get("completion_tokens"), error=data.get("error"),
                   id=int(data.get("id", -1)))


@dataclass(frozen=True)
class Composed:
    """The request the harness composed around what a probe shows (:meth:`Harness.compose`): the run's one
    request layout as chat ``messages`` (each ``{"role", "time", "parts"}``, a part ``{"text": str}`` or
    ``{"frame": Frame, "still": bool}``, the frames those you gave, in the layout's places) and the run's
    generation ``settings``; ``id`` is which of the probe's ``compose`` calls it is. For a system that
    answers with a model of its own from the run's text: an :class:`Answer` that names it (``request=``)
    puts its prompt digest and frames on the record."""

    id: int
    messages: Tuple[Dict[str, Any], ...]
    settings: Dict[str, Any]


@dataclass(frozen=True)
class Answer(Generated):
    """A probe's answer. Either ``reply``: one of this probe's ``harness.ask`` replies (the record then
    carries the request it answered), or the system's own: ``text`` with its timing, and the frames it
    drew on (a cache of its own in place of a request). ``frames`` beside a ``reply`` are recorded as
    what the answer drew on, in place of the request's, as in process."""

    frames: Tuple[Frame, ...] = ()
    reply: Optional[Reply] = None
    request: Optional[Composed] = None
    """With an answer of your own: the :meth:`Harness.compose` request it was generated from (the record
    then carries that request's prompt digest and frames, as for ``reply``; nothing is sent)."""

    def to_wire(self) -> Dict[str, Any]:
        frames = [{"session": f.session, "offset": f.offset, "wall_clock": f.wall_clock} for f in self.frames]
        if self.reply is not None:
            return {"reply": self.reply.id, **({"frames": frames} if frames else {})}
        composed = {} if self.request is None else {"request": self.request.id}
        return {"text": self.text, "ttft_s": self.ttft_s, "total_s": self.total_s,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "error": self.error, **composed, "frames": frames}


class Harness:
    """The run's engines, reached through the boundary: every request goes to the harness, which
    composes, checks, sends and records it as for an in-process system."""

    def __init__(self, call: Callable[[Dict[str, Any]], Dict[str, Any]],
                 fed: Optional[Dict[Tuple[str, float], bytes]] = None) -> None:
        self._call = call
        self._fed = fed if fed is not None else {}
        """The bytes of each frame the harness holds this session (fed, or sent with a request): such a
        frame, unchanged, is sent by reference."""

    def _wire(self, frame: Frame) -> Dict[str, Any]:
        """A frame for a request: by reference when the harness holds these very bytes (fed, or sent
        earlier in the session), else with its bytes, which the harness then holds for the session."""
        key = (frame.session, frame.offset)
        held = self._fed.get(key) is frame.jpeg
        self._fed[key] = frame.jpeg
        return frame.to_wire(by_reference=held)

    def ask(self, frames: Sequence[Frame] = (), notes: Sequence[Tuple[str, str, int]] = (),
            turns: Sequence[Turn] = ()) -> Reply:
        """Answer the probe being asked through the run's backbone, showing ``frames`` (oldest first),
        text ``notes`` as ``(session key, text, formed_at second)`` and earlier-session ``turns``; the
        harness adds the current session's turns, the time and the probe prompt (the run's one request
        layout) and refuses anything formed after the probe or outside its visible sessions. Only
        during :meth:`System.answer`."""
        return Reply.from_wire(self._call({
            "call": "ask", "frames": [self._wire(f) for f in frames],
            "notes": [{"session": s, "text": t, "formed_at": at} for s, t, at in notes],
            "turns": [t.to_wire() for t in turns]}))

    def compose(self, frames: Sequence[Frame] = (), notes: Sequence[Tuple[str, str, int]] = (),
                turns: Sequence[Turn] = ()) -> Composed:
        """The request :meth:`ask` would send for these ``frames``, ``notes`` and ``turns``, composed and
        checked by the harness but not sent: for a system that answers with a model of its own from the
        run's text (then ``Answer(text=…, request=composed)``). Frames travel without their bytes (the
        harness needs only where and when each was recorded). Only during :meth:`System.answer`."""
        reply = self._call({
            "call": "compose", "frames": [f.to_wire(by_reference=True) for f in frames],
            "notes": [{"session": s, "text": t, "formed_at": at} for s, t, at in notes],
            "turns": [t.to_wire() for t in turns]})
        messages = tuple({"role": m["role"], "time": m.get("time"),
                          "parts": [{"text": p["text"]} if "text" in p
                                    else {"frame": frames[int(p["frame"])], "still": bool(p.get("still"))}
                                    for p in m["parts"]]} for m in reply["messages"])
        return Composed(int(reply["id"]), messages, dict(reply["settings"]))

    def generate(self, parts: Sequence[Any], system: str = "", max_tokens: Optional[int] = None,
                 engine: str = "writer") -> Reply:
        """A free-form request to the run's ``writer`` (or ``backbone``): one user message of ``parts``,
        each a ``str`` or a :class:`Frame`, after an optional ``system`` message (e.g. describing an event)."""
        wire: List[Dict[str, Any]] = [{"text": p} if isinstance(p, str) else {"frame": self._wire(p)} for p in parts]
        return Reply.from_wire(self._call({"call": "generate", "engine": engine, "system": system,
                                           "parts": wire, "max_tokens": max_tokens}))


class System:
    """A streaming memory system on the child side. The harness drives one session at a time, in
    order: :meth:`begin`, every frame and turn in wall-clock order with each probe answered at its
    time, :meth:`export`. A fresh process runs each trajectory and each restricted (EA) visible set,
    so nothing but the state folder survives between them."""

    name = "Child system"
    declaration: Dict[str, Any] = {"family": "specialised", "streaming": True, "persistent": True,
                                   "representation": ""}
    """What the system is (as ``apm.records.declaration.Declaration``); the memory config declares the
    same, and the harness refuses a child whose declaration differs."""
    deviations: Tuple[str, ...] = ()
    """Where the system departs from the online protocol (:data:`DEVIATIONS`); recorded and printed."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def identity(self) -> Dict[str, Any]:
        """What the record should say produced the numbers (versions, upstream commit); default none."""
        return {}

    def begin(self, session: Session, sessions: Tuple[Session, ...], state_dir: str, seed: int,
              harness: Harness) -> None:
        """Start ``session`` from ``state_dir`` (exactly what :meth:`export` left after the previous
        session); ``sessions`` are the trajectory's, in order; ``seed`` seeds anything random."""
        raise NotImplementedError

    def observe_frame(self, frame: Frame) -> None:
        """Ingest one frame (a timed memory update)."""
        raise NotImplementedError

    def observe_turn(self, turn: Turn) -> None:
        """Ingest a user turn (a timed memory update); default: ignore it."""

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        """Answer ``probe`` from the current state, leaving that state unchanged."""
        raise NotImplementedError

    def export(self, state_dir: str) -> Dict[str, Any]:
        """Write the persistent state into ``state_dir``; return facts for the session's memory line."""
        raise NotImplementedError
