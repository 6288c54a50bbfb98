"""A deterministic H.264 writer: libx264 on one thread without macroblock-tree and a bit-exact mp4
muxer, so the same frames give the same bytes (the synthetic release and the timestamp overlay)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import TracebackType

import av
import numpy as np

CRF = 20
"""x264 constant-rate factor: high enough quality for pixel codes and colour patches at 160x120."""


class H264Writer:
    """Write RGB frames to an mp4 (H.264, yuv420p) reproducibly: same frames in, same bytes out."""

    def __init__(self, path: Path, width: int, height: int, fps: int | Fraction):
        """Open ``path`` for ``width`` x ``height`` frames at ``fps``, with a keyframe every second."""
        if width % 2 or height % 2:
            raise ValueError(f"H.264 yuv420p needs even dimensions, got {width}x{height}")
        self._container = av.open(str(path), "w", format="mp4", options={"fflags": "+bitexact"})
        rate = Fraction(fps)
        # x264's macroblock-tree rate control made the output vary between identical runs (measured with
        # av 18 / x264 core 165), so it is off; one thread keeps the rest deterministic.
        options = {"preset": "veryfast", "crf": str(CRF), "threads": "1", "x264-params": "mbtree=0"}
        self._stream = self._container.add_stream("libx264", rate=rate, options=options)
        self._stream.width, self._stream.height, self._stream.pix_fmt = width, height, "yuv420p"
        self._stream.codec_context.gop_size = max(1, round(rate))
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
        """Use as a context manager: the file is finished on leaving the block."""
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Finish the file, or just close it when the block raised."""
        if exc_type is None:
            self.close()
        else:
            self._container.close()
