"""The transformers backend on the tiny random Qwen2-VL: contract, timing, counts, frames, greedy."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.tiny_vlm import CONF, frames_request, make_frames

from apm.backbones import instantiate_backbone
from apm.backbones.hf import HFBackbone
from apm.testing.tiny_models import build_tiny_qwen2vl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hf(tiny_model: Path):  # noqa: F811
    """The YAML-configured backbone, started once for the module."""
    backbone = instantiate_backbone(OmegaConf.load(CONF / "tiny_qwen2vl_hf.yaml"), model=str(tiny_model))
    yield backbone
    backbone.close_sync()


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_tiny_build_is_deterministic(tiny_model: Path, tmp_path: Path) -> None:  # noqa: F811
    assert _digest(build_tiny_qwen2vl(tmp_path / "again")) == _digest(tiny_model)


def test_text_request_reports_timing_and_counts(hf: HFBackbone) -> None:
    r = hf.generate_sync(frames_request([], max_tokens=8))
    assert r.ok, r.error
    assert r.text
    assert 0 < r.ttft_s <= r.total_s <= r.elapsed_s
    assert r.prompt_tokens > 0 and 0 < r.completion_tokens <= 8
    assert r.finish_reason in ("stop", "length")


def test_greedy_output_is_deterministic(hf: HFBackbone) -> None:
    request = frames_request(make_frames(8))
    first, second = hf.generate_sync(request), hf.generate_sync(request)
    assert first.ok and second.ok
    assert (first.text, first.completion_tokens) == (second.text, second.completion_tokens)


def test_prompt_tokens_count_the_frames(hf: HFBackbone) -> None:
    # 64x64 frames resize to 56x56: 2x2 merged patches per temporal pair, plus <vision_start/end>.
    base = hf.generate_sync(frames_request([], max_tokens=1)).prompt_tokens
    for n, size, per_pair in ((4, (64, 64), 4), (8, (64, 64), 4), (8, (128, 128), 16)):
        r = hf.generate_sync(frames_request(make_frames(n, size=size), max_tokens=1))
        assert r.prompt_tokens == base + 2 + n // 2 * per_pair, (n, size)


def test_frames_as_images(tiny_model: Path) -> None:  # noqa: F811
    backbone = HFBackbone(str(tiny_model), frames_as="images")
    base = backbone.generate_sync(frames_request([], max_tokens=1)).prompt_tokens
    r = backbone.generate_sync(frames_request(make_frames(3), max_tokens=1))
    backbone.close_sync()
    assert r.prompt_tokens == base + 3 * (2 + 4)


def test_pixels_reach_the_model(hf: HFBackbone) -> None:
    a = hf.generate_sync(frames_request(make_frames(8, fill=0)))
    b = hf.generate_sync(frames_request(make_frames(8, fill=255)))
    assert a.prompt_tokens == b.prompt_tokens
    assert a.text != b.text


def test_stop_strings_cut_the_answer(hf: HFBackbone) -> None:
    full = hf.generate_sync(frames_request(make_frames(2))).text
    stop = full[4:7]
    r = hf.generate_sync(frames_request(make_frames(2), stop=(stop,)))
    assert (r.text, r.finish_reason) == (full[: full.find(stop)], "stop")


def test_failures_come_back_as_errors(hf: HFBackbone) -> None:
    mixed = make_frames(2) + make_frames(2, size=(96, 64))  # one video with two frame sizes
    r = hf.generate_sync(frames_request(mixed))
    assert not r.ok and r.error and r.text == ""


def test_async_contract_with_concurrent_calls(tiny_model: Path) -> None:  # noqa: F811
    async def main() -> list:
        async with HFBackbone(str(tiny_model)) as backbone:
            return await asyncio.gather(*(backbone.generate(frames_request(make_frames(2))) for _ in range(3)))

    answers = asyncio.run(main())
    assert all(r.ok for r in answers)
    assert len({r.text for r in answers}) == 1
    assert max(r.elapsed_s for r in answers) > max(r.total_s for r in answers)  # queued on one worker


def test_random_weights_need_only_the_config(tiny_qwen3vl: Path, tmp_path: Path) -> None:  # noqa: F811
    """``weights: random`` reads the folder's config and processor, never a weight file: the same seeded
    weights each time, the pretrained path's model class and prompt tokens."""
    import torch

    bare = tmp_path / "no-weights"
    shutil.copytree(tiny_qwen3vl, bare, ignore=shutil.ignore_patterns("*.safetensors"))
    request = frames_request(make_frames(4), max_tokens=2)
    answers, weights = [], []
    for _ in range(2):
        backbone = HFBackbone(str(bare), weights="random")
        answers.append(backbone.generate_sync(request))
        weights.append({k: v.clone() for k, v in backbone._model.state_dict().items()})
        backbone.close_sync()
    pretrained = HFBackbone(str(tiny_qwen3vl))
    reference = pretrained.generate_sync(request)
    pretrained_keys = pretrained._model.state_dict().keys()
    pretrained.close_sync()
    assert all(a.ok for a in answers), answers
    assert answers[0].text == answers[1].text
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert weights[0].keys() == pretrained_keys and answers[0].prompt_tokens == reference.prompt_tokens
    with pytest.raises(ValueError, match="weights must be"):
        HFBackbone(str(bare), weights="dummy")  # type: ignore[arg-type]
