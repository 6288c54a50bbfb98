"""The backbone contract: request encoding, the context guard, and a backbone from outside the package."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from PIL import Image

from apm.backbones import (
    BackboneLike,
    FramePart,
    GenerationSettings,
    Message,
    Request,
    TextPart,
    instantiate_backbone,
)
from apm.backbones.guard import ContextGuard
from apm.backbones.openai_api import OpenAIBackbone
from apm.data import clock
from apm.data.frames import Frame
from apm.testing.fake_server import FakeServer

ROOT = Path(__file__).resolve().parents[1]
T0 = clock.absolute("DAY1", "10:00:00")


def jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (i * 20 % 256, 0, 0)).save(buf, "JPEG")
    return buf.getvalue()


def frames_request(n: int, text: str = "What now?", max_tokens: int = 64) -> Request:
    parts = tuple(FramePart(Frame("DAY1/S001", float(i), T0 + i, jpeg(i))) for i in range(n))
    return Request(
        (Message.text("system", "Be brief."), Message("user", parts + (TextPart(text),), time=T0 + n)),
        GenerationSettings(max_tokens=max_tokens, json_output=True, stop=("}",)),
        request_id="k",
    )


def test_images_mode_sends_the_cached_jpeg_bytes_and_the_text_as_it_is():
    req = frames_request(3)
    body = OpenAIBackbone(model="m", base_url="http://h/v1").payload(req)
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    content = body["messages"][1]["content"]
    assert [p["type"] for p in content] == ["image_url"] * 3 + ["text"]  # nothing added: no labels
    images = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert [base64.b64decode(u.split(",", 1)[1]) for u in images] == [f.jpeg for f in req.frames]
    assert content[-1] == {"type": "text", "text": "What now?"}
    assert body["response_format"] == {"type": "json_object"} and body["stop"] == ["}"] and body["stream"]
    assert "media_io_kwargs" not in body


def test_a_json_schema_is_sent_as_guided_json_only_where_the_engine_takes_it():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = Request((Message.text("user", "?"),), GenerationSettings(json_output=True, json_schema=schema))
    guided = OpenAIBackbone(model="m", base_url="http://h/v1", json_schema_format=True).payload(req)
    assert guided["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
    assert OpenAIBackbone(model="m", base_url="http://h/v1").payload(req)["response_format"] == {"type": "json_object"}


def test_video_mode_sends_one_jpeg_list_with_its_timing_and_count():
    req = frames_request(40)
    body = OpenAIBackbone(model="m", base_url="http://h/v1", frame_mode="video").payload(req)
    content = body["messages"][1]["content"]
    assert [p["type"] for p in content] == ["video_url", "text"]
    prefix, data = content[0]["video_url"]["url"].split(",", 1)
    assert prefix == "data:video/jpeg;base64"
    assert [base64.b64decode(x) for x in data.split(",")] == [f.jpeg for f in req.frames]
    video = body["media_io_kwargs"]["video"]  # vLLM would keep only 32 of the 40 without num_frames
    assert video == {"fps": 1.0, "frames_indices": list(range(40)), "total_num_frames": 40, "duration": 40.0,
                     "num_frames": 40}


def test_guard_keeps_an_even_subsample_ending_at_the_latest_frame():
    req = frames_request(10)
    cut, t = ContextGuard(max_frames=4).apply(req)
    assert [f.wall_clock - T0 for f in cut.frames] == [0, 3, 6, 9]
    assert t is not None and t.reason == "max_frames" and (t.frames_before, t.frames_after) == (10, 4)
    assert sorted(t.dropped_wall_clock) == [T0 + i for i in (1, 2, 4, 5, 7, 8)]
    assert ContextGuard(max_frames=10).apply(req) == (req, None)


def test_guard_token_budget_and_oldest_policy():
    req = frames_request(10, max_tokens=100)
    guard = ContextGuard(max_context_tokens=100 + 10 + 3 * 50, tokens_per_frame=50, policy="oldest")
    cut, t = guard.apply(req)
    assert [f.wall_clock - T0 for f in cut.frames] == [7, 8, 9]
    assert t.reason == "max_context_tokens" and t.est_tokens_after <= guard.max_context_tokens


def test_truncation_is_reported_in_the_response_and_overflow_is_an_error():
    async def main():
        async with FakeServer(keep_requests=True) as srv:
            guard = dict(max_frames=2, max_context_tokens=400, tokens_per_frame=50)
            async with OpenAIBackbone(model="m", base_url=srv.base_url, **guard) as b:
                cut = await b.generate(frames_request(5, max_tokens=16))
                overflow = await b.generate(frames_request(1, text="x" * 4000))
            return cut, overflow, srv

    cut, overflow, srv = asyncio.run(main())
    assert cut.ok and cut.truncation.frames_after == 2
    sent = srv.requests[0][1]["messages"][1]["content"]
    assert sum(p["type"] == "image_url" for p in sent) == 2
    assert not overflow.ok and "max_context_tokens" in overflow.error and overflow.attempts == 0
    assert srv.counts["requests"] == 1


def test_generate_sync_keeps_one_loop_across_calls():
    ready, box = threading.Event(), []

    async def serve(stop: asyncio.Event) -> None:
        async with FakeServer() as srv:
            box.append((srv.base_url, stop, asyncio.get_running_loop()))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(asyncio.Event()),))
    thread.start()
    ready.wait(5)
    url, stop, loop = box[0]
    try:
        b = OpenAIBackbone(model="m", base_url=url)
        assert b.generate_sync(frames_request(1)).text == '{"answer":"A"}'
        assert b.generate_sync(frames_request(2)).ok
        b.close_sync()
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()


def test_a_backbone_from_outside_the_package_via_hydra(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    cfg = OmegaConf.load(ROOT / "examples" / "conf" / "backbone" / "my_backbone.yaml")
    b = instantiate_backbone(cfg, letters="XYZ")
    assert isinstance(b, BackboneLike) and b.name == "LetterCount" and b.max_frames == 8
    req = Request((Message.text("user", "Y? Z? Z!"),))
    r = asyncio.run(b.generate(req))
    assert json.loads(r.text) == {"answer": "Z"} and r.ok


def test_every_shipped_backbone_config_instantiates(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    names = {}
    for path in sorted((ROOT / "conf" / "backbone").glob("*.yaml")) + [ROOT / "conf/judge/deepseek_v4_flash.yaml"]:
        if path.stem.startswith("tiny_"):
            continue  # built from a local model by their own tests
        cfg = OmegaConf.load(path)
        if path.stem == "openai_compatible":  # the endpoint and its model are the user's to give
            cfg.merge_with({"base_url": "http://127.0.0.1:8000/v1", "model": "my-model"})
        b = instantiate_backbone(cfg)
        names[path.stem] = (b.name, b.max_frames)
    assert names["qwen3_vl_8b"] == ("Qwen3-VL-8B-Instruct", 1024)
    assert names["qwen3_8_27b"] == ("Qwen3.8-27B", 1024)
    assert names["internvl3_5_8b"] == ("InternVL3.5-8B", 128)
    assert names["videollama3_7b"] == ("VideoLLaMA3-7B", 128)
    assert names["gemini_3_6_flash"] == ("Gemini 3.6 Flash", 1024)
    assert names["seed_2_0_lite"] == ("Seed-2.0-Lite", 1024)
    assert names["openai_compatible"] == ("my-model", 1024)
    assert names["deepseek_v4_flash"][0] == "DeepSeek-V4-Flash"
    assert "upper bound" in names["oracle"][0]


def test_frames_outside_user_turns_are_rejected():
    bad = Request((Message("assistant", (FramePart(Frame("DAY1/S001", 0.0, T0, jpeg(0))),)),))
    with pytest.raises(ValueError, match="only allowed in user turns"):
        OpenAIBackbone(model="m", base_url="http://h/v1").payload(bad)
