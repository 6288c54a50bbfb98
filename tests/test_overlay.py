"""Timestamp overlay: a video without visible times gets ``DAYn HH:MM:SS`` drawn on every frame."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from apm.data import clock
from apm.video.encode import H264Writer
from apm.video.overlay import draw_label, overlay_timestamps, strip_height

W, H, FPS, SECONDS = 160, 120, 5, 3


def _frames(path: Path) -> tuple[list[np.ndarray], list[float]]:
    with av.open(str(path)) as container:
        decoded = list(container.decode(video=0))
        return [f.to_ndarray(format="rgb24") for f in decoded], [float(f.time) for f in decoded]


def _duration(path: Path) -> float:
    with av.open(str(path)) as container:
        return container.duration / av.time_base


def _plain_video(path: Path) -> None:
    """A bright moving gradient and no timestamp anywhere."""
    x = np.linspace(60, 200, W, dtype=np.float32)
    with H264Writer(path, W, H, FPS) as writer:
        for i in range(SECONDS * FPS):
            frame = np.empty((H, W, 3), np.uint8)
            frame[:] = ((x + 4 * i) % 256).astype(np.uint8)[None, :, None]
            writer.write(frame)


def _label_error(strip: np.ndarray, text: str) -> float:
    expected = np.zeros((H, W, 3), np.uint8)
    draw_label(expected, text)
    h = strip_height(H)
    return float(np.mean((strip[:h].astype(np.float32) - expected[:h].astype(np.float32)) ** 2))


def test_overlay_draws_the_wall_clock_and_keeps_timing(tmp_path: Path) -> None:
    src, dst = tmp_path / "plain.mp4", tmp_path / "stamped.mp4"
    _plain_video(src)
    overlay_timestamps(src, dst, "DAY2", "14:03:05")
    before, times_before = _frames(src)
    after, times_after = _frames(dst)
    assert len(after) == len(before) == SECONDS * FPS
    assert times_after == times_before
    assert abs(_duration(dst) - _duration(src)) < 1e-6
    h = strip_height(H)
    start = clock.absolute("DAY2", "14:03:05")
    for i, (a, b) in enumerate(zip(before, after)):
        assert np.mean(np.abs(a[:h].astype(int) - b[:h].astype(int))) > 40  # the strip changed
        assert np.mean(np.abs(a[h + 4 :].astype(int) - b[h + 4 :].astype(int))) < 3  # the scene did not
        second = start + i // FPS
        right = _label_error(b, clock.label(second))
        assert right < _label_error(b, clock.label(second + 1))
        assert right < _label_error(b, clock.label(second - 1))
