"""A frame as every later stage sees it: compressed pixels plus where and when it was recorded."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from apm.data import clock

if TYPE_CHECKING:
    from PIL import Image

PREVIEW_SCALE = 8
"""A preview is its JPEG decoded at 1/8 of its size: libjpeg's smallest DCT scale, each 8×8 block's colour."""
_FULL_SIZE = struct.Struct("<HH")


@dataclass(frozen=True)
class Preview:
    """A frame's JPEG decoded at 1/:data:`PREVIEW_SCALE` of its size, kept by the frame cache beside the JPEG,
    so that a system that looks at every frame (scene cuts) need not decode each JPEG in each run.

    Its pixels are exactly those of ``Image.draft("RGB", size)`` for any ``size`` it :meth:`serves`: the
    same decode of the same bytes, done once when the cache entry is built.
    """

    size: tuple[int, int]
    """The JPEG's full (width, height)."""
    rgb: bytes
    """Its RGB pixels at 1/8, row-major: ceil(width / 8) × ceil(height / 8) × 3 bytes."""

    @classmethod
    def of(cls, jpeg: bytes) -> Preview | None:
        """The preview of ``jpeg``; None when it is smaller than 8 pixels a side (no 1/8 scale)."""
        from PIL import Image

        with Image.open(io.BytesIO(jpeg)) as im:
            width, height = im.size
            scaled = (width // PREVIEW_SCALE, height // PREVIEW_SCALE)
            if min(width, height) < PREVIEW_SCALE or im.draft("RGB", scaled) is None:
                return None
            return cls((width, height), im.convert("RGB").tobytes())

    def serves(self, size: tuple[int, int]) -> bool:
        """Whether ``Image.draft("RGB", size)`` on the JPEG decodes at 1/8, i.e. gives these very pixels
        (Pillow picks the largest of 8, 4, 2, 1 not above ``min(width // w, height // h)``)."""
        return min(self.size[0] // size[0], self.size[1] // size[1]) >= PREVIEW_SCALE

    def image(self) -> Image.Image:
        from PIL import Image

        width, height = self.size
        return Image.frombytes("RGB", (-(-width // PREVIEW_SCALE), -(-height // PREVIEW_SCALE)), self.rgb)

    def to_bytes(self) -> bytes:
        """As the frame cache stores it: u16 width, u16 height (little-endian), then the pixels."""
        return _FULL_SIZE.pack(*self.size) + self.rgb

    @classmethod
    def from_bytes(cls, data: bytes) -> Preview | None:
        """A stored preview; None for an empty one (a frame too small to have one)."""
        if not data:
            return None
        width, height = _FULL_SIZE.unpack_from(data)
        return cls((width, height), data[_FULL_SIZE.size :])


@dataclass(frozen=True)
class Frame:
    """One sampled frame. ``jpeg`` is sent to engines as is; ``pixels()`` decodes it on demand.

    ``session`` is the session key (``DAYn/Sxxx``), ``offset`` the video offset in seconds and
    ``wall_clock`` the absolute wall-clock second (see :mod:`apm.data.clock`).
    """

    session: str
    offset: float
    wall_clock: int
    jpeg: bytes
    entry: str = ""
    """The key of the frame-cache entry it was read from ("" when it was not read from the cache)."""
    preview: Preview | None = None
    """Its 1/8-scale decode, where the stage that read it from the cache asked for it (the streaming feed)."""

    def pixels(self) -> np.ndarray:
        """RGB ``uint8`` array of shape (H, W, 3)."""
        from PIL import Image

        with Image.open(io.BytesIO(self.jpeg)) as im:
            return np.asarray(im.convert("RGB"))

    @property
    def label(self) -> str:
        return clock.label(self.wall_clock)

    def describe(self) -> dict:
        """The record form: what was shown, without the pixels."""
        return {"session": self.session, "offset": self.offset, "wall_clock": self.label}
