"""A tiny random Qwen2-VL built on this machine: real transformers/vLLM code paths, gibberish output.

No weights are downloaded: the tokenizer is a byte-level BPE trained on the Python standard
library's sources, the model is randomly initialised from a fixed seed. Same seed and Python
version, same files. CLI: ``python -m apm.backbones.tiny OUT_DIR``.
"""

from __future__ import annotations

import argparse
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from apm.backbones import _torchvision_cpu_fix

_torchvision_cpu_fix.install()

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


def build_processor(tokenizer):  # -> transformers.Qwen2VLProcessor
    """Qwen2-VL processor with small pixel budgets (56² to 112² per image or frame)."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS),
        video_processor=Qwen2VLVideoProcessor(
            min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, cap_pixels_per_frame=False
        ),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )


def build_config(tokenizer):  # -> transformers.Qwen2VLConfig
    """2-layer text model (hidden 64, head_dim 32: vLLM's CPU attention needs >16) + 2-layer ViT."""
    from transformers import Qwen2VLConfig

    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    return Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            max_position_embeddings=4096,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[4, 6, 6]),
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
        ),
        vision_config=dict(
            depth=2,
            embed_dim=32,
            hidden_size=64,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def build_tiny_qwen2vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write tokenizer, processor, config and random fp32 weights to ``out_dir``; returns it."""
    import torch
    from transformers import GenerationConfig, Qwen2VLForConditionalGeneration

    out = Path(out_dir)
    tokenizer = build_tokenizer()
    config = build_config(tokenizer)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=config.text_config.eos_token_id,
        pad_token_id=config.text_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    build_processor(tokenizer).save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> None:
    """CLI: build the tiny model into OUT_DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(build_tiny_qwen2vl(args.out_dir, seed=args.seed))


if __name__ == "__main__":
    main()
