"""Context-length guard: caps frames and an estimated prompt size, reporting exactly what it cut."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from apm.backbones.base import FramePart, Message, Part, Request, TextPart, Truncation

Policy = Literal["uniform", "oldest"]


@dataclass(frozen=True)
class ContextGuard:
    """Drops frames from a request until it fits ``max_frames`` and ``max_context_tokens``.

    The prompt size is an estimate (``tokens_per_frame`` per video frame, ``tokens_per_still`` per still,
    ``chars_per_token`` for text and ``max_tokens`` reserved for the answer). ``uniform`` keeps an even
    subsample that always includes the latest frame; ``oldest`` drops the earliest frames first.
    """

    max_frames: int | None = None
    max_context_tokens: int | None = None
    tokens_per_frame: int = 256
    chars_per_token: float = 4.0
    policy: Policy = "uniform"
    tokens_per_still: int | None = None
    """A still's tokens (an image of its own); None: ``tokens_per_frame``."""

    @property
    def frames_per_still(self) -> float:
        """How many video frames' tokens one still costs: what ``session_stable`` spends its stills in."""
        return (self.tokens_per_still or self.tokens_per_frame) / self.tokens_per_frame

    def frame_tokens(self, request: Request) -> int:
        """Estimated tokens of the request's frames: its video frames and its stills."""
        stills = sum(p.still for m in request.messages for p in m.parts if isinstance(p, FramePart))
        video = len(request.frames) - stills
        return self.tokens_per_frame * video + (self.tokens_per_still or self.tokens_per_frame) * stills

    def estimate(self, request: Request) -> int:
        """Estimated prompt tokens plus the answer budget."""
        return (
            math.ceil(text_chars(request) / self.chars_per_token)
            + self.frame_tokens(request)
            + request.settings.max_tokens
        )

    def frame_budget(self, request: Request) -> int:
        """How many frames the request may keep (negative when its text alone does not fit)."""
        n = len(request.frames)
        budget = n if self.max_frames is None else min(n, self.max_frames)
        if self.max_context_tokens is not None:
            frames = self.frame_tokens(request)
            spare = self.max_context_tokens - (self.estimate(request) - frames)
            per_frame = frames / n if n else self.tokens_per_frame
            budget = min(budget, math.floor(spare / per_frame) if spare >= 0 else -1)
        return budget

    def selection_budget(self, request: Request) -> int | None:
        """Frames to choose for ``request``'s text when fewer than it has fit (``uniform`` policy only:
        choosing that many over the whole span is the same even sampling, done before the cut); None
        when all fit or the policy cuts at send time."""
        fit = self.frame_budget(request)
        return fit if self.policy == "uniform" and 0 <= fit < len(request.frames) else None

    def budget_truncation(self, chosen: Request, fitted: Request) -> Truncation:
        """What choosing ``fitted``'s frames for the context its text leaves, instead of ``chosen``'s, left out."""
        kept = {(f.session, f.offset) for f in fitted.frames}
        return Truncation(
            reason="max_context_tokens",
            policy=self.policy,
            frames_before=len(chosen.frames),
            frames_after=len(fitted.frames),
            est_tokens_before=self.estimate(chosen),
            est_tokens_after=self.estimate(fitted),
            dropped_wall_clock=tuple(f.wall_clock for f in chosen.frames if (f.session, f.offset) not in kept),
        )

    def apply(self, request: Request) -> tuple[Request, Truncation | None]:
        """The request cut to fit, and what was cut (None when nothing was)."""
        n = len(request.frames)
        keep_n = max(self.frame_budget(request), 0)
        if keep_n >= n:
            return request, None
        keep = self._keep(n, keep_n)
        dropped = tuple(f.wall_clock for i, f in enumerate(request.frames) if i not in keep)
        cut = replace(request, messages=_filter_frames(request.messages, keep))
        over_frames = self.max_frames is not None and n > self.max_frames and keep_n == self.max_frames
        return cut, Truncation(
            reason="max_frames" if over_frames else "max_context_tokens",
            policy=self.policy,
            frames_before=n,
            frames_after=keep_n,
            est_tokens_before=self.estimate(request),
            est_tokens_after=self.estimate(cut),
            dropped_wall_clock=dropped,
        )

    def _keep(self, n: int, k: int) -> frozenset[int]:
        if k == 0:
            return frozenset()
        if self.policy == "oldest":
            return frozenset(range(n - k, n))
        if k == 1:
            return frozenset({n - 1})
        # Even spacing anchored on the last frame (the one nearest the probe); step >= 1, so distinct.
        return frozenset(n - 1 - math.floor(i * (n - 1) / (k - 1) + 0.5) for i in range(k))


def text_chars(request: Request) -> int:
    """Characters of every text part of the request."""
    return sum(len(p.text) for m in request.messages for p in m.parts if isinstance(p, TextPart))


def _filter_frames(messages: tuple[Message, ...], keep: frozenset[int]) -> tuple[Message, ...]:
    """Messages with only the frames whose request-wide index is in ``keep``."""
    out, i = [], 0
    for m in messages:
        parts: list[Part] = []
        for p in m.parts:
            if isinstance(p, FramePart):
                if i in keep:
                    parts.append(p)
                i += 1
            else:
                parts.append(p)
        out.append(replace(m, parts=tuple(parts)))
    return tuple(out)
