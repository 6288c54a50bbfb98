"""Assemble one instance's request: memory history, the causal prefix with its turns, the probe.

Layout of the single user message (documented in ``docs/prompts.md``, "The request"): one text part
with the text memories and a header per session whose frames are shown; the frames, oldest first, as
one video segment; one text part with what the user said (the instance's own turns, each with its
wall-clock time), the current wall-clock time and the probe prompt. The system message is E.1.
Engines encode this and add nothing, so ``prompt_sha256`` covers exactly what the model is sent.
The ``session_stable`` frame layout keeps that order but shows earlier sessions and the current prefix
apart (the prefix as stills), so consecutive probes of a session share their opening byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from apm.backbones.base import FramePart, GenerationSettings, Message, Part, Request, TextPart
from apm.data import clock
from apm.data.frames import Frame
from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History
from apm.prompts import probe_prompt, said_text, system_prompt, turn_text
from apm.prompts.layout import CURRENT, CURRENT_END, CURRENT_TIME, EARLIER_VIDEO, HEADER, MEMORY, MEMORY_INTRO
from apm.records.prompts import Canon, canon_digest
from apm.runner.config import FrameLayout
from apm.video.cache import FrameCache
from apm.video.select import prefix_spans, select_frames, session_stable_frames


@dataclass(frozen=True)
class Prepared:
    request: Request
    frames: tuple[Frame, ...]
    prompt_sha256: str
    instance: Instance
    """Who it asks about: kept beside the request, never in it (only :func:`apm.backbones.base.ask`
    hands it to a reference baseline)."""


def _session_header(trajectory: Trajectory, key: str, what: str, end: str | None = None) -> str:
    """``[<what> DAYn/Sxxx, DAYn HH:MM:SS to <end>]``: the session's start, and its end time (or ``end``)."""
    s = trajectory.session(key)
    end = clock.split(s.end)[1] if end is None else end
    return HEADER.write(kind=what, key=key, start=clock.label(s.start), end=end)


def choose_frames(
    cache: FrameCache, trajectory: Trajectory, instance: Instance, history: History, max_frames: int,
    layout: FrameLayout = FrameLayout.uniform, frames_per_still: float = 1.0,
) -> tuple[list[Frame], list[Frame]]:
    """The frames shown, as (frames sent as one video, current-prefix stills): history spans plus the
    current prefix sampled uniformly to ``max_frames`` (or the latest N), or the session-stable split
    (its stills each worth ``frames_per_still`` frames of the budget).

    ``max_frames`` 0 means the backbone takes no frames (the reference baselines).
    """
    spans = list(history.spans) + prefix_spans(trajectory, instance)
    if max_frames <= 0:
        return [], []
    if history.current == "recent":
        return select_frames(cache, trajectory, instance, spans, recent=history.recent_frames), []
    if FrameLayout(layout) is FrameLayout.session_stable:
        return session_stable_frames(cache, trajectory, instance, list(history.spans), max_frames, frames_per_still)
    return select_frames(cache, trajectory, instance, spans, max_frames=max_frames), []


def _memory_text(trajectory: Trajectory, history: History, current: str) -> list[str]:
    """The text memories, each under its session's header: an earlier session's with its end, the
    current session's (a streaming system's notes so far) with "now", never its end."""
    if not history.notes:
        return []
    lines = [MEMORY_INTRO]
    for note in history.notes:
        end = CURRENT_END if note.session.key == current else None
        lines += [_session_header(trajectory, note.session.key, MEMORY, end), note.text]
    return ["\n".join(lines)]


def _video_headers(trajectory: Trajectory, current: str, frames: list[Frame]) -> str:
    """One header per earlier session whose frames are shown, then the current session's: its start and
    "now" (:data:`CURRENT_END`), never its end."""
    shown = {f.session for f in frames} - {current}
    earlier = [_session_header(trajectory, s.key, EARLIER_VIDEO) for s in trajectory.sessions if s.key in shown]
    return "\n".join([*earlier, _session_header(trajectory, current, CURRENT, CURRENT_END)])


def build_parts(trajectory: Trajectory, instance: Instance, history: History, frames: list[Frame],
                stills: list[Frame] | None = None) -> list[Part]:
    """The user message: text memories and session headers, the frames as one segment (then the
    ``stills``, each an image of its own), then what the user said, the current time and the probe.

    Only turns of the current session come from the instance itself; what was said in an earlier
    session (a PRM registration) reaches the model only through the memory protocol's ``history``.
    """
    stills = stills or []
    current = trajectory.session(instance.session)
    headers = _video_headers(trajectory, current.key, [*frames, *stills])
    before = TextPart("\n\n".join([*_memory_text(trajectory, history, current.key), headers]))
    said_now = [replace(t, text=turn_text(t, instance)) for t in instance.turns if t.time >= current.start]
    probe = f"{CURRENT_TIME.write(now=instance.probe_label)}\n\n{probe_prompt(instance)}"
    said = TextPart(said_text([*history.turns, *said_now], probe))
    return [before, *map(FramePart, frames), *(FramePart(f, still=True) for f in stills), said]


def canonical(messages: tuple[Message, ...]) -> Canon:
    """The prompt as its digest sees it: every text, and every frame by session and video offset."""
    return [[m.role, [_canon(p) for p in m.parts]] for m in messages]


def prompt_digest(messages: tuple[Message, ...]) -> str:
    """SHA-256 of the exact prompt (:func:`canonical`)."""
    return canon_digest(canonical(messages))


def _canon(part: Part) -> str | list[str | float]:
    """A part as the digest sees it: its text, or its frame (and ``still`` when it goes as an image)."""
    if isinstance(part, TextPart):
        return part.text
    frame: list[str | float] = [part.frame.session, part.frame.offset]
    return [*frame, "still"] if part.still else frame


def prepare(
    cache: FrameCache,
    trajectory: Trajectory,
    instance: Instance,
    history: History,
    max_frames: int,
    settings: GenerationSettings,
    layout: FrameLayout = FrameLayout.uniform,
    frames_per_still: float = 1.0,
    request_id: str = "",
) -> Prepared:
    """The request for ``instance`` and the frames it shows, laid out by ``layout`` (a still worth
    ``frames_per_still`` frames of the budget: the backbone's guard says). ``request_id``: what the
    backbone is told the request is called (the run's opaque id for the instance, never its key)."""
    frames, stills = choose_frames(cache, trajectory, instance, history, max_frames, layout, frames_per_still)
    messages = (
        Message.text("system", system_prompt()),
        Message("user", tuple(build_parts(trajectory, instance, history, frames, stills)), time=instance.probe_time),
    )
    request = Request(
        messages=messages, settings=settings, request_id=request_id, trajectory_id=instance.trajectory_id
    )
    return Prepared(request, (*frames, *stills), prompt_digest(messages), instance)
