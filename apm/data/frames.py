"""A frame as every later stage sees it: compressed pixels plus where and when it was recorded."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from apm.data import clock


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
