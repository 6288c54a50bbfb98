"""Small test videos whose pixels state when each frame was recorded (a black/white bit grid)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Sequence

import av
import numpy as np

GRID = (4, 4)
"""Bits of the time code, as (rows, cols) of blocks covering the whole frame; 16 bits of centiseconds."""


def code_image(value: int, width: int, height: int) -> np.ndarray:
    """An RGB frame whose block grid spells ``value`` in binary (most significant bit top-left)."""
    rows, cols = GRID
    bits = [(value >> (rows * cols - 1 - b)) & 1 for b in range(rows * cols)]
    grid = np.array(bits, dtype=np.uint8).reshape(rows, cols) * 255
    ys = np.arange(height) * rows // height
    xs = np.arange(width) * cols // width
    return np.repeat(grid[ys][:, xs][..., None], 3, axis=2)


def read_code(rgb: np.ndarray) -> int:
    """The value spelled by a frame made by :func:`code_image` (after scaling and JPEG)."""
    rows, cols = GRID
    h, w = rgb.shape[:2]
    value = 0
    for r in range(rows):
        for c in range(cols):
            block = rgb[
                (4 * r + 1) * h // (4 * rows) : (4 * r + 3) * h // (4 * rows),
                (4 * c + 1) * w // (4 * cols) : (4 * c + 3) * w // (4 * cols),
            ]
            value = value * 2 + int(block.mean() > 127)
    return value


def make_video(
    path: Path,
    times: Sequence[float],
    size: tuple[int, int] = (96, 64),
    *,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    start: float = 0.0,
    rotation: int | None = None,
    audio: bool = False,
    options: dict[str, str] | None = None,
) -> Path:
    """Encode one frame per entry of ``times`` (seconds after the first frame, which is at ``start``).

    Each frame's pixels spell its time in centiseconds relative to the first frame.
    """
    tb = Fraction(1, 1000)
    with av.open(str(path), "w", options=options or {}) as out:
        stream = out.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], pix_fmt
        stream.codec_context.time_base = tb
        if codec == "libx264":
            stream.codec_context.options = {"preset": "ultrafast", "g": "30"}
        if rotation is not None:
            stream.set_display_rotation(rotation)
        sound = out.add_stream("aac", rate=16000) if audio else None
        for t in times:
            frame = av.VideoFrame.from_ndarray(code_image(round(t * 100), *size), format="rgb24")
            frame.pts, frame.time_base = round((start + t) * 1000), tb
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
        if sound is not None:
            samples = np.zeros((1, 1024), dtype=np.float32)
            for i in range(int(max(times) * 16000 / 1024)):
                chunk = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
                chunk.sample_rate, chunk.pts = 16000, i * 1024
                out.mux(sound.encode(chunk))
            out.mux(sound.encode())
    return path


def cfr(last: float, fps: int = 10) -> list[float]:
    """Frame times of a constant-rate clip from 0 to ``last`` seconds, both included."""
    return [i / fps for i in range(round(last * fps) + 1)]
