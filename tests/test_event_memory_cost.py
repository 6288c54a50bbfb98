"""What event memory costs per observed frame (issue 37, item 4): every frame is thumbnailed to find scene
changes, so the thumbnail decodes the JPEG at a reduced DCT scale instead of whole."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

from apm.data.frames import Frame
from apm.streaming.events import thumbnail


def _cpu(work: Callable[[], object], times: int = 30) -> float:
    began = time.process_time()
    for _ in range(times):
        work()
    return time.process_time() - began


def _frame() -> Frame:
    """A 448×252 frame as the cache keeps one (JPEG quality 85): flat shading and a little sensor noise,
    as the synthetic scenes have."""
    rng = np.random.default_rng(0)
    pixels = (np.linspace(0, 255, 448)[None, :, None] + rng.normal(0, 3, (252, 448, 3))).clip(0, 255)
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(out, "JPEG", quality=85)
    return Frame("DAY1/S001", 0.0, 0, out.getvalue())


def test_a_thumbnail_costs_a_fraction_of_decoding_the_frame():
    frame = _frame()

    def decode() -> None:
        with Image.open(io.BytesIO(frame.jpeg)) as im:
            im.convert("RGB")

    full, thumb = min(_cpu(decode) for _ in range(3)), min(_cpu(lambda: thumbnail(frame, 0.1)) for _ in range(3))
    assert thumb < 0.75 * full, (thumb, full)  # decoded whole (and resized), it cost more than a decode


def test_a_thumbnail_keeps_its_size_and_leaves_out_the_margins():
    frame = _frame()
    assert thumbnail(frame, 0.1).shape == (24, 32, 3)
    assert thumbnail(frame, 0.1, (16, 12)).shape == (12, 16, 3)
