"""Decode a session video once, sequentially, into one JPEG (and its preview) per sampling slot.

Sequential decode-and-drop is the measured fast path (``docs/performance.md``); only the frames that
are kept are scaled, converted to RGB, JPEG-encoded and previewed, in a worker thread that overlaps decoding.
The slot rule and its edge cases are specified in ``docs/video.md``.
"""

from __future__ import annotations

import io
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

import av
import av.error
from av.container import InputContainer
from av.video.frame import VideoFrame
from av.video.reformatter import VideoReformatter
from PIL import Image

from apm.data.frames import Preview
from apm.video.store import Sample

T = TypeVar("T")

_AHEAD = 16
"""Encoded frames the worker may run ahead of the consumer: bounds memory, keeps both cores busy."""
_TRUNCATION_TOLERANCE = 1.0
"""Seconds the decoded stream may fall short of the container's declared duration before we call it cut."""
_ROTATE = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
"""Display-matrix angle (counter-clockwise degrees, as FFmpeg players apply it) -> the upright transform."""


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


def _rgb_image(rgb: VideoFrame) -> Image.Image:
    """The PIL image of an rgb24 frame, unpacked straight from its plane (the pixels ``to_image()`` gives).

    ``VideoFrame.to_image()`` also calls ``reformat`` again and copies the plane three times (rows,
    ``bytes``, ``frombytes``); one copy here (docs/performance.md, "Frame cache").
    """
    plane = rgb.planes[0]
    return Image.frombuffer("RGB", (plane.width, plane.height), bytes(plane), "raw", "RGB", plane.line_size, 1)


def _to_sample(scaler: VideoReformatter, frame: VideoFrame, size: tuple[int, int], rotation: int,
               quality: int) -> Sample:
    """One kept frame's JPEG and preview (runs in the worker thread)."""
    jpeg = _to_jpeg(scaler, frame, size, rotation, quality)
    preview = Preview.of(jpeg)
    return jpeg, preview.to_bytes() if preview else b""


def _to_jpeg(scaler: VideoReformatter, frame: VideoFrame, size: tuple[int, int], rotation: int, quality: int) -> bytes:
    """Scale + convert one kept frame to RGB, turn it upright and encode it.

    One long-lived ``scaler`` per video: it keeps its swscale context, which is most of the cost.
    """
    image = _rgb_image(scaler.reformat(frame, width=size[0], height=size[1], format="rgb24", interpolation="AREA"))
    if rotation % 360 in _ROTATE:
        image = image.transpose(_ROTATE[rotation % 360])
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _open(path: Path) -> InputContainer:
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
    if fmt.startswith("image2") or fmt.endswith("_pipe"):  # still-image demuxers: FFmpeg reads them as 1-frame video
        container.close()
        raise VideoDecodeError(path, 0.0, f"a still image ({fmt}), not a video")
    if not container.streams.video:
        container.close()
        raise VideoDecodeError(path, 0.0, f"no video stream (format {fmt})")
    return container


def assign_slots(timed: Iterable[tuple[Fraction, T]], rate: Fraction) -> Iterator[T]:
    """For each slot ``k = 0, 1, ...``: the last item whose time is ``<= k / rate`` (times relative to the first).

    Items arrive in presentation order; one earlier than its predecessor (a broken timestamp) is
    dropped. Slots run up to ``floor(rate * last_time)``; a gap repeats the item on screen.
    """
    current: T | None = None
    shown_at = Fraction(0)
    k = 0
    for t, item in timed:
        if current is not None:
            if t < shown_at:
                continue
            while k / rate < t:
                yield current
                k += 1
        current, shown_at = item, t
    while current is not None and k / rate <= shown_at:
        yield current
        k += 1


@dataclass
class _Progress:
    """How far decoding got: the offset of the last decoded frame and how many there were."""

    at: float = 0.0
    frames: int = 0


def _timed_frames(path: Path, container: InputContainer, progress: _Progress) -> Iterator[tuple[Fraction, VideoFrame]]:
    """(offset from the first frame, frame) of every decoded frame; decoder errors become VideoDecodeError."""
    pts0: int | None = None
    try:
        for frame in container.decode(container.streams.video[0]):
            if frame.pts is None or frame.time_base is None:
                raise VideoDecodeError(path, progress.at, "frame without a timestamp")
            pts0 = frame.pts if pts0 is None else pts0
            t = (frame.pts - pts0) * frame.time_base
            progress.at, progress.frames = max(progress.at, float(t)), progress.frames + 1
            yield t, frame
    except av.error.FFmpegError as e:
        raise VideoDecodeError(path, progress.at, f"corrupt or unreadable data ({e})") from e


def _check_complete(path: Path, container: InputContainer, progress: _Progress) -> None:
    """Raise if decoding stopped well before the duration the file declares (a cut-off download)."""
    if progress.frames == 0:
        raise VideoDecodeError(path, 0.0, "the video stream has no decodable frame")
    stream = container.streams.video[0]
    if stream.duration is not None and stream.time_base is not None:
        declared = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        declared = container.duration / av.time_base
    else:
        return
    tolerance = max(_TRUNCATION_TOLERANCE, 2 * progress.at / max(1, progress.frames - 1))
    if declared - progress.at > tolerance:
        raise VideoDecodeError(
            path, progress.at, f"stream ends at {progress.at:.3f}s but the file declares {declared:.3f}s (truncated?)"
        )


def sample_frames(path: str | Path, settings: SamplingSettings) -> Iterator[Sample]:
    """(JPEG, preview bytes) of each slot ``k = 0, 1, ...`` (video offset ``k / fps``), in order; see docs/video.md.

    Slot ``k`` shows the last decoded frame whose offset is ``<= k / fps`` (the frame on screen at
    that moment), so no slot shows a later moment; offset 0 is the first decoded frame. A slot that
    repeats the previous frame (a VFR gap) yields the very same object. Raises
    VideoDecodeError naming the file and the offset where decoding failed (slots before it may already
    have been yielded: the cache then writes nothing).
    """
    path = Path(path)
    progress = _Progress()
    pending: deque[Future[Sample]] = deque()
    scaler = VideoReformatter()  # used by the single worker thread only
    with _open(path) as container, ThreadPoolExecutor(1, thread_name_prefix="apm-jpeg") as worker:
        shown: VideoFrame | None = None
        encoded: Future[Sample] | None = None
        for frame in assign_slots(_timed_frames(path, container, progress), settings.rate):
            if frame is not shown:
                size = scaled_size(frame.width, frame.height, settings.max_side)
                encoded = worker.submit(_to_sample, scaler, frame, size, frame.rotation, settings.jpeg_quality)
                shown = frame
            assert encoded is not None  # the first slot's frame is never `shown` (None), so it was submitted
            pending.append(encoded)
            if len(pending) > _AHEAD:
                yield pending.popleft().result()
        _check_complete(path, container, progress)
        while pending:
            yield pending.popleft().result()
