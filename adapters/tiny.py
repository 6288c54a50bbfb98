"""Tiny random-weight base models for the upstream adapters, built with transformers 4.x in a side
environment (adapters/README.md): the upstream code paths run for real on CPU, the output is gibberish.

The tokenizer is ``apm.testing.tiny_models``'s (a byte-level BPE trained on the standard library,
loaded by file path so that ``apm`` itself is not imported); the configs are written for the 4.x
config layout (``rope_scaling`` with ``mrope_section``), which ``apm.testing.tiny_models`` (5.x) does not
write. Same seed, same files.

    python adapters/tiny.py OUT_DIR --arch qwen25vl|qwen3vl|qwen3embed|qwen2vl
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("qwen25vl", "qwen3vl", "qwen3embed", "qwen2vl")


def _tiny_models():
    """``apm/testing/tiny_models.py`` as a module of its own (it imports nothing from ``apm``)."""
    spec = importlib.util.spec_from_file_location("apm_tiny_models", ROOT / "apm" / "testing" / "tiny_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(tok, ids: dict, **rope: object) -> dict:
    """The tiny text model: 2 layers, hidden 64, 2 heads / 1 KV head of 32, M-RoPE over 16 pairs."""
    return dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
                rope_theta=10000.0, rope_scaling=dict(rope_type="default", mrope_section=[4, 6, 6], **rope),
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
                tie_word_embeddings=False)


def build(out_dir: str | Path, arch: str, seed: int = 0) -> Path:
    import torch
    import transformers as tf

    tm = _tiny_models()
    base = tm.build_tokenizer()  # 4.x processors insist on the Qwen2 tokenizer class: the same BPE, re-wrapped
    tok = tf.Qwen2TokenizerFast(tokenizer_object=base.backend_tokenizer, bos_token=None, eos_token="<|im_end|>",
                                pad_token="<|endoftext|>", unk_token=None, chat_template=tm.CHAT_TEMPLATE,
                                model_max_length=32768)
    ids = {t: tok.convert_tokens_to_ids(t) for t in tm.SPECIAL_TOKENS}
    vision_ids = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                      vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    vision = dict(depth=2, num_heads=2, spatial_merge_size=2, temporal_patch_size=2, hidden_size=32,
                  intermediate_size=64, out_hidden_size=64, in_channels=3)
    pixels = dict(min_pixels=tm.MIN_PIXELS, max_pixels=tm.MAX_PIXELS)
    torch.manual_seed(seed)
    out = Path(out_dir)
    if arch == "qwen25vl":  # transformers 4.50 (FluxMem, VST): a flat config, the image processor does videos
        config = tf.Qwen2_5_VLConfig(**_text(tok, ids), **vision_ids, vision_config=dict(
            vision, patch_size=14, window_size=56, fullatt_block_indexes=[1], tokens_per_second=2))
        model = tf.Qwen2_5_VLForConditionalGeneration(config)
        processor = tf.Qwen2_5_VLProcessor(image_processor=tf.Qwen2VLImageProcessor(**pixels), tokenizer=tok,
                                           chat_template=tm.CHAT_TEMPLATE)
    elif arch == "qwen3vl":  # transformers 4.57 (OASIS): text and vision configs, a video processor
        config = tf.Qwen3VLConfig(text_config=_text(tok, ids, mrope_interleaved=True), **vision_ids, vision_config=dict(
            vision, patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0]))
        model = tf.Qwen3VLForConditionalGeneration(config)
        processor = tf.Qwen3VLProcessor(
            image_processor=tf.Qwen2VLImageProcessor(patch_size=16, merge_size=2, **pixels),
            video_processor=tf.Qwen3VLVideoProcessor(size={"shortest_edge": tm.MIN_PIXELS,
                                                           "longest_edge": 64 * 64 * 1024}, do_sample_frames=False),
            tokenizer=tok, chat_template=tm.CHAT_TEMPLATE)
    elif arch == "qwen2vl":  # transformers 4.45 (Flash-VStream-Qwen): a flat config, ViT embed 32, patch 14
        text = _text(tok, ids)
        text["rope_scaling"] = dict(type="mrope", mrope_section=[4, 6, 6])
        config = tf.Qwen2VLConfig(**text, **vision_ids, vision_token_id=ids["<|vision_pad|>"], vision_config=dict(
            depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2, in_chans=3, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2))
        model = tf.Qwen2VLForConditionalGeneration(config)
        processor = tf.Qwen2VLProcessor(image_processor=tf.Qwen2VLImageProcessor(**pixels), tokenizer=tok,
                                        chat_template=tm.CHAT_TEMPLATE)
    elif arch == "qwen3embed":  # a sentence-transformers Qwen3 text embedder (OASIS's Qwen3-Embedding's shape)
        from sentence_transformers import SentenceTransformer, models

        text = _text(tok, ids)
        text.pop("rope_scaling")
        model = tf.Qwen3Model(tf.Qwen3Config(**text))
        model.save_pretrained(out / "transformer")
        tok.save_pretrained(out / "transformer")
        body = models.Transformer(str(out / "transformer"), max_seq_length=512)
        SentenceTransformer(modules=[body, models.Pooling(64, pooling_mode="lasttoken"), models.Normalize()]).save(
            str(out))
        return out
    else:
        raise SystemExit(f"--arch: one of {', '.join(ARCHS)}")
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--arch", choices=ARCHS, required=True)
    args = parser.parse_args()
    print(build(args.out_dir, args.arch))


if __name__ == "__main__":
    main()
