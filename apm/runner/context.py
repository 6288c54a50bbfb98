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

from apm.backbones.base import GenerationSettings, Message, Part, Request, TextPart
from apm.data import clock
from apm.data.instances import Instance, Turn
from apm.data.model import Trajectory
from apm.memory.base import History
from apm.prompts import interleave, probe_prompt, system_prompt, turn_text
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
    """The user message: text memories, earlier sessions' frames and turns, the current prefix, the probe.

    Only turns of the current session come from the instance itself; what was said in an earlier
    session (a PRM registration) reaches the model only through the memory protocol's ``history``.
    """
    parts: list[Part] = []
    if history.notes:
        parts.append(TextPart("Persistent memory of completed sessions:"))
        for session, note in history.notes:
            parts += [_session_header(trajectory, session.key, "Memory of session"), TextPart(note)]
    current = trajectory.session(instance.session)
    prior_frames = {key: list(g) for key, g in groupby((f for f in frames if f.session != current.key), key=lambda f: f.session)}
    prior_turns = {s.key: [t for t in history.turns if s.contains(t.time)] for s in trajectory.sessions}
    for s in trajectory.sessions[: current.index]:
        if prior_frames.get(s.key) or prior_turns[s.key]:
            parts.append(_session_header(trajectory, s.key, "Video of earlier session"))
            parts += interleave(prior_frames.get(s.key, []), prior_turns[s.key])
    parts.append(_session_header(trajectory, current.key, "Current session"))
    said_now = [Turn(t.kind, t.time, turn_text(t, instance)) for t in instance.turns if t.time >= current.start]
    parts += interleave([f for f in frames if f.session == current.key], said_now)
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
