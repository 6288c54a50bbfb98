"""Thumbnails of the frames a model was shown, cut from the shared frame cache and written once each."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apm.video.cache import CacheEntry, FrameCache
from apm.video.thumbnails import QUALITY, SIDE, Sampling, frame_at, run_sampling

FOLDER = "thumbs"
"""Where the thumbnails go inside the site (the page names them relative to itself)."""


class Thumbnails:
    """Writes ``<site>/thumbs/<entry>-<sample>.jpg`` per distinct cached sample: a frame shown to
    several instances or methods (same video, same sampling settings) is one file."""

    def __init__(self, site: Path, side: int = SIDE, quality: int = QUALITY) -> None:
        self.folder = site / FOLDER
        self.side = side
        self.quality = quality
        self.bytes = 0
        """Total size of the thumbnails written."""
        self._caches: dict[Sampling, FrameCache] = {}
        self._written: set[str] = set()
        self._entries: dict[tuple[Any, ...], CacheEntry] = {}

    def __len__(self) -> int:
        return len(self._written)

    def _cache(self, frames: Mapping[str, Any]) -> FrameCache:
        """The frame cache of a run's ``config.frames`` (:func:`apm.video.thumbnails.run_sampling`)."""
        sampling = run_sampling(frames)
        if sampling not in self._caches:
            self._caches[sampling] = FrameCache(*sampling)
        return self._caches[sampling]

    def _entry(self, frames: Mapping[str, Any], video: Path) -> CacheEntry:
        """The cache entry of ``video``, resolved once per video and sampling settings (resolving hashes
        and checks the video: it was most of a build's time when done per frame)."""
        spec = (*run_sampling(frames), video)
        if spec not in self._entries:
            self._entries[spec] = self._cache(frames).entry(video)
        return self._entries[spec]

    def src(self, frames: Mapping[str, Any], video: Path, offset: float) -> str:
        """The page-relative path of the thumbnail of ``video`` at ``offset`` s
        (:func:`apm.video.thumbnails.frame_at`), writing it on first use; raises what the cache raises for
        a missing or undecodable video."""
        shown = frame_at(self._entry(frames, video), offset)
        if shown.name not in self._written:
            data = shown.thumbnail(self.side, self.quality)
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / shown.name).write_bytes(data)
            self.bytes += len(data)
            self._written.add(shown.name)
        return f"{FOLDER}/{shown.name}"
