"""The streaming-system contract (DESIGN.md, "Streaming memory systems"; docs/streaming-systems.md).

A streaming memory system ingests the stream itself, as the paper's specialised systems do (KV
caches, visual tokens, event trees, parametric memory, reasoning thoughts). The runner replays each
session in wall-clock order, one session at a time per system object (each trajectory through its own
copy, trajectories concurrently, unless the system declares ``serial``):

1. ``begin(context)``: the session starts; ``context.state_dir`` holds exactly what ``export`` left
   after the previous session of the trajectory (nothing before the first).
2. ``observe_frame(frame)`` for each 1-FPS frame of the frame cache and ``observe_turn(turn)`` for
   each user turn, in time order — never one after the probe being answered.
3. ``answer(probe)`` at each probe time, from the state as it is then. Probes are independent: an
   answer must leave the in-session state as it found it (answer from a fork, or on a path that
   does not write), so what a later probe sees never depends on which probes were asked.
4. ``export(state_dir)`` at the session end: write the persistent state; its bytes on disk are
   measured like every memory protocol's (Eq. 2, Table 10).

Every call of a session depends only on the state folder, the session's stream and the engines, so
a session replayed after a crash rebuilds the same state. A probe carries an instance view without
the annotations, and an EA instance is answered by a fresh copy of the system fed its visible
sessions alone (docs/streaming-systems.md, "Restricted instances (EA)"). A new system is one subclass plus one
YAML file under ``conf/memory/`` (its ``_target_``), inside or outside this package.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from apm.backbones.base import Request, Response
from apm.backbones.hf import HFBackbone
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Instance, Turn
from apm.data.model import Session, Trajectory
from apm.memory.base import History, Note, StateManifest
from apm.records.declaration import Declaration, declared

T = TypeVar("T")


FAST_WEIGHTS = "fast_weights"
"""The state folder's sub-folder for fast weights: parameters a system adapts as it watches (parametric
memory). They are state (in the memory line's ``state`` and digest, read by later sessions) but measured
apart, as ``fast_weight_bytes``, never in per-video storage (``bytes``): the paper's B.4 — for a system
declared ``representation="parametric"`` only (:func:`fast_weights_apart`); any other method's files
there are per-video storage like the rest."""


def fast_weights_apart(method: object) -> bool:
    """Whether ``method``'s files under :data:`FAST_WEIGHTS` are measured apart from per-video storage:
    only a system whose declaration has ``representation="parametric"``."""
    found = declared(method)
    return found is not None and found.representation == "parametric"


def storage_bytes(state: StateManifest, apart: bool = True) -> dict[str, int]:
    """A state's size as its memory line reports it: ``bytes`` (per-video storage, Eq. 2: every file but,
    with ``apart``, the fast weights) and ``fast_weight_bytes`` (with ``apart``, the files under
    :data:`FAST_WEIGHTS`; else 0). The runner passes ``apart=fast_weights_apart(method)``."""
    fast = sum(entry["bytes"] for path, entry in state.items() if path.startswith(f"{FAST_WEIGHTS}/")) if apart else 0
    return {"bytes": sum(entry["bytes"] for entry in state.values()) - fast, "fast_weight_bytes": fast}


@dataclass(frozen=True)
class SessionContext:
    """What a session starts from: where it lies, the state exported before it, and the run's engines."""

    trajectory: Trajectory
    session: Session
    state_dir: Path
    """The trajectory's state folder, as ``export`` left it after the previous session."""
    backbone: Any
    """The run's backbone: a system without a model of its own answers through it."""
    writer: Any
    """The run's writer backbone (the backbone itself unless ``writer=`` is set): text it keeps in memory;
    ``None`` for a system that does not declare ``needs_writer``."""
    seed: int = 0
    """The session's seed (:func:`session_seed`): anything random the system does in the session draws from it."""


@dataclass(frozen=True)
class Probe:
    """One instance to answer now (``instance``: its view, no annotations); ``request`` builds the run's
    one request layout from what the system shows."""

    instance: Instance
    trajectory: Trajectory
    compose: Callable[[History, tuple[Frame, ...]], Request] = field(repr=False)
    read: Callable[[], None] = field(default=lambda: None, repr=False)
    """Told once the answer has read from the system's state all it will show (:meth:`state_read`)."""

    def state_read(self) -> None:
        """Say that the answer has taken from the system's state everything it will show: a system that
        replays ``through_backbone`` may then be fed what comes next while the answer goes on (composing
        the request says it too)."""
        self.read()

    def request(self, frames: Sequence[Frame] = (), notes: Iterable[Note] = (),
                turns: Iterable[Turn] = ()) -> Request:
        """The instance's request with these frames (oldest first), text memories and earlier-session turns;
        the current session's own turns, the time and the probe prompt are added as for every protocol.
        Everything shown is checked like a protocol's history (each item's formed-at time)."""
        return self.compose(History(notes=tuple(notes), turns=tuple(turns)), tuple(frames))


@dataclass(frozen=True)
class Answer:
    """What a system answered: the response, and what it was based on (for the record)."""

    response: Response
    """Text, timing (``ttft_s`` from the start of generation, ``total_s``), tokens, error: as a backbone's."""
    request: Request | None = None
    """The request the answer was generated from, if any: its prompt digest (and frames) go on the record."""
    frames: tuple[Frame, ...] = ()
    """The frames the answer drew on, where the request does not carry them (a system's own cache): only
    their session, offset and wall clock are recorded."""


class StreamingSystem(abc.ABC):
    """Base class of streaming memory systems; the runner drives one session at a time through it."""

    name: str = "Streaming memory system"
    """How tables print the system; a config's ``name`` overrides it."""
    declaration: ClassVar[Declaration | None] = Declaration("specialised", streaming=True)
    """What the system is (docs/streaming-systems.md, "Declaring a system"). ``streaming``: takes
    streaming input (Table 3), so latency runs from the last required update to the first token;
    False: it processes the causal prefix when asked, and latency covers that processing.
    ``persistent`` (whether later sessions read its exported state) is the subclass's to declare."""
    needs_writer: ClassVar[bool] = False
    """Whether the system asks the run's writer backbone for text it keeps (``SessionContext.writer``;
    ``None`` otherwise): only then is the writer part of the method (its label and config hash)."""
    serial: ClassVar[bool] = False
    """False: each trajectory replays through its own copy of the system as configured (``copy.deepcopy``
    before anything is observed), up to the run's ``concurrency`` trajectories at once. True: the run
    drives every session through its one object, one trajectory at a time (a system holding what it
    cannot copy or share, such as a model it loaded itself)."""

    through_backbone: ClassVar[bool] = False
    """True: the system reaches models only through the run's backbone and writer (``SessionContext``), and
    its ``answer`` reads its state only until it says so (``Probe.state_read``) or composes its request
    (``Probe.request``); what it does after that (waiting for its writer, sending) reads none of it.
    The run then lets its replays hold no slot between requests (each request takes one) and goes on with
    the stream while a composed probe is in flight (docs/streaming-systems.md, "What the runner does per
    session"). False: a trajectory holds one slot for its whole replay and each answer ends before the
    stream goes on."""

    def __init__(self, name: str | None = None):
        if name:
            self.name = name

    @abc.abstractmethod
    async def begin(self, context: SessionContext) -> None:
        """Start ``context.session`` from the state in ``context.state_dir``; drop any earlier in-session state."""

    @abc.abstractmethod
    async def observe_frame(self, frame: Frame) -> None:
        """Ingest the frame recorded at ``frame.wall_clock`` (video offset ``frame.offset``): a memory update."""

    async def observe_turn(self, turn: Turn) -> None:
        """Ingest what the user said at ``turn.time`` (an ERA question, a registration); default: ignore it."""

    @abc.abstractmethod
    async def answer(self, probe: Probe) -> Answer:
        """Answer ``probe.instance`` from the current state, leaving that state unchanged."""

    @abc.abstractmethod
    async def export(self, state_dir: Path) -> dict[str, Any]:
        """Write the persistent state after the session into ``state_dir``; return facts for its memory
        line (``{"error": why}`` among them when the update failed: ``rerun=errors`` redoes it)."""

    async def close(self) -> None:
        """Release what this copy holds (a child process) once the runner is done with it; default: nothing."""


def session_seed(trajectory: Trajectory, session: Session, seed: int | None) -> int:
    """A session's seed: the run's ``generation.seed`` mixed with the trajectory and session, so every
    session draws its own numbers and a replay draws the same ones (a 31-bit integer)."""
    text = f"{seed}/{trajectory.trajectory_id}/{session.key}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big") & 0x7FFFFFFF


def own_turns(turns: Iterable[Turn], probe: Probe) -> list[Turn]:
    """The kept turns an instance may be shown: its own candidate's, said in its visible earlier sessions."""
    inst = probe.instance
    earlier = [probe.trajectory.session(k) for k in inst.visible_sessions[:-1]]
    return [t for t in turns if t.candidate_id == inst.candidate_id and any(s.contains(t.time) for s in earlier)]


class TurnLog:
    """What the user said, as a system keeps it: the earlier sessions' turns (read back from their state
    files) and this session's (to export with it)."""

    def __init__(self) -> None:
        self.earlier: list[Turn] = []
        self.now: list[Turn] = []

    def read(self, kept: dict[str, Any]) -> None:
        """Add an earlier session's turns, as ``to_json`` wrote them into its state file's ``turns``."""
        self.earlier += [Turn(t["kind"], t["time"], t["text"], t["candidate_id"]) for t in kept["turns"]]

    def hear(self, turn: Turn) -> None:
        """Keep a turn of this session."""
        self.now.append(turn)

    def shown(self, probe: Probe) -> list[Turn]:
        """The earlier turns the probe's instance may be shown (:func:`own_turns`)."""
        return own_turns(self.earlier, probe)

    def to_json(self) -> list[dict[str, Any]]:
        """This session's turns as plain JSON objects, for its state file."""
        return [{"kind": t.kind, "time": t.time, "text": t.text, "candidate_id": t.candidate_id} for t in self.now]


def earlier_states(context: SessionContext, suffix: str) -> list[tuple[Session, Path, Any]]:
    """Each earlier session's JSON state file ending ``suffix`` that is in the state folder, with its
    content, oldest first."""
    earlier = context.trajectory.sessions[: context.session.index]
    found = [(s, session_path(context.state_dir, s, suffix)) for s in earlier]
    return [(s, path, json.loads(path.read_text(encoding="utf-8"))) for s, path in found if path.exists()]


def read_earlier(context: SessionContext, suffix: str,
                 load: Callable[[Session, Any, Path], list[T]]) -> tuple[list[T], TurnLog]:
    """What a system kept of each earlier session (``load(session, content, path)`` of its JSON state file
    ending ``suffix``, oldest first), and the turns those files hold."""
    kept: list[T] = []
    turns = TurnLog()
    for session, path, content in earlier_states(context, suffix):
        kept += load(session, content, path)
        turns.read(content)
    return kept, turns


def transformers_backbone(system: str, backbone: Any) -> HFBackbone:
    """The run's backbone as a system that works on the model's weights needs it, or a one-line refusal."""
    if not isinstance(backbone, HFBackbone):
        raise TypeError(f"{system} works on a transformers model: run it with an HFBackbone "
                        f"(backbone=tiny_qwen2vl_hf, …), not {type(backbone).__name__}")
    return backbone
