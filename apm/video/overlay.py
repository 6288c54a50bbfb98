"""Render wall-clock timestamps onto video frames (the paper's Stage-1 step for HD-EPIC sessions).

Also holds the deterministic H.264 writer both this overlay and :mod:`apm.synth` encode with:
libx264 on one thread and a bit-exact mp4 muxer, so the same frames give the same bytes.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from types import TracebackType

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from apm.data import clock

STRIP_FRACTION = 0.12
"""Height of the timestamp strip at the top of a frame, as a fraction of the frame height."""
TEXT_COLOUR = (255, 255, 255)
STRIP_COLOUR = (0, 0, 0)


def strip_height(height: int) -> int:
    """Pixel height of the timestamp strip of a frame ``height`` pixels tall."""
    return max(10, round(height * STRIP_FRACTION))


@lru_cache(maxsize=64)
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` pixels (same glyphs on every machine with this Pillow)."""
    return ImageFont.load_default(size=max(6, size))


def draw_label(rgb: np.ndarray, text: str) -> None:
    """Draw ``text`` white on a black strip across the top of an (H, W, 3) uint8 frame, in place."""
    h = strip_height(rgb.shape[0])
    strip = Image.new("RGB", (rgb.shape[1], h), STRIP_COLOUR)
    ImageDraw.Draw(strip).text((max(2, h // 5), h // 2), text, fill=TEXT_COLOUR, font=font(round(h * 0.8)), anchor="lm")
    rgb[:h] = np.asarray(strip)


class H264Writer:
    """Write RGB frames to an mp4 (H.264, yuv420p) reproducibly: same frames in, same bytes out."""

    def __init__(self, path: Path, width: int, height: int, fps: int | Fraction, crf: int = 20, gop: int | None = None):
        if width % 2 or height % 2:
            raise ValueError(f"H.264 yuv420p needs even dimensions, got {width}x{height}")
        self._container = av.open(str(path), "w", format="mp4", options={"fflags": "+bitexact"})
        rate = Fraction(fps)
        self._stream = self._container.add_stream(
            "libx264", rate=rate, options={"preset": "veryfast", "crf": str(crf), "threads": "1"}
        )
        self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, "yuv420p"
        self._stream.codec_context.gop_size = gop or max(1, round(rate))
        self._stream.thread_count = 1
        self.frames = 0

    def write(self, rgb: np.ndarray) -> None:
        """Append one (H, W, 3) uint8 RGB frame."""
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder and finish the file."""
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()

    def __enter__(self) -> "H264Writer":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self._container.close()


def overlay_timestamps(src: Path, dst: Path, day_id: str, start_hms: str) -> None:
    """Re-encode ``src`` to ``dst`` with ``DAYn HH:MM:SS`` (start + frame time) drawn on each frame."""
    start = clock.absolute(day_id, start_hms)
    with av.open(str(src)) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate or Fraction(30)
        with H264Writer(Path(dst), stream.codec_context.width, stream.codec_context.height, rate) as writer:
            for frame in container.decode(stream):
                rgb = frame.to_ndarray(format="rgb24")
                offset = frame.time if frame.time is not None else writer.frames / float(rate)
                draw_label(rgb, clock.label(start + math.floor(offset + 1e-6)))
                writer.write(rgb)
