"""Causal frame selection: the frames an instance may see, read from the frame cache.

A memory protocol states what it exposes as spans of visible sessions; this module checks them
against the instance (a span past the probe time is a bug and raises, nothing is clipped to hide
it), then samples uniformly down to ``max_frames`` or keeps the ``recent`` latest samples; the
``session_stable`` layout samples earlier sessions and the current prefix apart.
Semantics: ``docs/video.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from apm.data.frames import Frame
from apm.data.instances import Instance
from apm.data.model import Session, Trajectory
from apm.video.cache import FrameCache

SIMPLESTREAM_FRAMES = 4
"""SimpleStream, the paper's no-memory baseline, sees the 4 most recent frames."""
EARLIER_SHARE = 0.75
"""The share of the frame budget the ``session_stable`` layout gives earlier sessions (docs/prompts.md)."""


class CausalityError(ValueError):
    """A span that shows an instance something it may not see: after the probe, or a hidden session."""


@dataclass(frozen=True)
class Span:
    """Absolute seconds ``[start, end]`` (both inclusive) of one session that a protocol exposes."""

    session: str
    start: int
    end: int
    video: Path | None = None
    """The file the frames are read from: the protocol's own stored copy (raw video replays what it
    keeps), or ``None`` for the release's video of the session."""


def uniform_indices(n: int, k: int) -> list[int]:
    """``k`` of ``range(n)``, evenly spread, always with the last (and, for k > 1, the first); all if k >= n."""
    if k >= n:
        return list(range(n))
    if k <= 0:
        return []
    if k == 1:
        return [n - 1]
    return [(2 * j * (n - 1) + k - 1) // (2 * (k - 1)) for j in range(k)]


def _check(span: Span, session: Session, instance: Instance) -> None:
    """Raise unless ``span`` lies within a visible session and ends at or before the probe time."""
    if span.session not in instance.visible_sessions:
        raise CausalityError(f"{instance.key}: span over {span.session}, not among {instance.visible_sessions}")
    if span.end > instance.probe_time:
        raise CausalityError(f"{instance.key}: span {span} ends after the probe time {instance.probe_time}")
    if not session.start <= span.start <= span.end <= session.end:
        raise ValueError(f"{instance.key}: span {span} is not within session [{session.start}, {session.end}]")


def strided(ordered: list[tuple[int, int]], stride: int) -> list[tuple[int, int]]:
    """Every ``stride``-th of ``ordered`` from the first, and the last (the probe's latest sample)."""
    chosen = ordered[::stride]
    return chosen + ordered[-1:] if ordered and chosen[-1] != ordered[-1] else chosen


def still_count(room: int, frames_per_still: float) -> int:
    """How many stills ``room`` frames of the budget buy when a still costs ``frames_per_still`` video frames'
    tokens (at least the latest frame while there is room: docs/prompts.md, "Frame layouts")."""
    return max(math.floor(room / frames_per_still), 1) if room > 0 else 0


def prefix_stride(samples: int, stills: int) -> int:
    """The ``session_stable`` stride: every k-th of a session's ``samples`` so that ``stills`` - 1 of them and
    the latest cover it whole (k fixed per session, from its scheduled length)."""
    return max(1, math.ceil(samples / (stills - 1)))


def select_frames(
    cache: FrameCache,
    trajectory: Trajectory,
    instance: Instance,
    spans: list[Span],
    *,
    max_frames: int | None = None,
    recent: int | None = None,
    stride: int | None = None,
) -> list[Frame]:
    """The cached frames of ``spans``, oldest first: all, ``max_frames`` uniformly, the ``recent``
    latest, or every ``stride``-th from the first plus the latest.

    Samples of a span are those whose offset lies in it; a span reaching beyond its video's last
    frame simply has no samples there. Overlapping spans count each sample once.
    """
    if sum(x is not None for x in (max_frames, recent, stride)) > 1:
        raise ValueError("give max_frames, recent or stride: one of them, not both")
    available: set[tuple[int, int]] = set()
    sessions: dict[int, Session] = {}
    videos: dict[int, Path] = {}
    for span in spans:
        session = trajectory.session(span.session)
        _check(span, session, instance)
        videos[session.index] = span.video or session.video
        entry = cache.entry(videos[session.index])
        lo = math.ceil((span.start - session.start) * entry.rate)
        hi = min(math.floor((span.end - session.start) * entry.rate), entry.count - 1)
        sessions[session.index] = session
        available.update((session.index, i) for i in range(lo, hi + 1))
    ordered = sorted(available)
    if recent is not None:
        chosen = ordered[max(0, len(ordered) - recent) :] if recent > 0 else []
    elif max_frames is not None:
        chosen = [ordered[j] for j in uniform_indices(len(ordered), max_frames)]
    elif stride is not None:
        chosen = strided(ordered, stride)
    else:
        chosen = ordered
    frames: list[Frame] = []
    for index, group in groupby(chosen, key=lambda s: s[0]):
        session = sessions[index]
        entry = cache.entry(videos[index])
        samples = [i for _, i in group]
        for i, jpeg in zip(samples, entry.jpegs(samples)):
            offset, whole = entry.seconds(i)
            frames.append(Frame(session.key, offset, session.start + whole, jpeg, entry.key))
    return frames


def session_stable_frames(
    cache: FrameCache, trajectory: Trajectory, instance: Instance, spans: list[Span], max_frames: int,
    frames_per_still: float = 1.0,
) -> tuple[list[Frame], list[Frame]]:
    """The ``session_stable`` layout's frames: the earlier sessions' and the current prefix's.

    Earlier sessions (``spans``) get at most ``EARLIER_SHARE`` of ``max_frames``, uniformly: a function
    of the spans and the budget alone, so every probe of a session is shown the same ones. The
    current prefix gets the rest, spent in stills that each cost ``frames_per_still`` video frames'
    tokens (the backbone's guard says), as every k-th sample from the session start (k fixed per
    session, from its announced length) plus the latest one: a later probe's frames extend an earlier one's.
    """
    current = trajectory.session(instance.session)
    if any(span.session == current.key for span in spans):
        raise ValueError(f"{instance.key}: session_stable takes spans of earlier sessions only")
    earlier = select_frames(cache, trajectory, instance, spans, max_frames=earlier_budget(max_frames))
    stills = still_count(max_frames - len(earlier), frames_per_still)
    prefix = prefix_spans(trajectory, instance)
    if stills <= 1:
        return earlier, select_frames(cache, trajectory, instance, prefix, recent=stills)
    entry = cache.entry(current.video)
    samples = min(entry.count, math.floor(current.duration * entry.rate) + 1)
    return earlier, select_frames(cache, trajectory, instance, prefix, stride=prefix_stride(samples, stills))


def earlier_budget(max_frames: int) -> int:
    """The most frames ``session_stable`` shows of earlier sessions: ``EARLIER_SHARE`` of the budget."""
    return math.floor(EARLIER_SHARE * max_frames)


def prefix_spans(trajectory: Trajectory, instance: Instance) -> list[Span]:
    """The current session from its start to the probe time (inclusive)."""
    session = trajectory.session(instance.session)
    return [Span(session.key, session.start, instance.probe_time)]


def raw_video_spans(trajectory: Trajectory, instance: Instance) -> list[Span]:
    """Raw video as memory: every visible prior session in full, then the current prefix."""
    prior = [trajectory.session(k) for k in instance.visible_sessions if k != instance.session]
    return [Span(s.key, s.start, s.end) for s in prior] + prefix_spans(trajectory, instance)


def raw_video_frames(
    cache: FrameCache, trajectory: Trajectory, instance: Instance, max_frames: int = 1024
) -> list[Frame]:
    """Raw-video-as-memory input: prior visible sessions + current prefix, uniformly down to ``max_frames``."""
    return select_frames(cache, trajectory, instance, raw_video_spans(trajectory, instance), max_frames=max_frames)


def prefix_frames(cache: FrameCache, trajectory: Trajectory, instance: Instance, max_frames: int = 1024) -> list[Frame]:
    """Current-prefix input (e.g. next to text memory), uniformly down to ``max_frames``."""
    return select_frames(cache, trajectory, instance, prefix_spans(trajectory, instance), max_frames=max_frames)


def recent_frames(
    cache: FrameCache, trajectory: Trajectory, instance: Instance, n: int = SIMPLESTREAM_FRAMES
) -> list[Frame]:
    """The ``n`` latest samples of the current prefix (SimpleStream: 4), ending at the probe second."""
    return select_frames(cache, trajectory, instance, prefix_spans(trajectory, instance), recent=n)
