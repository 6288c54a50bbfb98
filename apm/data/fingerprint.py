"""A release's content identity, whatever path it was reached by.

``release_fingerprint`` names a release by its annotation files' bytes and its session videos'
relative paths and sizes (never the videos' bytes: releases are TB-scale), so the same release under
any path, mount or working directory has one fingerprint, and any changed annotation or resized
video gives a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

from apm.data.digest import DIGEST_CHARS
from apm.data.release import CANDIDATES, EA_CANDIDATES, TRAJECTORIES

ANNOTATIONS = (TRAJECTORIES, CANDIDATES, EA_CANDIDATES)
"""The annotation files a release fingerprint covers by bytes (an absent one counts as absent)."""


def release_fingerprint(root: str | os.PathLike[str]) -> str:
    """The release's content identity, memoised per (resolved root, annotation files' size and mtime):
    the Hydra run-name resolver asks for it on every access; a video resized mid-process shows next process."""
    real = Path(root).expanduser().resolve()
    return _fingerprint(real, tuple(_stamp(real / name) for name in ANNOTATIONS))


def _stamp(path: Path) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of a file, None when it is absent: what invalidates the memo."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=64)
def _fingerprint(root: Path, stamps: tuple[tuple[int, int] | None, ...]) -> str:
    """The digest of the annotation bytes and of each session video's ``[relative path, size]``."""
    h = hashlib.sha256()
    for name in ANNOTATIONS:
        path = root / name
        data = path.read_bytes() if path.is_file() else None
        h.update(json.dumps([name, None if data is None else len(data)]).encode())
        h.update(data or b"")
    h.update(json.dumps([[video, _size(root / video)] for video in _videos(root)]).encode())
    return h.hexdigest()[:DIGEST_CHARS]


def _videos(root: Path) -> list[str]:
    """Every session's ``video`` path as written in ``trajectories.json`` (none if it is unreadable)."""
    try:
        trajectories = json.loads((root / TRAJECTORIES).read_text(encoding="utf-8"))
        return [s["video"] for t in trajectories for s in t["sessions"] if isinstance(s.get("video"), str)]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return []  # a broken release still gets a fingerprint; loading it reports what is wrong


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
