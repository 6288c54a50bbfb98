"""Visual tokens per still and per video frame, counted by the real processors (transformers, CPU, offline).

Each paper preset's engine turns a cached frame (448 px on its longest side, 448 × 252 for the release's
16:9 video) into vision tokens with its model's processors. This module builds those processor classes
with the released models' settings and counts: a still from ``image_grid_thw`` (Qwen) or its tiles
(InternVL), a video of ``n`` frames from ``video_grid_thw`` or its frames. Which value comes from the
class's defaults and which from the model's released configuration: ``docs/backbones.md``, "Visual
tokens". ``bench/token_counts.py`` prints the table and what each frame layout costs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from transformers import GotOcr2ImageProcessor, InternVLVideoProcessor, Qwen2VLImageProcessor, Qwen3VLVideoProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as qwen2_resize
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as qwen3_video_resize

FRAME_HEIGHT, FRAME_WIDTH = 252, 448
"""A cached frame of a 16:9 session (``apm.video.cache``: 448 px on the longest side)."""

QWEN3_VL_IMAGE: dict[str, Any] = {"patch_size": 16, "size": {"shortest_edge": 65536, "longest_edge": 16777216}}
"""Qwen3-VL-8B-Instruct's ``preprocessor_config.json`` where it differs from ``Qwen2VLImageProcessor``'s defaults
(patch 14, 3,136–12,845,056 pixels)."""
QWEN3_VL_VIDEO: dict[str, Any] = {"size": {"shortest_edge": 4096, "longest_edge": 25165824}}
"""Qwen3-VL-8B-Instruct's ``video_preprocessor_config.json`` where it differs from ``Qwen3VLVideoProcessor``'s
defaults (131,072–786,432 pixels): a whole video's pixels, shared by all its frames."""
INTERNVL_TILE = 448
"""InternVL3.5-8B's ``force_image_size``: every tile (and every video frame) is 448 × 448."""
INTERNVL_IMAGE: dict[str, Any] = {"crop_to_patches": True, "min_patches": 1, "max_patches": 12,
                  "size": {"height": INTERNVL_TILE, "width": INTERNVL_TILE}}
"""InternVL3.5-8B's dynamic tiling (``dynamic_image_size``, ``max_dynamic_patch`` 12, a thumbnail beside the tiles)."""
INTERNVL_TOKENS_PER_TILE = (INTERNVL_TILE // 14) ** 2 // 4
"""Vision patches of 14 px, pixel-shuffled by ``downsample_ratio`` 0.5: 256 tokens per tile."""


@dataclass(frozen=True)
class VisualTokens:
    """What one engine's processors make of cached frames: a still's tokens and an ``n``-frame video's."""

    name: str
    still: int
    video: Callable[[int], int]
    measured: bool = True
    """False: an estimate kept because the processor cannot be built here (it is marked in every table)."""

    def per_video_frame(self, frames: int) -> float:
        """Tokens per frame inside a video of ``frames`` frames."""
        return self.video(frames) / frames


def _blank_video(frames: int) -> np.ndarray:
    return np.zeros((frames, FRAME_HEIGHT, FRAME_WIDTH, 3), np.uint8)


def qwen_still(processor: Qwen2VLImageProcessor) -> int:
    """A still's tokens from the image processor's ``image_grid_thw`` (t·h·w ÷ merge²)."""
    grid = processor(images=[np.zeros((FRAME_HEIGHT, FRAME_WIDTH, 3), np.uint8)], return_tensors="np")["image_grid_thw"]
    return int(np.prod(grid)) // processor.merge_size**2


def qwen_video(processor: Qwen2VLVideoProcessor | Qwen3VLVideoProcessor, frames: int) -> int:
    """An ``frames``-frame video's tokens from the video processor's ``video_grid_thw`` (t·h·w ÷ merge²); a
    448 × 252 frame is under the per-frame pixel cap, so ``cap_pixels_per_frame`` changes nothing here."""
    out = processor(videos=[_blank_video(frames)], do_sample_frames=False, cap_pixels_per_frame=False,
                    return_tensors="np")
    return int(np.prod(out["video_grid_thw"])) // processor.merge_size**2


def qwen3_video_rule(processor: Qwen3VLVideoProcessor) -> Callable[[int], int]:
    """Qwen3-VL's video tokens by the processor's own resize rule (``smart_resize`` over all frames), for
    any length without running it; :func:`qwen_video` checks it (``tests/test_token_counts.py``)."""
    factor, merge = processor.patch_size * processor.merge_size, processor.merge_size
    size, pair = processor.size, processor.temporal_patch_size

    def tokens(frames: int) -> int:
        if frames <= 0:
            return 0
        h, w = qwen3_video_resize(max(frames, pair), FRAME_HEIGHT, FRAME_WIDTH, temporal_factor=pair, factor=factor,
                                  min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"])
        return math.ceil(frames / pair) * (h // processor.patch_size) * (w // processor.patch_size) // merge**2
    return tokens


def qwen2_video_rule(processor: Qwen2VLVideoProcessor) -> Callable[[int], int]:
    """Qwen2/2.5-VL's video tokens by the processor's own per-frame resize rule, for any length."""
    factor, size, pair = processor.patch_size * processor.merge_size, processor.size, processor.temporal_patch_size
    h, w = qwen2_resize(FRAME_HEIGHT, FRAME_WIDTH, factor=factor, min_pixels=size["shortest_edge"],
                        max_pixels=size["longest_edge"])
    per_pair = (h // processor.patch_size) * (w // processor.patch_size) // processor.merge_size**2
    return lambda frames: math.ceil(frames / pair) * per_pair if frames > 0 else 0


def internvl_still(processor: GotOcr2ImageProcessor) -> int:
    """A still's tokens: its tiles (with the thumbnail) × 256."""
    out = processor(images=[np.zeros((FRAME_HEIGHT, FRAME_WIDTH, 3), np.uint8)], return_tensors="np")
    return int(out["num_patches"][0]) * INTERNVL_TOKENS_PER_TILE


def internvl_video(processor: InternVLVideoProcessor, frames: int) -> int:
    """A video's tokens: one 448 × 448 tile per frame × 256."""
    out = processor(videos=[_blank_video(frames)], return_tensors="np")
    return int(out["pixel_values_videos"].shape[1]) * INTERNVL_TOKENS_PER_TILE


@cache
def qwen3_vl() -> VisualTokens:
    """Qwen3-VL-8B-Instruct (and the Qwen3.8-27B preset, assumed to share its processors)."""
    return VisualTokens("Qwen3-VL", qwen_still(Qwen2VLImageProcessor(**QWEN3_VL_IMAGE)),
                        qwen3_video_rule(Qwen3VLVideoProcessor(**QWEN3_VL_VIDEO)))


@cache
def qwen2_5_vl() -> VisualTokens:
    """Qwen2.5-VL (the class defaults are its released budgets; either keeps a 448 × 252 frame whole)."""
    return VisualTokens("Qwen2.5-VL", qwen_still(Qwen2VLImageProcessor()), qwen2_video_rule(Qwen2VLVideoProcessor()))


@cache
def internvl3_5() -> VisualTokens:
    """InternVL3.5-8B: dynamic tiles for a still, one tile per video frame."""
    per_frame = internvl_video(InternVLVideoProcessor(size={"height": INTERNVL_TILE, "width": INTERNVL_TILE}), 2) // 2
    return VisualTokens("InternVL3.5", internvl_still(GotOcr2ImageProcessor(**INTERNVL_IMAGE)),
                        lambda frames: per_frame * max(frames, 0))


VIDEOLLAMA3_TOKENS_PER_FRAME = 196
"""VideoLLaMA3-7B's processor is remote code (not in transformers): its preset's estimate, not measured."""


def videollama3() -> VisualTokens:
    """VideoLLaMA3-7B: the preset's estimate (a still counted as one frame), marked unmeasured."""
    return VisualTokens("VideoLLaMA3 (estimate)", VIDEOLLAMA3_TOKENS_PER_FRAME,
                        lambda frames: VIDEOLLAMA3_TOKENS_PER_FRAME * max(frames, 0), measured=False)


PRESETS: dict[str, Callable[[], VisualTokens]] = {
    "qwen3_vl_8b": qwen3_vl, "qwen3_8_27b": qwen3_vl, "internvl3_5_8b": internvl3_5, "videollama3_7b": videollama3,
}
"""The paper presets (``conf/backbone/<name>.yaml``) and the processors their engines count with."""
