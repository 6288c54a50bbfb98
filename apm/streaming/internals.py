"""What differs between the vision-language architectures a reference system works on from the inside
(their KV cache, their visual features): one table keyed by the model's ``config.model_type``, so every
internals reference (``kv_cache`` and the visual-feature and parametric memories) shares one adapter.

Each supported architecture takes one video segment as a placeholder the processor expands, places it
with its own M-RoPE index (``model.model.get_rope_index``), and lets the text after it follow at one past
the segment's largest position. Tensors go to ``model.device`` (CPU here, CUDA on a GPU backbone) and
features come back in ``model.dtype``; nothing here names a device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from apm.backbones.base import video_timing
from apm.data.frames import Frame

QWEN_SEGMENT = "<|vision_start|><|video_pad|><|vision_end|>"
"""Qwen2-VL's and Qwen2.5-VL's video placeholder: the processor expands the pad to the segment's tokens."""


@dataclass(frozen=True)
class Architecture:
    """How one architecture takes a video segment: its placeholder text, the processor outputs its M-RoPE
    index reads besides the ids, mask and token types, and whether its vision tower returns DeepStack
    features (added to the first text layers' hidden states at the visual tokens)."""

    name: str
    segment_text: str
    rope_inputs: tuple[str, ...] = ("video_grid_thw",)
    deepstack: bool = False


ARCHITECTURES: dict[str, Architecture] = {
    "qwen2_vl": Architecture("Qwen2-VL", QWEN_SEGMENT),
    "qwen2_5_vl": Architecture("Qwen2.5-VL", QWEN_SEGMENT, ("video_grid_thw", "second_per_grid_ts")),
    # The processor writes each temporal patch as `<t seconds><|vision_start|>pads<|vision_end|>` itself.
    "qwen3_vl": Architecture("Qwen3-VL", "<|video_pad|>", deepstack=True),
}
"""The architectures the internals references run on, by ``config.model_type`` (each has a tiny random
build in ``apm.testing.tiny_models`` and is tested on it)."""

UNSUPPORTED: dict[str, str] = {
    "internvl": "InternVL3.5 places frames as pixel-shuffled image tiles on a 1-D RoPE (no M-RoPE index to "
                "give a segment its own positions), and has no tiny build here",
    "video_llama_3": "VideoLLaMA3 prunes a video's tokens across frames (video_compression_mask) on a 1-D "
                     "RoPE, so a segment's tokens depend on its neighbours; no tiny build here",
}
"""Architectures of the paper's presets that are refused, with the reason (``config.model_type``)."""


class UnsupportedArchitecture(ValueError):
    """A model whose internals no reference system here knows how to work on."""


def supported() -> str:
    """The supported architectures, as a refusal names them."""
    return ", ".join(f"{a.name} ({kind})" for kind, a in ARCHITECTURES.items())


def architecture(model: Any) -> Architecture:
    """The table's entry for ``model``; any other architecture refused in one line, with the reason when known."""
    kind = model.config.model_type
    if kind in ARCHITECTURES:
        return ARCHITECTURES[kind]
    why = UNSUPPORTED.get(kind, "not an architecture whose internals this package knows")
    raise UnsupportedArchitecture(f"model type {kind!r} is not supported ({why}); supported: {supported()}")


def segment_inputs(processor: Any, model: Any, frames: Sequence[Frame]) -> Any:
    """The processor's tensors for ``frames`` as one video segment with their true timing, on ``model.device``.
    A segment shorter than one temporal patch repeats its last frame to fill it: what Qwen2-VL's processor
    does itself, and Qwen3-VL's refuses to."""
    short = processor.video_processor.temporal_patch_size - len(frames)
    frames = [*frames, *[frames[-1]] * short]
    return processor(text=[architecture(model).segment_text], videos=[np.stack([f.pixels() for f in frames])],
                     video_metadata=[video_timing(frames).metadata()], do_sample_frames=False,
                     return_tensors="pt").to(model.device)


def segment_positions(model: Any, inputs: Any) -> Any:
    """The segment's M-RoPE positions (3, 1, tokens) from position 0, by the model's own index."""
    extra = {name: inputs[name] for name in architecture(model).rope_inputs if name in inputs}
    positions, _ = model.model.get_rope_index(inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                                              attention_mask=inputs["attention_mask"], **extra)
    return positions


def position_after(positions: Any) -> int:
    """The position the text after a segment takes: one past its largest M-RoPE position."""
    return int(positions.max()) + 1


def text_positions(model: Any, start: int, length: int) -> Any:
    """M-RoPE positions (3, 1, ``length``) of text from ``start``: the same on every axis."""
    import torch

    return torch.arange(start, start + length, device=model.device).view(1, 1, -1).expand(3, 1, -1)


@dataclass(frozen=True)
class SegmentFeatures:
    """A segment's visual features as the language model receives them: one embedding per visual token
    (tokens, hidden), and the DeepStack features of an architecture that has them (one per layer)."""

    embeds: Any
    grid: tuple[int, int, int]
    """The merged tokens' (temporal patches, rows, columns): ``embeds`` holds them in that order."""
    deepstack: tuple[Any, ...] = ()


def segment_features(processor: Any, model: Any, frames: Sequence[Frame]) -> SegmentFeatures:
    """Run ``frames`` through the vision tower and merger only: the features the placeholder's tokens take."""
    import torch

    inputs = segment_inputs(processor, model, frames)
    with torch.inference_mode():
        out = model.model.get_video_features(inputs["pixel_values_videos"], inputs["video_grid_thw"])
    embeds = torch.cat(out.pooler_output).to(model.dtype)
    deepstack = tuple(torch.cat(f).to(model.dtype) for f in out.deepstack_features) \
        if architecture(model).deepstack else ()
    merge = model.model.visual.spatial_merge_size
    t, h, w = (int(x) for x in inputs["video_grid_thw"][0])
    return SegmentFeatures(embeds, (t, h // merge, w // merge), deepstack)
