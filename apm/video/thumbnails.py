"""Thumbnails of recorded frames: the one path from a record's frame (``{session, offset}``) to the cached
sample the model was shown and to its small JPEG, shared by ``apm-publish`` and ``apm-view`` so both
show the same image for the same frame."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from PIL import Image

from apm.video.cache import CacheEntry, FrameCache

SIDE = 160
"""Longer side of a thumbnail in pixels (never scaled up)."""
QUALITY = 75


Sampling = tuple[str | None, float, int, int]
"""A frame cache's folder and sampling settings: ``FrameCache(*sampling)``."""


def run_sampling(frames: Mapping[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Sampling:
    """The frame cache a run's ``config.frames`` built: its rate, size bound and quality (``conf/config.yaml``'s
    defaults where it says none), at ``cache_dir`` or else its own ``cache_dir``."""
    folder = cache_dir if cache_dir is not None else frames.get("cache_dir")
    return (None if folder is None else str(folder), frames.get("fps", 1.0), frames.get("max_side", 448),
            frames.get("jpeg_quality", 85))


def shrink(jpeg: bytes, side: int = SIDE, quality: int = QUALITY) -> bytes:
    """``jpeg`` scaled down (never up) so its longer side is at most ``side`` pixels, re-encoded."""
    with Image.open(io.BytesIO(jpeg)) as im:
        small = im.convert("RGB")
        small.thumbnail((side, side))
        out = io.BytesIO()
        small.save(out, "JPEG", quality=quality)
    return out.getvalue()


@dataclass(frozen=True)
class RecordedFrame:
    """The cached sample a recorded frame was cut from."""

    entry: CacheEntry
    sample: int

    @property
    def name(self) -> str:
        """A file name for its thumbnail, the same for every record showing this sample of this video."""
        return f"{self.entry.key[:16]}-{self.sample}.jpg"

    def thumbnail(self, side: int = SIDE, quality: int = QUALITY) -> bytes:
        return shrink(self.entry.jpeg(self.sample), side, quality)


def recorded_frame(cache: FrameCache, video: str | os.PathLike[str], offset: float) -> RecordedFrame:
    """The sample of ``video``'s cache entry nearest the recorded ``offset`` (seconds; sample ``i`` is at
    ``i / rate``), in exact arithmetic on the recorded number; raises what the cache raises for a missing
    or undecodable video."""
    return frame_at(cache.entry(Path(video)), offset)


def frame_at(entry: CacheEntry, offset: float) -> RecordedFrame:
    """The sample of a resolved cache ``entry`` nearest the recorded ``offset`` (:func:`recorded_frame`
    for a caller that resolves each video once)."""
    return RecordedFrame(entry, round(Fraction(offset) * entry.rate))
