"""The one thing the loader needs from a session video: that it opens, decodes and lasts long enough."""

from __future__ import annotations

from pathlib import Path

import av


def video_duration(path: Path) -> float:
    """Seconds of video in ``path``; raises ``ValueError`` naming what is wrong when it is unusable."""
    if path.stat().st_size == 0:
        raise ValueError("empty file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ValueError("no video stream")
            stream = container.streams.video[0]
            first = next(container.decode(stream), None)
            if first is None:
                raise ValueError("no decodable frame")
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            if container.duration is not None:
                return container.duration / av.time_base
    except av.FFmpegError as e:
        raise ValueError(f"unreadable: {e}") from e
    raise ValueError("duration unknown")
