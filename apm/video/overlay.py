"""Render wall-clock timestamps onto video frames (the paper's Stage-1 step for HD-EPIC sessions)."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from apm.data import clock
from apm.records.atomic import new_file
from apm.video.encode import H264Writer

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


def overlay_timestamps(src: Path, dst: Path, day_id: str, start_hms: str) -> None:
    """Re-encode ``src`` to the new file ``dst`` with ``DAYn HH:MM:SS`` (start + frame time) drawn on each
    frame; an existing ``dst`` is refused (``OutputRefused``), a failure leaves no ``dst``."""
    start = clock.absolute(day_id, start_hms)
    with av.open(str(src)) as container, new_file(dst, "apm-data overlay") as out:
        stream = container.streams.video[0]
        rate = stream.average_rate or stream.guessed_rate or Fraction(30)
        with H264Writer(out, stream.codec_context.width, stream.codec_context.height, rate) as writer:
            for frame in container.decode(stream):
                rgb = frame.to_ndarray(format="rgb24")
                offset = frame.time if frame.time is not None else writer.frames / float(rate)
                draw_label(rgb, clock.label(start + math.floor(offset + 1e-6)))
                writer.write(rgb)
