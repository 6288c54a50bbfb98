"""Assemble one instance's request: memory history, the causal prefix with its turns, the probe.

Layout of the single user message (documented in ``docs/prompts.md``): the text memories, then
each prior session's frames under a header, then the current session's frames interleaved with the
turns the protocol injects (each at its wall-clock time: a turn is placed before the frames of its
second), then the probe prompt preceded by the current wall-clock time. The system message is E.1.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import groupby

from apm.backbones.base import FramePart, GenerationSettings, Message, Part, Request, TextPart
from apm.data import clock
from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History
from apm.prompts import probe_prompt, system_prompt, turn_text
from apm.video.cache import FrameCache
from apm.video.frames import Frame
from apm.video.select import prefix_spans, select_frames


@dataclass(frozen=True)
class Prepared:
    request: Request
    frames: tuple[Frame, ...]
    prompt_sha256: str


def _session_header(trajectory: Trajectory, key: str, what: str) -> TextPart:
    s = trajectory.session(key)
    return TextPart(f"[{what} {key}, {clock.label(s.start)} to {clock.split(s.end)[1]}]")


def choose_frames(cache: FrameCache, trajectory: Trajectory, instance: Instance, history: History, max_frames: int) -> list[Frame]:
    """History spans plus the current prefix, sampled uniformly to ``max_frames`` (or the latest N).

    ``max_frames`` 0 means the backbone takes no frames (the reference baselines).
    """
    spans = list(history.spans) + prefix_spans(trajectory, instance)
    if max_frames <= 0:
        return []
    if history.current == "recent":
        return select_frames(cache, trajectory, instance, spans, recent=history.recent_frames)
    return select_frames(cache, trajectory, instance, spans, max_frames=max_frames)


def build_parts(trajectory: Trajectory, instance: Instance, history: History, frames: list[Frame]) -> list[Part]:
    parts: list[Part] = []
    if history.notes:
        parts.append(TextPart("Persistent memory of completed sessions:"))
        for session, note in history.notes:
            parts += [_session_header(trajectory, session.key, "Memory of session"), TextPart(note)]
    prior = [f for f in frames if f.session != instance.session]
    for key, group in groupby(prior, key=lambda f: f.session):
        parts.append(_session_header(trajectory, key, "Video of earlier session"))
        parts += [FramePart(f) for f in group]
    current = [f for f in frames if f.session == instance.session]
    parts.append(_session_header(trajectory, instance.session, "Current session"))
    events = [(f.wall_clock, 1, FramePart(f)) for f in current]
    events += [(t.time, 0, TextPart(f"[{clock.label(t.time)}] User: {turn_text(t, instance)}")) for t in instance.turns]
    parts += [p for _, _, p in sorted(events, key=lambda e: (e[0], e[1]))]
    parts.append(TextPart(f"[Current time: {instance.probe_label}]\n\n{probe_prompt(instance)}"))
    return parts


def prompt_digest(messages: tuple[Message, ...]) -> str:
    """SHA-256 of the exact prompt: every text, and every frame by session and video offset."""
    canon = [
        [m.role, [p.text if isinstance(p, TextPart) else [p.frame.session, p.frame.offset] for p in m.parts]]
        for m in messages
    ]
    return hashlib.sha256(json.dumps(canon, ensure_ascii=False).encode()).hexdigest()


def prepare(
    cache: FrameCache,
    trajectory: Trajectory,
    instance: Instance,
    history: History,
    max_frames: int,
    settings: GenerationSettings,
) -> Prepared:
    """The request for ``instance`` and the frames it shows."""
    frames = choose_frames(cache, trajectory, instance, history, max_frames)
    messages = (
        Message.text("system", system_prompt()),
        Message("user", tuple(build_parts(trajectory, instance, history, frames)), time=instance.probe_time),
    )
    request = Request(messages=messages, settings=settings, instance=instance, request_id=instance.key)
    return Prepared(request, tuple(frames), prompt_digest(messages))
