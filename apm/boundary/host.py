"""Any in-process streaming system (``apm.streaming.StreamingSystem``), run unchanged behind the process
boundary (docs/boundary.md, "Hosting an in-process system"): :class:`HostedSystem` is the harness side, a
:class:`~apm.boundary.child.ChildSystem` whose child is this environment's Python running :class:`Hosted`,
the child side, which builds the system from its memory config and drives it with apm objects rebuilt
from the wire.

In the child the system sees what it sees in process, less what the wire withholds: the trajectory's
sessions (no video paths, no trajectory id), the stream, an instance view with an opaque key, and a
``SessionContext`` whose engines are the harness's. ``probe.request`` has the harness compose and check
the request (``compose``), and a request so composed, sent to ``context.backbone``, goes back as the
probe's ``ask``; any other request goes back as a ``generate``. A system that works on the model itself
(``with_model``, ``generate_adapted``: ``kv_cache``, ``feature_memory``, ``parametric_memory``) gets, as
``context.backbone``, its own copy of the run's transformers backbone, built in the child from the run's
backbone config, whose ``generate`` still goes to the harness; its own answer names the composed request
it answered, so the record carries that request's prompt digest and frames, as in process.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import apm
import apm_child
from apm.backbones.base import Backbone, FramePart, GenerationSettings, Message, Part, Request, Response, TextPart
from apm.backbones.hf import HFBackbone
from apm.boundary.child import ChildSystem
from apm.data.frames import Frame
from apm.data.instances import Instance, Turn
from apm.data.model import Candidate, Session, Trajectory
from apm.memory.base import History
from apm.records.declaration import declared
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem
from apm.video.select import CausalityError

T = TypeVar("T")
WITHHELD = "hosted"
"""What the child is given for what the wire withholds: the trajectory id, and each session's video."""
CHILD = "apm.boundary.host:Hosted"
"""The child side, as ``python -m apm_child`` names it."""


def _plain(node: Any) -> Any:
    """A config node (an OmegaConf one from Hydra, interpolations resolved) as plain dicts and lists."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig | ListConfig) else node


def _class(config: dict[str, Any], where: str) -> type:
    from hydra.utils import get_class

    if not isinstance(config, dict) or "_target_" not in config:
        raise ValueError(f"{where}: the config of the system to host ({{_target_: …, its arguments}}), not {config!r}")
    return get_class(str(config["_target_"]))


def _model_folder(backbone: dict[str, Any] | None) -> list[str]:
    """The folder of a local transformers backbone's model, which the child loads its own copy from (made
    absolute in ``backbone``: the child runs in a scratch folder of its own)."""
    if not backbone or not issubclass(_class(backbone, "memory.run_backbone"), HFBackbone):
        return []
    model = Path(str(backbone.get("model", "")))
    if not model.is_dir():
        return []
    backbone["model"] = str(model.resolve())
    return [backbone["model"]]


class HostedSystem(ChildSystem):
    """An in-process streaming system (``system``: its memory config) in a child process of this
    environment's Python, sealed like any child system; declared as its class declares itself.
    ``run_backbone``: the run's backbone config (``${oc.select:backbone,null}``), from which a system that
    works on the model builds its own copy in the child; ``python``: the child's interpreter (default this
    one: the child imports this ``apm``)."""

    def __init__(self, system: Any, run_backbone: Any = None, name: str | None = None, python: str | None = None,
                 read: Sequence[str] = (), env: dict[str, str] | None = None, seal: str = "auto",
                 network: bool = False) -> None:
        system, backbone = _plain(system), _plain(run_backbone)
        cls = _class(system, "memory.system")
        if not issubclass(cls, StreamingSystem):
            raise TypeError(f"memory.system: {system['_target_']} is not a StreamingSystem; a memory protocol "
                            "reads no stream and needs no process of its own")
        declaration = declared(cls)
        if declaration is None:
            raise TypeError(f"memory.system: {system['_target_']} declares nothing (its class's declaration)")
        facts = declaration.as_record()
        deviations = facts.pop("deviations")
        own = str(system.get("name") or cls.name)
        self.package = Path(apm.__file__ or "apm").parent
        """This ``apm``, linked into the child's ``PYTHONPATH``: the child runs the harness's own code."""
        model = _model_folder(backbone)
        super().__init__([python or sys.executable, "-m", "apm_child", CHILD], facts,
                         name=name or f"{own} (child process)", options={"system": system, "backbone": backbone},
                         read=[str(self.package.resolve()), *model, *read], env=env, seal=seal, network=network,
                         deviations=deviations)

    def _populate(self, lib: Path) -> None:
        (lib / "apm").symlink_to(self.package.resolve(), target_is_directory=True)


# --- the child side ----------------------------------------------------------------------------------


def _frame(frame: apm_child.Frame) -> Frame:
    return Frame(frame.session, frame.offset, frame.wall_clock, frame.jpeg)  # the same bytes: they go back by reference


def _child_frame(frame: Frame) -> apm_child.Frame:
    return apm_child.Frame(frame.session, frame.offset, frame.wall_clock, frame.jpeg)


def _child_turn(turn: Turn) -> apm_child.Turn:
    return apm_child.Turn(turn.kind, turn.time, turn.text, turn.candidate_id)


def _turn(turn: apm_child.Turn) -> Turn:
    return Turn(turn.kind, turn.time, turn.text, turn.candidate)  # type: ignore[arg-type]  # a kind the harness sent


def _response(reply: apm_child.Reply) -> Response:
    return Response(text=reply.text, ttft_s=reply.ttft_s, total_s=reply.total_s, prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens, error=reply.error)


@dataclass
class _Composed:
    """A request ``probe.request`` made in the child: the harness's composition, and what it shows."""

    request: Request
    composed: apm_child.Composed
    frames: list[apm_child.Frame]
    notes: list[tuple[str, str, int]]
    turns: list[apm_child.Turn]


class Harnessed(Backbone):
    """The run's ``backbone`` or ``writer`` as a hosted system is handed it: a request goes back to the
    harness, the probe's ``ask`` when ``probe.request`` made it, else a ``generate``."""

    answers_from_annotations = False

    def __init__(self, host: Hosted, engine: str, name: str = "", max_frames: int | None = None) -> None:
        self.host, self.engine, self.name, self.max_frames = host, engine, name or engine, max_frames

    async def generate(self, request: Request) -> Response:
        return self.host.send(request, self.engine)


class _ModelInChild:
    """Mixed into the run's transformers backbone class: the model is loaded in the child (``with_model``,
    ``generate_adapted``), while ``generate`` goes to the harness as :class:`Harnessed`'s does."""

    host: Hosted

    async def generate(self, request: Request) -> Response:
        return self.host.send(request, "backbone")


def _backbone(host: Hosted, config: dict[str, Any] | None) -> Backbone:
    """What ``context.backbone`` is in the child: the run's transformers backbone as a copy of its own (not
    loaded until the system works on the model), or :class:`Harnessed`."""
    name = str((config or {}).get("name") or "backbone")
    max_frames = (config or {}).get("max_frames")
    if not config or not issubclass(cls := _class(config, "backbone"), HFBackbone):
        return Harnessed(host, "backbone", name, max_frames)
    local: Any = type(f"{cls.__name__}InChild", (_ModelInChild, cls), {})
    backbone = local(**{k: v for k, v in config.items() if not k.startswith("_")})
    backbone.host = host
    return backbone


class Hosted(apm_child.System):
    """The child side: the system its memory config names, driven on an event loop of its own."""

    def __init__(self, system: dict[str, Any], backbone: dict[str, Any] | None = None) -> None:
        from hydra.utils import instantiate

        super().__init__(system=system, backbone=backbone)
        self.system: StreamingSystem = instantiate(system, _convert_="all")
        mine = declared(self.system)
        record = mine.as_record() if mine is not None else {}
        self.name = self.system.name
        self.declaration = {k: record.get(k) for k in ("family", "streaming", "persistent", "representation")}
        self.deviations = tuple(record.get("deviations") or ())
        self.target = str(system["_target_"])
        self.loop = asyncio.new_event_loop()
        self.backbone = _backbone(self, backbone)
        self.writer = Harnessed(self, "writer", "writer")
        self.harness: apm_child.Harness | None = None
        self.trajectory: Trajectory | None = None
        self.composed: dict[int, _Composed] = {}
        self.asked: dict[int, tuple[Response, apm_child.Reply, Request]] = {}
        self.probe_id = ""

    def identity(self) -> dict[str, Any]:
        return {"hosted": self.target}

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(work)

    def begin(self, session: apm_child.Session, sessions: tuple[apm_child.Session, ...], state_dir: str, seed: int,
              harness: apm_child.Harness) -> None:
        self.harness = harness
        self.trajectory = Trajectory(WITHHELD, "", "", tuple(
            Session(WITHHELD, s.day_id, s.session_id, s.index, s.start, s.end, Path(WITHHELD)) for s in sessions))
        context = SessionContext(self.trajectory, self.trajectory.session(session.key), Path(state_dir), self.backbone,
                                 self.writer, seed)
        self._run(self.system.begin(context))

    def observe_frame(self, frame: apm_child.Frame) -> None:
        self._run(self.system.observe_frame(_frame(frame)))

    def observe_turn(self, turn: apm_child.Turn) -> None:
        self._run(self.system.observe_turn(_turn(turn)))

    def answer(self, probe: apm_child.Probe, harness: apm_child.Harness) -> apm_child.Answer:
        assert self.trajectory is not None  # begin came first
        self.harness, self.composed, self.asked, self.probe_id = harness, {}, {}, probe.id
        turns = tuple(_turn(t) for t in probe.turns)
        candidate = Candidate(probe.task, WITHHELD, probe.candidate, probe.fields)
        view = Instance(probe.id, WITHHELD, probe.candidate, probe.task, probe.family, "", None, probe.session,
                        probe.probe_time, probe.window_start, turns, probe.visible_sessions, None, None, candidate)
        answer = self._run(self.system.answer(Probe(view, self.trajectory, self._compose)))
        return self._wire(answer)

    def export(self, state_dir: str) -> dict[str, Any]:
        return self._run(self.system.export(Path(state_dir)))

    def _compose(self, history: History, frames: tuple[Frame, ...]) -> Request:
        """``probe.request``: the harness composes and checks the request around what the system shows."""
        assert self.harness is not None
        shown = [_child_frame(f) for f in frames]
        notes = [(n.session.key, n.text, n.formed_at) for n in history.notes]
        turns = [_child_turn(t) for t in history.turns]
        try:
            composed = self.harness.compose(shown, notes, turns)
        except RuntimeError as e:
            why = str(e).partition("causality: ")
            if why[1]:
                raise CausalityError(why[2]) from None  # as probe.request raises it in process
            raise
        ours = {id(c): f for c, f in zip(shown, frames)}
        messages = tuple(Message(m["role"], tuple(self._part(p, ours) for p in m["parts"]), m["time"])
                         for m in composed.messages)
        settings = GenerationSettings(**{**composed.settings, "stop": tuple(composed.settings.get("stop") or ())})
        request = Request(messages=messages, settings=settings, request_id=self.probe_id)
        self.composed[id(request)] = _Composed(request, composed, shown, notes, turns)
        return request

    @staticmethod
    def _part(part: dict[str, Any], ours: dict[int, Frame]) -> Part:
        if "text" in part:
            return TextPart(str(part["text"]))
        return FramePart(ours[id(part["frame"])], still=bool(part["still"]))

    def _made(self, request: Request) -> _Composed | None:
        """The composition behind a request ``probe.request`` made for the probe being answered, if it is one."""
        made = self.composed.get(id(request))
        return made if made is not None and made.request is request else None

    def send(self, request: Request, engine: str) -> Response:
        """A request of the system's to the run's ``engine``, through the harness."""
        assert self.harness is not None
        made = self._made(request) if engine == "backbone" else None
        if made is not None:
            reply = self.harness.ask(made.frames, made.notes, made.turns)
            response = _response(reply)
            self.asked[id(response)] = (response, reply, request)
            return response
        system, user = request.messages[:-1], request.messages[-1] if request.messages else None
        default = GenerationSettings(max_tokens=request.settings.max_tokens)
        if (user is None or request.settings != default
                or [m.role for m in request.messages] not in (["user"], ["system", "user"])
                or any(not isinstance(p, TextPart) for m in system for p in m.parts)
                or any(isinstance(p, FramePart) and p.still for p in user.parts)):
            return Response(error=f"{request.request_id}: through the boundary a free-form request is an optional "
                                  "system text and one user message of text and video frames, with max_tokens alone")
        parts = [p.text if isinstance(p, TextPart) else _child_frame(p.frame) for p in user.parts]
        said = "\n".join(p.text for m in system for p in m.parts if isinstance(p, TextPart))
        return _response(self.harness.generate(parts, said, request.settings.max_tokens, engine))

    def _wire(self, answer: Answer) -> apm_child.Answer:
        """The system's answer for the harness: the ``ask`` reply it is, or its own with the composed request
        it answered from (a request ``probe.request`` did not make cannot be recorded: refused)."""
        made = None
        if answer.request is not None:
            made = self._made(answer.request)
            if made is None:
                raise ValueError("the answer's request was not made by probe.request: through the boundary only "
                                 "a request the harness composed is recorded")
        drew = tuple(apm_child.Frame(f.session, f.offset, f.wall_clock, b"") for f in answer.frames)
        asked = self.asked.get(id(answer.response))
        if asked is not None and asked[0] is answer.response and asked[2] is answer.request:
            return apm_child.Answer(reply=asked[1], frames=drew)
        r = answer.response
        return apm_child.Answer(text=r.text, ttft_s=r.ttft_s, total_s=r.total_s, prompt_tokens=r.prompt_tokens,
                                completion_tokens=r.completion_tokens, error=r.error, frames=drew,
                                request=None if made is None else made.composed)

