"""The pixel code of a frame's wall-clock second survives H.264 and resizing, and rejects non-codes."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from apm.video.encode import H264Writer
from apm.video.pixelcode import DATA_BITS, draw_code, read_code

VALUES = [0, 1, 86_399, 86_400 + 14 * 3600 + 3 * 60 + 5, 9 * 86_400 + 50_000, (1 << DATA_BITS) - 1]


def _noise(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_roundtrip_in_memory() -> None:
    rng = np.random.default_rng(0)
    for value in VALUES + [int(v) for v in rng.integers(0, 1 << DATA_BITS, 200)]:
        frame = _noise(rng, 120, 160)
        draw_code(frame, value)
        assert read_code(frame) == value


def test_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError):
        draw_code(np.zeros((120, 160, 3), np.uint8), 1 << DATA_BITS)


def test_roundtrip_through_h264_at_tiny_resolution(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = VALUES + [int(v) for v in rng.integers(0, 20 * 86_400, 34)]
    path = tmp_path / "code.mp4"
    with H264Writer(path, 160, 120, 5) as writer:
        for value in values:
            frame = _noise(rng, 120, 160)  # noise is the hardest background for the encoder
            draw_code(frame, value)
            writer.write(frame)
    with av.open(str(path)) as container:
        decoded = [read_code(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    assert decoded == values


@pytest.mark.parametrize("size", [(448, 252), (160, 90)])
@pytest.mark.parametrize("resample", [Image.Resampling.NEAREST, Image.Resampling.BILINEAR,
                                      Image.Resampling.BICUBIC, Image.Resampling.LANCZOS, Image.Resampling.BOX])
def test_roundtrip_through_resizing(size: tuple[int, int], resample: Image.Resampling) -> None:
    rng = np.random.default_rng(2)
    for value in VALUES:
        frame = _noise(rng, 360, 640)
        draw_code(frame, value)
        small = np.asarray(Image.fromarray(frame).resize(size, resample))
        assert read_code(small) == value


def test_frames_without_a_code_read_none() -> None:
    rng = np.random.default_rng(3)
    assert read_code(np.zeros((120, 160, 3), np.uint8)) is None
    assert read_code(np.full((120, 160, 3), 255, np.uint8)) is None
    assert all(read_code(_noise(rng, 120, 160)) is None for _ in range(200))
    assert read_code(np.full((120, 160, 3), 128, np.uint8)) is None


def test_a_flipped_cell_fails_the_check() -> None:
    frame = np.zeros((120, 160, 3), np.uint8)
    draw_code(frame, 123_456)
    for x0 in range(0, 160, 10):  # invert one whole cell at a time: a single-bit error
        flipped = frame.copy()
        flipped[-6:, x0 : x0 + 10] = 255 - flipped[-6:, x0 : x0 + 10]
        assert read_code(flipped) is None
