"""The paper presets' token estimates against the real processors, and what each frame layout costs with them.

Processors are built from the transformers classes installed here (CPU, offline); ``bench/token_counts.py``
turns their counts into both layouts' prefill over paper-shaped trajectories (docs/backbones.md, "Visual
tokens"; docs/prompts.md, "Frame layouts").
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from transformers import Qwen2VLImageProcessor, Qwen3VLVideoProcessor
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

from apm.backbones import token_counts as tc
from apm.video.select import still_count

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import token_counts as bench  # noqa: E402

MEASURED = [p for p, build in tc.PRESETS.items() if build().measured]
TEXT_AND_ANSWER = 16_384
"""What the Qwen presets' ``max_model_len`` keeps beyond the frames (docs/backbones.md)."""


@pytest.mark.parametrize("frames", [2, 3, 256, 1024])
def test_qwen3_vl_video_rule_is_the_processors(frames):
    processor = Qwen3VLVideoProcessor(**tc.QWEN3_VL_VIDEO)
    assert tc.qwen3_video_rule(processor)(frames) == tc.qwen_video(processor, frames)


def test_qwen2_5_vl_video_rule_is_the_processors():
    processor = Qwen2VLVideoProcessor()
    assert tc.qwen2_video_rule(processor)(6) == tc.qwen_video(processor, 6) == 3 * 144


def test_the_real_counts():
    """What the processors say about a 448 × 252 frame (the figures docs/backbones.md quotes)."""
    qwen3 = tc.qwen3_vl()
    assert (qwen3.still, qwen3.per_video_frame(2), qwen3.per_video_frame(1024)) == (112, 56, 9)
    assert tc.qwen_still(Qwen2VLImageProcessor()) == tc.qwen2_5_vl().still == 144
    internvl = tc.internvl3_5()
    assert (internvl.still, internvl.per_video_frame(128)) == (768, 256)  # 2 tiles and the thumbnail; 1 tile
    assert not tc.videollama3().measured  # remote code: its estimate, marked


@pytest.mark.parametrize("preset", MEASURED)
def test_presets_estimate_frames_and_stills_as_their_processors_count(preset):
    guard, tokens = bench.preset_guard(preset), tc.PRESETS[preset]()
    assert guard.max_frames is not None
    assert guard.tokens_per_frame == math.ceil(tokens.per_video_frame(guard.max_frames))
    assert guard.tokens_per_still == tokens.still


def test_videollama3_keeps_its_marked_estimate():
    guard = bench.preset_guard("videollama3_7b")
    assert guard.tokens_per_frame == tc.VIDEOLLAMA3_TOKENS_PER_FRAME and guard.tokens_per_still is None


@pytest.mark.parametrize("preset", ["qwen3_vl_8b", "qwen3_8_27b"])
def test_qwen_context_holds_the_largest_real_request(preset):
    """``max_model_len``: the most a request's frames really cost under either layout, plus text and answer."""
    guard, tokens = bench.preset_guard(preset), tc.PRESETS[preset]()
    assert guard.max_frames is not None and guard.max_context_tokens is not None
    video = max(tokens.video(n) for n in range(1, guard.max_frames + 1))
    stills = tc.qwen3_vl().still * still_count(guard.max_frames, guard.frames_per_still)
    assert video + stills + TEXT_AND_ANSWER <= guard.max_context_tokens


@pytest.mark.parametrize("preset", list(tc.PRESETS))
@pytest.mark.parametrize("shape", [s for s in bench.SHAPES if s.probes_per_session >= 2], ids=lambda s: s.name)
def test_session_stable_computes_no_more_prefill_than_uniform(preset, shape):
    """With an ideal prefix cache, ``session_stable`` never has the engine compute more prompt tokens
    than ``uniform`` over a trajectory whose sessions have two probes or more (one: docs/prompts.md)."""
    uniform, stable = (bench.layout_cost(preset, layout, shape) for layout in bench.LAYOUTS)
    assert stable.computed <= uniform.computed


def test_prefill_reuses_whole_items_in_whole_blocks():
    a = [("system", 40), ("video-1", 100)]
    cost = bench.prefill([a, a, [("system", 40), ("video-2", 100)]])
    probe = bench.PROBE_TOKENS
    assert cost.prompt == 3 * (140 + probe)
    # the second request reuses 140 tokens (128 in whole blocks); the third only the system prompt's 32
    assert cost.computed == (140 + probe) + (140 + probe - 128) + (140 + probe - 32)
