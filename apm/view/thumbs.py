"""Thumbnails of the frames a model was shown, cut from the shared frame cache and written once each."""

from __future__ import annotations

import io
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from PIL import Image

from apm.video.cache import FrameCache

FOLDER = "thumbs"
"""Where the thumbnails go inside the site (the page names them relative to itself)."""


def shrink(jpeg: bytes, side: int, quality: int) -> bytes:
    """``jpeg`` scaled down (never up) so its longer side is at most ``side`` pixels, re-encoded."""
    with Image.open(io.BytesIO(jpeg)) as im:
        small = im.convert("RGB")
        small.thumbnail((side, side))
        out = io.BytesIO()
        small.save(out, "JPEG", quality=quality)
    return out.getvalue()


class Thumbnails:
    """Writes ``<site>/thumbs/<entry>-<sample>.jpg`` per distinct cached sample: a frame shown to
    several instances or methods (same video, same sampling settings) is one file."""

    def __init__(self, site: Path, side: int = 160, quality: int = 75) -> None:
        self.folder = site / FOLDER
        self.side = side
        self.quality = quality
        self.bytes = 0
        """Total size of the thumbnails written."""
        self._caches: dict[tuple[Any, ...], FrameCache] = {}
        self._written: set[str] = set()

    def __len__(self) -> int:
        return len(self._written)

    def _cache(self, frames: Mapping[str, Any]) -> FrameCache:
        """The frame cache of a run's ``config.frames`` (cache folder, rate, size bound, quality)."""
        spec = (frames.get("cache_dir"), frames.get("fps", 1.0), frames.get("max_side", 448),
                frames.get("jpeg_quality", 85))
        if spec not in self._caches:
            self._caches[spec] = FrameCache(*spec)
        return self._caches[spec]

    def src(self, frames: Mapping[str, Any], video: Path, offset: float) -> str:
        """The page-relative path of the thumbnail of ``video`` at ``offset`` s (sample offset × rate),
        writing it on first use; raises what the cache raises for a missing or undecodable video."""
        entry = self._cache(frames).entry(video)
        sample = round(Fraction(offset) * entry.rate)
        name = f"{entry.key[:16]}-{sample}.jpg"
        if name not in self._written:
            data = shrink(entry.jpeg(sample), self.side, self.quality)
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / name).write_bytes(data)
            self.bytes += len(data)
            self._written.add(name)
        return f"{FOLDER}/{name}"
