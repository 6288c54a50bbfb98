"""Decode a session video once, sequentially, into one JPEG per sampling slot.

Sequential decode-and-drop is the measured fast path (``docs/performance.md``); only the frames that
are kept are scaled, converted to RGB and JPEG-encoded, in a worker thread that overlaps decoding.
The slot rule and its edge cases are specified in ``docs/video.md``.
"""

from __future__ import annotations

import io
import math
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterator

import av
import av.error
from PIL import Image

_IMAGE_FORMATS = ("image2", "_pipe")
"""Demuxer names (suffixes) of still-image formats, which FFmpeg would happily read as 1-frame video."""
_AHEAD = 16
"""Encoded frames the worker may run ahead of the consumer: bounds memory, keeps both cores busy."""
_TRUNCATION_TOLERANCE = 1.0
"""Seconds the decoded stream may fall short of the container's declared duration before we call it cut."""
_ROTATE = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}


class VideoDecodeError(Exception):
    """A session video that cannot be decoded: which file, where (video offset, s) and why."""

    def __init__(self, path: str | Path, at_seconds: float, reason: str) -> None:
        super().__init__(str(path), at_seconds, reason)
        self.path = Path(path)
        self.at_seconds = float(at_seconds)
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}: cannot decode video at {self.at_seconds:.3f}s: {self.reason}"


@dataclass(frozen=True)
class SamplingSettings:
    """What a cache entry holds besides the video itself: sampling rate, size bound and JPEG quality."""

    fps: float = 1.0
    max_side: int = 448
    jpeg_quality: int = 85

    def __post_init__(self) -> None:
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps}")
        if self.max_side < 1:
            raise ValueError(f"max_side must be >= 1, got {self.max_side}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in 1..100, got {self.jpeg_quality}")

    @property
    def rate(self) -> Fraction:
        """``fps`` as an exact fraction, so slot boundaries compare exactly with frame timestamps."""
        return Fraction(self.fps).limit_denominator(1000)

    def describe(self) -> dict:
        """Everything that changes the pixels of an entry; part of its cache key."""
        return {
            "fps": str(self.rate),
            "max_side": self.max_side,
            "jpeg_quality": self.jpeg_quality,
            "scale": "swscale-area, downscale only",
            "rotation": "display matrix applied",
            "slot_rule": "last frame with offset <= slot time",
            "offset_zero": "first decoded frame",
        }


def scaled_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """(width, height) shrunk so that the longer side is at most ``max_side``; never enlarged."""
    scale = min(1.0, max_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _to_jpeg(frame: av.VideoFrame, size: tuple[int, int], rotation: int, quality: int) -> bytes:
    """Scale + convert one kept frame to RGB, rotate it upright and encode it (runs in the worker)."""
    image = frame.reformat(width=size[0], height=size[1], format="rgb24", interpolation="AREA").to_image()
    if rotation in _ROTATE:
        image = image.transpose(_ROTATE[rotation])
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _open(path: Path) -> av.container.InputContainer:
    """Open ``path`` as a video container, turning every way it can fail into a VideoDecodeError."""
    if not path.is_file():
        raise VideoDecodeError(path, 0.0, "no such file")
    if path.stat().st_size == 0:
        raise VideoDecodeError(path, 0.0, "empty file (0 bytes)")
    try:
        container = av.open(str(path), metadata_errors="ignore")
    except av.error.FFmpegError as e:
        raise VideoDecodeError(path, 0.0, f"not a readable video container ({e})") from e
    fmt = container.format.name
    if any(fmt.endswith(s) for s in _IMAGE_FORMATS):
        container.close()
        raise VideoDecodeError(path, 0.0, f"a still image ({fmt}), not a video")
    if not container.streams.video:
        container.close()
        raise VideoDecodeError(path, 0.0, f"no video stream (format {fmt})")
    return container


def _declared_duration(stream: av.video.stream.VideoStream, container: av.container.InputContainer) -> float | None:
    """The duration the file claims for its video (seconds), used to detect a truncated file."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    return None


def sample_jpegs(path: str | Path, settings: SamplingSettings) -> Iterator[bytes]:
    """JPEG of each slot ``k = 0, 1, ...`` (video offset ``k / fps``), in order; see docs/video.md.

    Slot ``k`` shows the last decoded frame whose offset is ``<= k / fps`` (the frame on screen at
    that moment), so no slot ever shows a later moment; offset 0 is the first decoded frame. The last
    slot is ``floor(fps * last_frame_offset)``. A slot that repeats the previous frame (a VFR gap)
    yields the very same ``bytes`` object. Raises VideoDecodeError naming the file and offset.
    """
    path = Path(path)
    rate = settings.rate
    container = _open(path)
    stream = container.streams.video[0]
    pending: deque[Future[bytes]] = deque()
    at = 0.0
    with container, ThreadPoolExecutor(1, thread_name_prefix="apm-jpeg") as worker:
        size: tuple[int, int] | None = None
        pts0: int | None = None
        slot_pts = Fraction(0)  # pts (relative to pts0) of the next slot to fill
        step: Fraction | None = None
        current: av.VideoFrame | None = None
        encoded: Future[bytes] | None = None
        try:
            for frame in container.decode(stream):
                if frame.pts is None:
                    raise VideoDecodeError(path, at, "frame without a timestamp")
                if pts0 is None:
                    pts0, step = frame.pts, 1 / (rate * frame.time_base)
                    size = scaled_size(frame.width, frame.height, settings.max_side)
                rel = frame.pts - pts0
                while current is not None and slot_pts < rel:
                    encoded = encoded or worker.submit(_to_jpeg, current, size, frame.rotation, settings.jpeg_quality)
                    pending.append(encoded)
                    slot_pts += step
                    while len(pending) > _AHEAD:
                        yield pending.popleft().result()
                if rel >= (0 if current is None else at_rel):
                    current, encoded, at_rel = frame, None, rel
                    at = float(rel * frame.time_base)
        except av.error.FFmpegError as e:
            raise VideoDecodeError(path, at, f"corrupt or unreadable data ({e})") from e
        if current is None:
            raise VideoDecodeError(path, 0.0, "the video stream has no decodable frame")
        while slot_pts <= at_rel:
            encoded = encoded or worker.submit(_to_jpeg, current, size, current.rotation, settings.jpeg_quality)
            pending.append(encoded)
            slot_pts += step
        declared = _declared_duration(stream, container)
        if declared is not None and declared - at > _TRUNCATION_TOLERANCE + 1 / settings.fps:
            raise VideoDecodeError(path, at, f"stream ends at {at:.3f}s but the file declares {declared:.3f}s (truncated?)")
        while pending:
            yield pending.popleft().result()


def slot_count(last_offset: float, fps: float) -> int:
    """Number of slots of a video whose last frame is at ``last_offset`` seconds: ``floor(fps*t) + 1``."""
    return math.floor(Fraction(last_offset) * Fraction(fps).limit_denominator(1000)) + 1
