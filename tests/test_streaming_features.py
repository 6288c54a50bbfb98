"""The feature memory (Flash-VStream/FLUXMem-like reference) end to end under apm-run on each tiny
architecture: the model's own visual tokens kept per session within a fixed budget, injected as
embeddings, answers causal and independent of the probes asked (issue 22, build items 1 and 2)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
import yaml
from support.runner import assert_storage_is_on_disk, compose_run, memory_records, records, run
from support.tiny_vlm import make_frames

from apm.configs import CONF_DIR
from apm.data.frames import Frame
from apm.data.instances import release_instances
from apm.data.model import Session
from apm.data.release import load_release
from apm.records.declaration import declared
from apm.runner.config import _locate
from apm.streaming.features import (
    Entry,
    FeatureMemory,
    answer_from,
    check_architecture,
    merge_to_budget,
    next_logits,
    visual_grids,
    written_in,
)
from apm.streaming.internals import UnsupportedArchitecture
from apm.video.cache import FrameCache

ARCHITECTURES = ["tiny_model", "tiny_qwen25vl", "tiny_qwen3vl"]
"""The tiny random builds (fixture names) the system runs on: one line per architecture."""
BUDGET = 8
"""Entries kept per session in the runs below: well under a tiny session's temporal patches (~20)."""


def _features(model: Path, tasks: str) -> list[str]:
    return ["memory=feature_memory", f"memory.budget={BUDGET}", "backbone=tiny_qwen2vl_hf", f"backbone.model={model}",
            "generation.max_tokens=4", f"dataset.tasks=[{tasks}]"]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def model(request) -> Path:
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="module")
def full(model, one, cache, tmp_path_factory) -> Path:
    """A run of ER, ERA and EA on the first trajectory (every session's state, EA's restricted sets)."""
    return run(compose_run(one, tmp_path_factory.mktemp("runs"), cache, _features(model, "ER,ERA,EA")))


def _state(run_dir: Path, pattern: str) -> list[Path]:
    return sorted((run_dir / "memory_state" / "syn001").glob(pattern))


@pytest.mark.slow
def test_records_validate_and_answers_draw_only_on_the_visible_past(full, one) -> None:
    schemas = resources.files("apm.records").joinpath("schemas")
    record_schema, memory_schema = (json.loads(schemas.joinpath(f"{n}.schema.json").read_text())
                                    for n in ("record", "memory"))
    release = load_release(one)
    instances = {i.key: i for i in release_instances(release)}
    recs = records(full)
    assert {r["task"] for r in recs} == {"ER", "ERA", "EA"}
    for r in recs:
        jsonschema.validate(r, record_schema)
        assert r["error"] is None and r["tokens"]["completion"] > 0 and r["frames"]
        assert r["latency"]["ttft_from"] == "last_update" and r["latency"]["ttft_s"] > 0
        assert r["run"]["declarations"]["memory"]["representation"] == "visual_features"
        inst = instances[r["key"]]
        assert {f["session"] for f in r["frames"]} <= set(inst.visible_sessions)  # EA: its visible sessions only
        current = [f for f in r["frames"] if f["session"] == inst.session]
        assert current and max(f["wall_clock"] for f in current) <= r["probe_time"]
    for m in memory_records(full):
        jsonschema.validate(m, memory_schema)
    assert_storage_is_on_disk(full)


@pytest.mark.slow
def test_the_state_is_bounded_by_the_budget_whatever_the_session_length(full, one) -> None:
    lines = sorted(memory_records(full), key=lambda m: m["session_index"])
    covered = [m["frames"] for m in lines]
    assert len(set(covered)) > 1 and min(covered) > 2 * BUDGET  # sessions of different lengths, all over budget
    assert all(m["entries"] == BUDGET for m in lines)
    sizes = [p.stat().st_size for p in _state(full, "*.features.npz")]
    assert len(sizes) == len(lines) and len(set(sizes)) == 1  # longer sessions: not one byte more of features
    for index in _state(full, "*.features.json"):
        kept = json.loads(index.read_text())
        assert len(kept["entries"]) == BUDGET and sum(e["weight"] for e in kept["entries"]) > BUDGET


@pytest.mark.slow
def test_the_state_holds_the_models_own_visual_tokens(full, one, cache, model) -> None:
    """Each kept entry is the weighted mean of the model's merged visual tokens and DeepStack features (its
    own ``get_video_features``, called here directly) of the frame pairs it covers, average-pooled to 2x2."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForImageTextToText, AutoProcessor  # after apm's torchvision fix

    session = load_release(one).trajectories[0].sessions[0]
    entry = FrameCache(cache).entry(session.video)
    processor, vlm = AutoProcessor.from_pretrained(model), AutoModelForImageTextToText.from_pretrained(model).eval()
    kept = json.loads(_state(full, "0000_*.features.json")[0].read_text())
    with np.load(_state(full, "0000_*.features.npz")[0]) as arrays:
        features = arrays["features"]
    layers = 1 + len(getattr(vlm.config.vision_config, "deepstack_visual_indexes", ()))
    assert features.dtype == np.float16 and features.shape[:2] == (layers, sum(e["tokens"] for e in kept["entries"]))
    row = 0
    for e in kept["entries"]:
        (first, _), (last, _) = e["span"]
        frames = [Frame(session.key, o, session.start + o, entry.jpeg(o)) for o in range(int(first), int(last) + 1)]
        pairs = [frames[i: i + 2] for i in range(0, len(frames), 2)]
        assert len(pairs) == e["weight"] and len(frames) == e["frames"]
        grids = []
        for pair in pairs:
            pixels = np.stack([f.pixels() for f in pair + pair[-1:] * (2 - len(pair))])
            inputs = processor.video_processor(videos=[pixels], do_sample_frames=False, return_tensors="pt")
            with torch.inference_mode():
                tokens = vlm.model.get_video_features(inputs["pixel_values_videos"], inputs["video_grid_thw"])
            _, h, w = (int(x) // 2 for x in inputs["video_grid_thw"][0])
            kinds = [tokens.pooler_output[0], *(f[0] for f in getattr(tokens, "deepstack_features", None) or ())]
            grid = torch.stack(kinds).reshape(len(kinds), h, w, -1).permute(0, 3, 1, 2)
            grids.append(F.adaptive_avg_pool2d(grid, (2, 2)).flatten(2).transpose(1, 2).numpy())
        stored = features[:, row: row + e["tokens"]].astype(np.float32)
        np.testing.assert_allclose(stored, np.mean(grids, axis=0), atol=2e-4, rtol=0)  # features ~0.02: float16 steps
        row += e["tokens"]


@pytest.mark.slow
def test_answers_do_not_depend_on_the_probes_asked(full, model, one, cache, tmp_path) -> None:
    subset = records(run(compose_run(one, tmp_path / "subset", cache, _features(model, "ER"))))
    outputs = {r["key"]: (r["output"], r["frames"], r["tokens"]) for r in records(full)}
    assert subset and all(outputs[r["key"]] == (r["output"], r["frames"], r["tokens"]) for r in subset)


SESSION = Session("t", "DAY1", "S001", 0, 0, 60, Path("v.mp4"))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_injected_features_are_taken_as_the_model_takes_its_own(arch, request) -> None:
    """Written in unpooled, a video's kept features (DeepStack included) give the logits the model's own
    forward gives on its pixels at the same positions: the injection is the model's own."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor, DynamicCache  # after apm's torchvision fix

    path = request.getfixturevalue(arch)
    processor, vlm = AutoProcessor.from_pretrained(path), AutoModelForImageTextToText.from_pretrained(path).eval()
    frames = make_frames(4, size=(56, 56))
    grids = visual_grids(processor, vlm, frames)
    segment = grids.reshape(len(grids), -1, grids.shape[-1])
    prompt = ("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>What is it?<|im_end|>\n"
              "<|im_start|>assistant\n")
    embeds, extra = written_in(processor, vlm, prompt, [segment])
    ours = next_logits(vlm, embeds, 0, DynamicCache(), extra)
    ids = processor.tokenizer(prompt.replace("<|video_pad|>", "<|video_pad|>" * segment.shape[1]),
                              return_tensors="pt").input_ids
    pixels = processor.video_processor(videos=[np.stack([f.pixels() for f in frames])], do_sample_frames=False,
                                       return_tensors="pt")
    with torch.inference_mode():
        own = vlm(input_ids=ids, position_ids=torch.arange(ids.shape[1]).view(1, -1), **pixels).logits[0, -1]
    torch.testing.assert_close(ours, own, atol=1e-5, rtol=1e-4)
    assert embeds.shape[1] == ids.shape[1] and len(grids) == 1 + len(extra.get("deepstack_visual_embeds", []))
    answer = answer_from(processor, vlm, prompt, [segment], max_tokens=1)
    assert answer.prompt_tokens == ids.shape[1] and answer.completion_tokens == 1
    assert answer.text == processor.tokenizer.decode([int(own.argmax())], skip_special_tokens=True)


def _entry(values: list[float], weight: int, first: int) -> Entry:
    """An entry of ``weight`` grids, one frame each, from second ``first``."""
    last = first + weight - 1
    return Entry(SESSION, ((float(first), first), (float(last), last)), weight, np.array([[values]], np.float32),
                 weight)


def test_merging_takes_the_most_alike_adjacent_pair_by_weight() -> None:
    a, b, c = _entry([1.0, 0.0], 1, 0), _entry([0.0, 1.0], 3, 1), _entry([0.1, 1.0], 1, 4)
    merged = merge_to_budget([a, b, c], budget=2, dtype="float32")
    assert merged[0] is a and len(merged) == 2
    assert merged[1].weight == 4 and merged[1].frames == 4 and merged[1].span == ((1.0, 1), (4.0, 4))
    np.testing.assert_allclose(merged[1].features, [[[0.025, 1.0]]])  # (3 x b + 1 x c) / 4
    assert merge_to_budget([a, b, c], budget=3, dtype="float32") == [a, b, c]


def test_refuses_a_model_whose_vision_encoder_it_does_not_know() -> None:
    llava = SimpleNamespace(config=SimpleNamespace(model_type="llava"))
    with pytest.raises(UnsupportedArchitecture, match=r"'llava' is not supported .*; supported: Qwen2-VL .*Qwen3-VL"):
        check_architecture(None, llava)


def test_the_visual_features_representation_has_a_reference_system() -> None:
    """Why bullet 1: Table 3's visual-token family had no system; a configured reference now declares it."""
    configs = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((Path(CONF_DIR) / "memory").glob("*.yaml"))}
    found = {name: declared(_locate(node["_target_"])) for name, node in configs.items()}
    visual = [name for name, d in found.items() if d is not None and d.representation == "visual_features"]
    assert visual == ["feature_memory"] and found["feature_memory"] == FeatureMemory.declaration
    assert found["feature_memory"].tag == "reference system" and found["feature_memory"].persistent
