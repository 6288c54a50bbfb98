"""Qwen3-VL-8B without its weights, for the GPU benchmarks: its dimensions, its processor's pixel budgets,
and a model folder (config, tokenizer, processor; no weights) built here. Nothing is downloaded.

The dimensions are written into the tiny Qwen3-VL's config (:mod:`apm.testing.tiny_models`), so the
tokenizer is the tiny one (a 2k BPE: more tokens per word than Qwen's); the pixel budgets are
Qwen3-VL-8B-Instruct's own (``preprocessor_config.json``, ``video_preprocessor_config.json``).
"""

from __future__ import annotations

from pathlib import Path

from apm.testing.tiny_models import CHAT_TEMPLATE, build_qwen3vl_config, build_qwen3vl_processor, build_tokenizer

EIGHT_B = {
    "text_config": dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                        rope_parameters=dict(rope_type="default", rope_theta=5000000.0, mrope_section=[24, 20, 20],
                                             mrope_interleaved=True)),
    "vision_config": dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          out_hidden_size=4096, num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24]),
}
"""Qwen3-VL-8B-Instruct's dimensions (text 36 × 4096, GQA 32/8, vision 27 × 1152 with DeepStack)."""
PIXELS = {"image": {"shortest_edge": 65536, "longest_edge": 16777216},
          "video": {"shortest_edge": 4096, "longest_edge": 25165824}}
"""Qwen3-VL's processor budgets: an image's pixels, a whole video's pixels (shared by all its frames)."""


def write_model(out: Path, eight_b: bool) -> Path:
    """A Qwen3-VL model folder without weights: the tiny config (scaled to 8B when asked), the tokenizer
    and processor built here; the engine draws the weights (vLLM's dummy loader, ``weights: random``)."""
    tokenizer = build_tokenizer()
    config = build_qwen3vl_config(tokenizer)
    processor = build_qwen3vl_processor(tokenizer)
    if eight_b:
        config.text_config.update(EIGHT_B["text_config"])
        config.vision_config.update(EIGHT_B["vision_config"])
        processor = _processor(tokenizer)
    config.architectures = ["Qwen3VLForConditionalGeneration"]  # what a saved model names (vLLM picks by it)
    config.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def _processor(tokenizer):  # -> transformers.Qwen3VLProcessor
    """Qwen3-VL's processor with its own pixel budgets (:data:`PIXELS`), no frame sampling of its own."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=16, merge_size=2, size=PIXELS["image"]),
        video_processor=Qwen3VLVideoProcessor(size=PIXELS["video"], do_sample_frames=False),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
