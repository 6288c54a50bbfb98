"""The preflight against a real ``vllm serve`` (CPU build, the tiny Qwen2-VL): a fitting request
passes, a wrong served name and a request over ``max_model_len`` stop with the line that names the
preset's setting to change, and replies report the prompt tokens served from the prefix cache."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.tiny_vlm import CONF, frames_request, make_frames

from apm.backbones import instantiate_backbone
from apm.backbones.openai_api import EndpointError
from apm.backbones.vllm_server import VLLMServerBackbone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(vllm_python: str, tiny_model: Path, loop: asyncio.Runner, tmp_path_factory):  # noqa: F811
    """The tiny_qwen2vl_vllm preset (max_model_len 2048), launched once."""
    backbone = instantiate_backbone(OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml"), model=str(tiny_model),
                                    python=vllm_python, log_dir=str(tmp_path_factory.mktemp("vllm-logs")))
    loop.run(backbone.start())
    yield backbone
    loop.run(backbone.close())


def test_a_fitting_request_passes_and_reports_cached_tokens(server: VLLMServerBackbone, loop) -> None:  # noqa: F811
    request = frames_request(make_frames(4), text="Describe every frame in detail. " * 40, max_tokens=8)
    loop.run(server.preflight())
    loop.run(server.check_request(request))
    again = loop.run(server.generate(request))
    assert again.ok and again.cached_tokens is not None and again.cached_tokens > 0, again  # the same prefix


def test_a_wrong_served_name_names_served_model_name(server: VLLMServerBackbone, loop) -> None:  # noqa: F811
    wrong = copy.copy(server.client)  # the server's client, sharing its connections, sending another name
    wrong.model = "no-such-model"
    with pytest.raises(EndpointError) as e:
        loop.run(wrong.preflight())
    assert "HTTP 404" in str(e.value) and "backbone.served_model_name='no-such-model'" in str(e.value)
    assert "it serves tiny-qwen2vl" in str(e.value)


def test_a_request_over_max_model_len_names_it_with_the_length_needed(server: VLLMServerBackbone, loop) -> None:  # noqa: F811
    assert server.guard.max_context_tokens is None  # nothing cuts it before the engine sees it
    request = frames_request(make_frames(8), text="the kettle is on the stove " * 400, max_tokens=8)
    with pytest.raises(EndpointError) as e:
        loop.run(server.check_request(request))
    line = str(e.value)
    assert "the largest request (8 frames" in line and "raise backbone.max_model_len to at least" in line
    assert int(line.split("to at least ")[1].split()[0]) > 2048
