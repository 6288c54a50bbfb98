"""The KV-cache reference on the paper's architectures, each built tiny (Qwen2-VL, Qwen2.5-VL, Qwen3-VL):
under apm-run on each, every chunk is the architecture's own video format, its kept cache is what the
model's own forward (its own M-RoPE positions) gives, answers do not depend on which probes are asked,
and records validate; any other backbone is refused in one line naming the supported ones."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
from support.runner import compose_run, memory_records, records, run
from support.tiny_vlm import make_frames

from apm.backbones.hf import HFBackbone
from apm.data.frames import Frame
from apm.data.release import load_release
from apm.errors import one_line
from apm.streaming.base import SessionContext
from apm.streaming.internals import UnsupportedArchitecture, segment_features, segment_inputs
from apm.streaming.kv_cache import Chunk, KVCacheMemory, encode_chunk, generate_from
from apm.video.cache import FrameCache

PAD = r"(?:<\|video_pad\|>)+"
ARCHITECTURES = {
    # name: (model fixture, backbone preset, config.model_type, one segment's text as its processor writes it)
    "qwen2vl": ("tiny_model", "tiny_qwen2vl_hf", "qwen2_vl", rf"<\|vision_start\|>{PAD}<\|vision_end\|>"),
    "qwen25vl": ("tiny_qwen25vl", "tiny_qwen25vl_hf", "qwen2_5_vl", rf"<\|vision_start\|>{PAD}<\|vision_end\|>"),
    # Qwen3-VL: each temporal patch (2 frames) after its mean time, in its own vision delimiters.
    "qwen3vl": ("tiny_qwen3vl", "tiny_qwen3vl_hf", "qwen3_vl",
                rf"(?:<\d+\.\d seconds><\|vision_start\|>{PAD}<\|vision_end\|>)+"),
}
TIMESTAMP = re.compile(r"<(\d+\.\d) seconds>")


def _kv_run(one: Path, out: Path, cache: Path, preset: str, model: Path, tasks: str) -> Path:
    return run(compose_run(one, out, cache, ["memory=kv_cache", f"backbone={preset}", f"backbone.model={model}",
                                             "generation.max_tokens=6", f"dataset.tasks=[{tasks}]"]))


def _first_chunk(run_dir: Path, one: Path, cache: Path) -> tuple[dict, np.ndarray, list[Frame]]:
    """The first session's first chunk as kept: its index entry, its keys and its frames from the frame cache."""
    state = run_dir / "memory_state" / "syn001"
    chunk = json.loads(next(state.glob("0000_*.kv.json")).read_text())["chunks"][0]
    with np.load(next(state.glob("0000_*.kv.npz"))) as kept:
        keys = kept["keys0"]
    session = load_release(one).trajectories[0].sessions[0]
    entry = FrameCache(cache).entry(session.video)
    return chunk, keys, [Frame(session.key, o, s, entry.jpeg(int(o))) for o, s in chunk["frames"]]


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_kv_cache_runs_on_the_architecture_with_its_own_cache(arch, one, cache, tmp_path, request):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    fixture, preset, model_type, segment = ARCHITECTURES[arch]
    path = request.getfixturevalue(fixture)
    run_dir = _kv_run(one, tmp_path / "runs", cache, preset, path, "ER,ERA")
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["tokens"]["completion"] > 0 for r in recs)
    schemas = resources.files("apm.records").joinpath("schemas")
    for rows, schema in ((recs, "record"), (memory_records(run_dir), "memory")):
        validator = jsonschema.Draft202012Validator(json.loads(schemas.joinpath(f"{schema}.schema.json").read_text()))
        assert rows and all(validator.is_valid(row) for row in rows), schema

    processor, model = AutoProcessor.from_pretrained(path), AutoModelForImageTextToText.from_pretrained(path).eval()
    assert model.config.model_type == model_type
    chunk, keys, frames = _first_chunk(run_dir, one, cache)
    inputs = segment_inputs(processor, model, frames)
    text = processor.tokenizer.decode(inputs["input_ids"][0])
    assert re.fullmatch(segment, text), text[:200]
    assert chunk["tokens"] == inputs["input_ids"].shape[1] == keys.shape[2]
    if model_type == "qwen3_vl":  # the chunk's frames' own times, each pair's mean
        offsets = [o for o, _ in chunk["frames"]]
        assert [float(t) for t in TIMESTAMP.findall(text)] == [round((a + b) / 2, 1)
                                                              for a, b in zip(offsets[::2], offsets[1::2])]
    with torch.inference_mode():  # no position_ids: the model places the segment by its own M-RoPE index
        direct = model(**inputs, use_cache=True)
    own = torch.stack([layer.keys[0] for layer in direct.cache.layers]).numpy()
    np.testing.assert_allclose(keys.astype(np.float32), own, atol=2e-3)

    subset = _kv_run(one, tmp_path / "subset", cache, preset, path, "ER")
    asked = {r["key"]: r["output"] for r in records(subset)}
    assert asked and all({r["key"]: r["output"] for r in recs}[k] == out for k, out in asked.items())


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_segment_features_are_what_the_language_model_receives(arch, request):
    """One embedding per video token, of the text model's width; DeepStack features only where the
    architecture has them (Qwen3-VL: one per DeepStack layer)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = request.getfixturevalue(ARCHITECTURES[arch][0])
    processor, model = AutoProcessor.from_pretrained(path), AutoModelForImageTextToText.from_pretrained(path).eval()
    frames = make_frames(4)
    features = segment_features(processor, model, frames)
    tokens = int((segment_inputs(processor, model, frames)["input_ids"] == model.config.video_token_id).sum())
    assert tuple(features.embeds.shape) == (tokens, model.config.text_config.hidden_size)
    expected = len(model.config.vision_config.deepstack_visual_indexes) if arch == "qwen3vl" else 0
    assert [tuple(d.shape) for d in features.deepstack] == [tuple(features.embeds.shape)] * expected


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_the_model_dtype_carries_through_encode_and_answer(arch, request):
    """In ``bfloat16`` (a GPU backbone's dtype) a chunk encodes and an answer decodes from its cache:
    every tensor follows ``model.dtype``/``model.device``, the kept arrays are float32 numpy."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = request.getfixturevalue(ARCHITECTURES[arch][0])
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.bfloat16).eval()
    keys, values, vector, after = encode_chunk(processor, model, make_frames(3))
    assert keys.dtype == values.dtype == vector.dtype == np.float32 and np.isfinite(keys).all()
    assert segment_features(processor, model, make_frames(2)).embeds.dtype == torch.bfloat16
    chunk = Chunk(None, (), vector, after, keys.shape[2], kv=(keys, values))
    prompt = "<|im_start|>assistant\n"
    answer = generate_from(processor, model, [chunk], prompt, 4)
    assert answer.completion_tokens == 4 or answer.finish_reason == "stop"
    assert answer.prompt_tokens == keys.shape[2] + len(processor.tokenizer(prompt).input_ids)


@pytest.mark.slow
def test_an_unsupported_backbone_is_refused_in_one_line_naming_the_supported(one, cache, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "apm-run"), f"dataset.root={one}", f"output_root={tmp_path / 'out'}",
         f"frames.cache_dir={cache}", "logging.wandb.mode=disabled", "logging.progress=false", "memory=kv_cache",
         "backbone=random"], env=env, capture_output=True, text=True, timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("apm-run: error: KV-Cache Memory works on a transformers model's own cache")
    assert all(name in lines[0] for name in ("Qwen2-VL (qwen2_vl)", "Qwen2.5-VL (qwen2_5_vl)", "Qwen3-VL (qwen3_vl)"))
    assert "'Random'" in lines[0]


class LoadedAs(HFBackbone):
    """A transformers backbone whose loaded model is of ``model_type`` (its real config, no weights)."""

    def __init__(self, model_type: str) -> None:
        from transformers import AutoConfig

        super().__init__("unused")
        self.loaded = SimpleNamespace(config=AutoConfig.for_model(model_type))

    async def with_model(self, fn, *args):
        return fn(None, self.loaded, *args)


@pytest.mark.parametrize(("model_type", "reason"), [("internvl", "InternVL3.5"), ("video_llama_3", "VideoLLaMA3"),
                                                    ("llava", "not an architecture")])
def test_a_paper_architecture_without_support_is_refused_with_its_reason(model_type, reason, tmp_path):
    context = SessionContext(None, None, tmp_path, LoadedAs(model_type), None)
    with pytest.raises(UnsupportedArchitecture) as refused:
        asyncio.run(KVCacheMemory().begin(context))
    message = one_line(refused.value)
    assert "\n" not in message and reason in message and f"{model_type!r}" in message
    assert "supported: Qwen2-VL (qwen2_vl), Qwen2.5-VL (qwen2_5_vl), Qwen3-VL (qwen3_vl)" in message
