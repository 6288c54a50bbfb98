"""Thumbnail strips of the frames an instance was shown, read from the shared frame cache (the JPEGs
the model received), bounded to :data:`MAX_THUMBNAILS` per instance."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from apm.video.cache import FrameCache, VideoDecodeError
from apm.video.thumbnails import recorded_frame

MAX_THUMBNAILS = 8
HEIGHT = 96
"""Pixel height of a strip: each thumbnail keeps its frame's aspect ratio."""
GAP = 2
UNREADABLE = (VideoDecodeError, ValueError, IndexError, KeyError, OSError)
"""A missing video, a corrupt cache entry, a frame outside its entry, an unknown session: no strip."""

T = TypeVar("T")
Frame = Mapping[str, Any]


JPEG_QUALITY = 85


@dataclass(frozen=True)
class Strip:
    """The thumbnails of an instance's frames side by side, as a JPEG (a table of thousands of strips
    holds kilobytes each, not decoded pixels), captioned with their wall-clock times."""

    jpeg: bytes
    caption: str


def encoded(image: Image.Image) -> bytes:
    """``image`` as a JPEG of :data:`JPEG_QUALITY`."""
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def spread(items: Sequence[T], k: int = MAX_THUMBNAILS) -> list[T]:
    """At most ``k`` items, evenly spread over ``items``, the first and the last kept."""
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def side_by_side(images: Sequence[Image.Image]) -> Image.Image:
    """Images scaled to :data:`HEIGHT` and laid out left to right."""
    scaled = [im.resize((max(1, round(im.width * HEIGHT / im.height)), HEIGHT)) for im in images]
    strip = Image.new("RGB", (sum(im.width for im in scaled) + GAP * (len(scaled) - 1), HEIGHT), "white")
    x = 0
    for im in scaled:
        strip.paste(im, (x, 0))
        x += im.width + GAP
    return strip


class Thumbnails:
    """Reads recorded frames (``{session, offset, wall_clock}``) of one release from the frame cache."""

    def __init__(self, cache: FrameCache, videos: Mapping[tuple[str, str], Path]) -> None:
        self.cache = cache
        self.videos = videos
        """Each session's video, by (trajectory id, ``DAYn/Sxxx``)."""

    def frame(self, trajectory_id: str, frame: Frame) -> Image.Image:
        """The thumbnail of one recorded frame, as ``apm-view`` shows it
        (:func:`apm.video.thumbnails.recorded_frame`)."""
        shown = recorded_frame(self.cache, self.videos[(trajectory_id, frame["session"])], float(frame["offset"]))
        return Image.open(io.BytesIO(shown.thumbnail())).convert("RGB")

    def strip(self, trajectory_id: str, frames: Sequence[Frame]) -> Strip | None:
        """Up to :data:`MAX_THUMBNAILS` of the frames, evenly spread; None without frames or when any
        cannot be read (the video is gone, the cache entry is corrupt)."""
        shown = spread(frames)
        try:
            images = [self.frame(trajectory_id, f) for f in shown]
        except UNREADABLE:
            return None
        if not images:
            return None
        return Strip(encoded(side_by_side(images)), " · ".join(str(f.get("wall_clock")) for f in shown))
