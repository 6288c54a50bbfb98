"""Shared helpers for the model-backend tests: the tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL, synthetic JPEG frames."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from apm.backbones.base import FramePart, GenerationSettings, Message, Request, TextPart
from apm.data.frames import Frame
from support import REPO

CONF = REPO / "conf" / "backbone"
"""The backbone presets."""


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen2-VL, built once per test session."""
    return build_tiny_qwen2vl_once(tmp_path_factory.getbasetemp() / "tiny-qwen2vl")


def make_frames(
    n: int, seed: int = 0, size: tuple[int, int] = (64, 64), fill: int | None = None
) -> list[Frame]:
    """``n`` JPEG frames of ``size`` (h, w), one second apart: random noise, or all ``fill``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n):
        buf = io.BytesIO()
        pixels = (
            rng.integers(0, 256, (*size, 3), dtype=np.uint8) if fill is None else np.full((*size, 3), fill, np.uint8)
        )
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        frames.append(Frame("DAY1/S001", float(i), 36_000 + i, buf.getvalue()))
    return frames


def frames_request(frames: list[Frame], text: str = "What happens?", max_tokens: int = 16, **settings) -> Request:
    """One user turn: the frames, then the question."""
    parts = (*(FramePart(f) for f in frames), TextPart(text))
    return Request((Message("user", parts),), GenerationSettings(max_tokens=max_tokens, **settings))


def build_tiny_qwen2vl_once(path: Path) -> Path:
    """The tiny model at ``path``, built unless it is already there."""
    from apm.testing.tiny_models import build_tiny_qwen2vl

    if not (path / "model.safetensors").exists():
        build_tiny_qwen2vl(path)
    return path


@pytest.fixture(scope="session")
def tiny_qwen3vl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen3-VL (it writes each video's frame times into its prompt), built once."""
    from apm.testing.tiny_models import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.getbasetemp() / "tiny-qwen3vl")


@pytest.fixture(scope="session")
def tiny_qwen25vl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen2.5-VL (windowed ViT, video positions spaced by seconds per patch), built once."""
    from apm.testing.tiny_models import build_tiny_qwen25vl

    return build_tiny_qwen25vl(tmp_path_factory.getbasetemp() / "tiny-qwen25vl")
