"""The backbone contract: one request/response shape for every model engine (DESIGN.md, "Backbones").

A backbone is any object with a ``name``, ``async start()``, ``async close()`` and
``async generate(request) -> Response`` (:class:`BackboneLike`). :class:`Backbone` declares every
optional capability the runner and the judge use, each with a default that means "not offered";
subclass it to offer one, and get the async context manager and :meth:`Backbone.generate_sync` too.
A backbone that only has the required members is taken as it is through :func:`as_backbone`, with
every capability at its default. Failures a run should record and go past are returned in
:attr:`Response.error`, never raised.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from itertools import groupby
from typing import Any, Literal, Protocol, runtime_checkable

from apm.backbones.weights import local_model
from apm.data.frames import Frame
from apm.data.instances import Instance
from apm.records.declaration import Declaration, declared

Role = Literal["system", "user", "assistant"]


class EndpointError(RuntimeError):
    """A preflight check failed; the message is one line saying what to change (here, not in
    ``openai_api``, so an engine without the HTTP client's dependencies can raise it)."""


@dataclass(frozen=True)
class TextPart:
    """Plain text inside a message."""

    text: str


@dataclass(frozen=True)
class FramePart:
    """One video frame inside a user message; its JPEG bytes are sent as they are."""

    frame: Frame
    still: bool = False
    """Sent as an image of its own on every engine, never inside a video: each still is a media item
    an engine caches by itself, so a request that extends another's stills shares their prefix (the
    ``session_stable`` layout's current prefix, docs/prompts.md)."""


Part = TextPart | FramePart


class Stills(tuple[Frame, ...]):
    """A run of consecutive still frames (:attr:`FramePart.still`): one image per frame on every engine."""


Segment = TextPart | tuple[Frame, ...]
"""What an engine encodes, in order: a text part, or a run of consecutive frames (one video, or one
image per frame; a :class:`Stills` run always as images)."""


@dataclass(frozen=True)
class Message:
    """One chat turn; ``time`` is the absolute wall-clock second it happens at, when it has one."""

    role: Role
    parts: tuple[Part, ...]
    time: int | None = None

    @classmethod
    def text(cls, role: Role, text: str, time: int | None = None) -> Message:
        """A turn made of a single text part."""
        return cls(role, (TextPart(text),), time)

    @property
    def frames(self) -> tuple[Frame, ...]:
        return tuple(p.frame for p in self.parts if isinstance(p, FramePart))

    def segments(self) -> list[Segment]:
        """The parts as every engine encodes them: each text part, and each run of frames as one segment."""
        out: list[Segment] = []
        for kind, run in groupby(self.parts, key=_kind):
            if kind == "text":
                out.extend(run)  # type: ignore[arg-type]
            else:
                frames = tuple(p.frame for p in run)  # type: ignore[union-attr]
                out.append(Stills(frames) if kind == "still" else frames)
        return out


def _kind(part: Part) -> str:
    """How a part is encoded: ``text``, a frame of a ``video`` run, or a ``still``."""
    if isinstance(part, TextPart):
        return "text"
    return "still" if part.still else "video"


@dataclass(frozen=True)
class VideoTiming:
    """When the frames of a video segment were recorded, as engines take it: frame ``i`` of the
    segment is ``frames_indices[i] / fps`` seconds after its earliest session's start (video offset 0),
    so a segment over several sessions keeps the real gaps between them."""

    fps: float
    frames_indices: tuple[int, ...]

    @property
    def total_num_frames(self) -> int:
        return self.frames_indices[-1] + 1

    def metadata(self) -> dict[str, Any]:
        """The video metadata transformers' processors and vLLM's multi-modal inputs read timestamps from."""
        n = self.total_num_frames
        return {"fps": self.fps, "frames_indices": list(self.frames_indices), "total_num_frames": n,
                "duration": n / self.fps}


def _since(frame: Frame) -> tuple[Fraction, int]:
    """A frame's video offset (exact) and its session's start (absolute second)."""
    offset = Fraction(frame.offset).limit_denominator(1000)
    return offset, frame.wall_clock - math.floor(offset)


def video_timing(frames: Sequence[Frame]) -> VideoTiming:
    """The true timing of ``frames`` as one video: integer indices at the coarsest exact ``fps``."""
    timed = [_since(f) for f in frames]
    origin = min(start for _, start in timed)
    times = [start - origin + offset for offset, start in timed]
    fps = math.lcm(*(t.denominator for t in times))
    return VideoTiming(float(fps), tuple(int(t * fps) for t in times))


def frame_uuid(frame: Frame) -> str:
    """A frame's media-item id for engine caches: its frame-cache entry and video offset (its JPEG's
    digest when it was not read from the cache), the same in every request that shows it."""
    if frame.entry:
        return f"{frame.entry}@{frame.offset!r}"
    return hashlib.sha256(frame.jpeg).hexdigest()[:40]


def video_uuid(frames: Sequence[Frame]) -> str:
    """A video segment's media-item id for engine caches: its frames' ids and its timing."""
    timing = video_timing(frames)
    spec = [[frame_uuid(f) for f in frames], timing.fps, timing.frames_indices]
    return "v" + hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:40]


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings; ``json_output`` asks the engine for a JSON object where it can."""

    max_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    json_output: bool = False
    json_schema: dict[str, Any] | None = None
    """A JSON Schema the reply must follow (guided decoding, where the engine offers it)."""


@dataclass(frozen=True)
class Request:
    """What a backbone is asked: the chat and the settings — and nothing of the annotations (the
    reference baselines get the instance on their own channel, :func:`ask`)."""

    messages: tuple[Message, ...]
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    request_id: str = ""
    """The id used in logs: for an instance's request, the run's opaque id of it
    (``apm.data.instances.opaque_id``), never its key (which names a probe's polarity)."""
    trajectory_id: str | None = None
    """The trajectory asked about: engines route all of a trajectory's probes to one engine (caches)."""

    @property
    def frames(self) -> tuple[Frame, ...]:
        """Every frame of the request, in message order."""
        return tuple(f for m in self.messages for f in m.frames)


@dataclass(frozen=True)
class Truncation:
    """What a context-length guard dropped from a request, so no cut is ever silent."""

    reason: Literal["max_frames", "max_context_tokens"]
    policy: str
    """How frames were chosen to drop: ``uniform`` (even subsample) or ``oldest`` (keep the latest)."""
    frames_before: int
    frames_after: int
    est_tokens_before: int
    est_tokens_after: int
    dropped_wall_clock: tuple[int, ...] = ()
    """Wall-clock seconds of the dropped frames."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Response:
    """What a backbone answered, with its timing and token counts (from the one final attempt)."""

    text: str = ""
    ttft_s: float | None = None
    """Seconds from sending the final attempt to its first content token (None: none arrived)."""
    total_s: float = 0.0
    """Seconds from sending the final attempt to its last token: the engine's latency."""
    elapsed_s: float = 0.0
    """Seconds the whole call took: encoding, queueing for a slot, failed attempts and back-off included."""
    encode_s: float | None = None
    """Seconds the client took to encode the request before sending it (context guard, base64, JSON),
    before ``ttft_s`` and ``total_s`` start; None: the engine takes no encoded request (in process)."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens the engine served from its prefix cache (None where it does not report them)."""
    finish_reason: str | None = None
    error: str | None = None
    """Why no usable answer came back; the run records it and goes on."""
    error_kind: str | None = None
    """What kind of failure ``error`` is, where the engine tells (``auth``, ``not_found``, ``connection``,
    ``bad_request``, ``context``, ``rate_limit``, ``server``, ``timeout``, ``stream``, ``http``): the
    runner stops after consecutive ``auth`` / ``not_found`` / ``connection`` failures."""
    attempts: int = 1
    """Attempts made (HTTP attempts for remote engines); counts describe only the last one."""
    truncation: Truncation | None = None
    model: str | None = None
    """The model the engine says answered (an OpenAI-compatible reply's ``model``: the served
    snapshot, e.g. a dated API version); None where the engine reports none."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class BackboneLike(Protocol):
    """The required members: what every backbone has, whatever the class derives from."""

    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, request: Request) -> Response: ...


class Guard(Protocol):
    """What the runner asks of a backbone's context guard (:class:`apm.backbones.guard.ContextGuard`):
    the frames to choose for a request's text, what that choice left out, and the cut it makes at send time."""

    @property
    def frames_per_still(self) -> float:
        """How many video frames' tokens one still costs (the ``session_stable`` layout's unit for stills)."""
        ...

    def selection_budget(self, request: Request) -> int | None: ...

    def budget_truncation(self, chosen: Request, fitted: Request) -> Truncation: ...

    def apply(self, request: Request) -> tuple[Request, Truncation | None]: ...


async def ask(backbone: Backbone, request: Request, instance: Instance) -> Response:
    """Send ``request`` about ``instance``: the ground truth goes only to a backbone that declares
    ``answers_from_annotations`` (a reference baseline); every other backbone gets the request alone."""
    if backbone.answers_from_annotations:
        return await backbone.answer_instance(request, instance)
    return await backbone.generate(request)


class Backbone(abc.ABC):
    """The whole contract: the required members plus every optional capability, each defaulting to
    "not offered" (docs/backbones.md, "The contract"); the runner and the judge read them directly."""

    name: str = "backbone"
    declaration: Declaration | None = None
    """What the backbone is (docs/backbones.md, "Declaring a backbone"): a ``baseline`` or ``reference``
    makes every method on it a reference row, tagged; undeclared (or ``general``), the method is what
    its memory declares."""
    max_frames: int | None = None
    """At most this many frames per request (the runner samples uniformly up to it); None: no cap."""
    guard: Guard | None = None
    """The context guard the runner chooses frames for and cuts requests with; None: nothing is cut."""
    api_key_env: str | None = None
    """The environment variable holding the engine's key (registered for redaction); None: no key."""
    answers_from_annotations: bool = False
    """A reference method (oracle, seeded random…) that answers from the instance itself: :func:`ask`
    hands it the instance through :meth:`answer_instance`. A model never is."""
    checks_requests: bool = False
    """Whether :meth:`check_request` sends the shard's largest request to an engine before the run (a
    served engine: its limits are checked, and that request is the latency warm-up)."""
    model_path: str | None = None
    """Where a local model's weights are read from (a folder, a file, else a hub id): its content names
    the model (:meth:`model_identity`); None: no local weights."""
    _runner: asyncio.Runner | None = None

    async def start(self) -> None:
        """Acquire resources (clients, servers, weights); default: nothing to do."""

    async def close(self) -> None:
        """Release what :meth:`start` acquired; must be safe to call twice."""

    @abc.abstractmethod
    async def generate(self, request: Request) -> Response:
        """Answer one request; record failures in ``Response.error`` instead of raising."""

    async def answer_instance(self, request: Request, instance: Instance) -> Response:
        """A reference method's answer, given the instance (only when ``answers_from_annotations``)."""
        raise NotImplementedError(f"{self.name} does not answer from annotations")

    async def preflight(self, where: str = "backbone") -> None:
        """Before a run: check the engine answers (``where``: the config key holding it), raising an error
        whose message is one line saying what to change; default: nothing to check."""

    async def check_request(self, request: Request, where: str = "backbone") -> None:
        """Send the run's largest ``request`` with ``max_tokens=1``, raising a one-line error naming the
        engine limit it breaks (only when ``checks_requests``)."""
        raise NotImplementedError(f"{self.name} does not check requests")

    async def model_identity(self, where: str = "backbone") -> dict[str, Any] | None:
        """What names the model that answers, before :meth:`start` (docs/records.md, "Identity"): by default
        the content of :attr:`model_path` (:func:`~apm.backbones.weights.local_model`); None: no model (a
        baseline). A served engine asks its server, raising :class:`EndpointError` (one line, ``where``: the
        config key holding it) when it cannot."""
        return await asyncio.to_thread(local_model, self.model_path) if self.model_path else None

    def advice(self, response: Response, where: str = "backbone", request: Request | None = None) -> str:
        """A failed ``response`` as one line naming the setting to change; default: its error."""
        return response.error or ""

    def log_into(self, folder: str) -> None:
        """Where an engine that writes logs of its own (a launched server) puts them when its config
        names no place; default: it writes none."""

    @property
    def prefix_caching(self) -> bool | None:
        """Whether the engine caches prompt prefixes (recorded with each latency); None: not known."""
        return None

    @property
    def model_id(self) -> str | None:
        """The configured model the engine serves (a judgement's identity); None: no model."""
        return None

    @property
    def implementation(self) -> str:
        """The class that answers, as ``module.QualName`` (the identity of a judge without a model)."""
        return f"{type(self).__module__}.{type(self).__qualname__}"

    async def __aenter__(self) -> Backbone:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def generate_sync(self, request: Request) -> Response:
        """Blocking :meth:`generate` for scripts and notebooks; starts the backbone on first use.

        Runs on a private event loop kept across calls; call :meth:`close_sync` when done.
        """
        if self._runner is None:
            self._runner = asyncio.Runner()
            self._runner.run(self.start())
        return self._runner.run(self.generate(request))

    def close_sync(self) -> None:
        """Close a backbone used through :meth:`generate_sync`."""
        if self._runner is not None:
            self._runner.run(self.close())
            self._runner.close()
            self._runner = None


class Bare(Backbone):
    """A backbone that has only the required members (:class:`BackboneLike`), every optional
    capability at its default; its declaration, if its class has one, is kept."""

    def __init__(self, inner: BackboneLike) -> None:
        self.inner = self.__wrapped__ = inner
        self.name = inner.name
        self.declaration = declared(inner)

    def __repr__(self) -> str:
        return f"Bare({self.inner!r})"

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def generate(self, request: Request) -> Response:
        return await self.inner.generate(request)

    @property
    def implementation(self) -> str:
        return f"{type(self.inner).__module__}.{type(self.inner).__qualname__}"


def as_backbone(found: BackboneLike) -> Backbone:
    """``found`` with the whole contract: a :class:`Backbone` as it is, anything else :class:`Bare`."""
    return found if isinstance(found, Backbone) else Bare(found)
