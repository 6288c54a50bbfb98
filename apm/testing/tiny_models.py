"""Tiny random Qwen2-VL, Qwen2.5-VL and Qwen3-VL built on this machine: real transformers/vLLM code
paths, gibberish output. Qwen3-VL writes each video's frame times into its prompt (``<t seconds>``), so its
tiny twin shows what timing an engine was given.

No weights are downloaded: the tokenizer is a byte-level BPE trained on the Python standard
library's sources, the model is randomly initialised from a fixed seed. Same seed and Python
version, same files. CLI: ``python -m apm.testing.tiny_models OUT_DIR [--arch qwen25vl|qwen3vl]``.
"""

from __future__ import annotations

import argparse
import sysconfig
from collections.abc import Iterator
from pathlib import Path

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
VOCAB_SIZE = 2048
CORPUS_CHARS = 1_000_000
MIN_PIXELS = 56 * 56
MAX_PIXELS = 112 * 112

# Qwen2-VL's chat format: a default system turn, ChatML turns, one vision placeholder per image/video.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'video' or 'video' in part or 'video_url' in part -%}"
    "{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in part -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def _corpus() -> Iterator[str]:
    """The standard library's top-level sources, in name order, up to ``CORPUS_CHARS``."""
    total = 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        yield text
        total += len(text)
        if total >= CORPUS_CHARS:
            return


def build_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    """A ~2k byte-level BPE with the Qwen-VL special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def build_processor(tokenizer, processor_class=None):  # -> transformers.Qwen2VLProcessor (or processor_class)
    """Qwen2-VL's processor (or ``processor_class``, e.g. Qwen2.5-VL's, which takes the same parts) with
    small pixel budgets (56² to 112² per image or frame)."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    return (processor_class or Qwen2VLProcessor)(
        image_processor=Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
        video_processor=Qwen2VLVideoProcessor(
            min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, cap_pixels_per_frame=False
        ),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


VISION = dict(depth=2, num_heads=2, spatial_merge_size=2, temporal_patch_size=2)
"""What the tiny ViTs share: 2 layers, 2 heads, 2x2 merge, frames paired in time."""
MERGED_VISION = dict(hidden_size=32, intermediate_size=64, out_hidden_size=64)
"""Qwen2.5-VL's and Qwen3-VL's ViT width, MLP width, and the merger's output (the text model's width)."""


def _token_ids(tokenizer) -> dict[str, int]:
    return {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}


def _text_config(tokenizer, **rope: object) -> dict:
    """2-layer text model (hidden 64, head_dim 32: vLLM's CPU attention needs >16), M-RoPE over 16 pairs."""
    ids = _token_ids(tokenizer)
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=4096,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 6, 6], **rope),
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )


def _vision_token_ids(tokenizer) -> dict[str, int]:
    ids = _token_ids(tokenizer)
    return dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def build_config(tokenizer):  # -> transformers.Qwen2VLConfig
    """The tiny text model + a 2-layer ViT (patch 14)."""
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        text_config=_text_config(tokenizer),
        vision_config=dict(VISION, embed_dim=32, hidden_size=64, mlp_ratio=2, patch_size=14),
        **_vision_token_ids(tokenizer),
    )


def build_qwen25vl_config(tokenizer):  # -> transformers.Qwen2_5_VLConfig
    """The tiny text model + a 2-layer windowed ViT (patch 14, one full-attention layer), video
    positions spaced by ``tokens_per_second`` x seconds per temporal patch as in Qwen2.5-VL."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config=_text_config(tokenizer),
        vision_config=dict(
            VISION, **MERGED_VISION, patch_size=14, window_size=56, fullatt_block_indexes=[1], tokens_per_second=2
        ),
        **_vision_token_ids(tokenizer),
    )


def build_qwen3vl_config(tokenizer):  # -> transformers.Qwen3VLConfig
    """The tiny text model (interleaved M-RoPE) + a 2-layer ViT (patch 16) with one DeepStack layer."""
    from transformers import Qwen3VLConfig

    return Qwen3VLConfig(
        text_config=_text_config(tokenizer, mrope_interleaved=True),
        vision_config=dict(
            VISION, **MERGED_VISION, patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0]
        ),
        **_vision_token_ids(tokenizer),
    )


def build_qwen3vl_processor(tokenizer):  # -> transformers.Qwen3VLProcessor
    """Qwen3-VL processor: images of 56² to 112², videos never shrunk below their size (64² frames
    stay 64²), and no frame sampling of its own (the harness sends the frames it chose)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    return Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            patch_size=16, merge_size=2, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
        ),
        video_processor=Qwen3VLVideoProcessor(
            size={"shortest_edge": MIN_PIXELS, "longest_edge": 64 * 64 * 1024},
            do_sample_frames=False,
            cap_pixels_per_frame=False,
        ),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def _write(out_dir: str | Path, model_class, config, processor, seed: int) -> Path:
    """Random fp32 weights of ``model_class`` (from ``seed``), greedy generation config and the processor."""
    import torch
    from transformers import GenerationConfig

    out = Path(out_dir)
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id,
        pad_token_id=config.text_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_qwen2vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen2-VL (tokenizer, processor, config, weights) to ``out_dir``; returns it."""
    from transformers import Qwen2VLForConditionalGeneration

    tokenizer = build_tokenizer()
    return _write(out_dir, Qwen2VLForConditionalGeneration, build_config(tokenizer), build_processor(tokenizer), seed)


def build_tiny_qwen25vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen2.5-VL (tokenizer, processor, config, weights) to ``out_dir``; returns it."""
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

    tokenizer = build_tokenizer()
    config, processor = build_qwen25vl_config(tokenizer), build_processor(tokenizer, Qwen2_5_VLProcessor)
    return _write(out_dir, Qwen2_5_VLForConditionalGeneration, config, processor, seed)


def build_tiny_qwen3vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen3-VL (tokenizer, processor, config, weights) to ``out_dir``; returns it."""
    from transformers import Qwen3VLForConditionalGeneration

    tokenizer = build_tokenizer()
    config, processor = build_qwen3vl_config(tokenizer), build_qwen3vl_processor(tokenizer)
    return _write(out_dir, Qwen3VLForConditionalGeneration, config, processor, seed)


BUILDERS = {"qwen2vl": build_tiny_qwen2vl, "qwen25vl": build_tiny_qwen25vl, "qwen3vl": build_tiny_qwen3vl}


def main(argv: list[str] | None = None) -> None:
    """CLI: build the tiny model into OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--arch", choices=sorted(BUILDERS), default="qwen2vl")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(BUILDERS[args.arch](args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
