"""Cheap requests, honest timers (issue 24, item 2): a request's body is built before its timer starts,
each frame's base64 is computed once across the probes of a trajectory, and the client's encoding
time is recorded as its own field (``latency.encode_s``)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time

import pytest
from support.runner import compose_run, records, run, served

from apm.backbones import chat_body
from apm.backbones.base import FramePart, Message, Request, TextPart
from apm.backbones.openai_api import BODIES_PER_SLOT, OpenAIBackbone
from apm.backbones.transport import Body
from apm.data import clock
from apm.data.frames import Frame
from apm.synth import generate

T0 = clock.absolute("DAY1", "10:00:00")


def frame(offset: float, entry: str = "e1", size: int = 24_000) -> Frame:
    """A frame as the frame cache returns it: a fresh bytes object each read, the same bytes for the
    same entry and offset (engines send JPEG bytes as they are, so no encoder is involved)."""
    return Frame("DAY1/S001", offset, T0 + int(offset), random.Random(f"{entry}@{offset}").randbytes(size), entry)


def request(offsets: range, entry: str = "e1") -> Request:
    parts = tuple(FramePart(frame(float(i), entry)) for i in offsets)
    return Request((Message("user", (*parts, TextPart("Which option?"))),), request_id=f"k{offsets.start}",
                   trajectory_id="T-1")


def send(url: str, *requests: Request) -> list:
    """Each request through one backbone, one after another (one trajectory's probes)."""

    async def main() -> list:
        async with OpenAIBackbone(model="fake", base_url=url, concurrency=1) as backbone:
            return [await backbone.generate(r) for r in requests]

    return asyncio.run(main())


def test_the_timer_starts_after_the_body_is_built():
    """A body that takes long to build (1,200 frames, ~38 MB of JSON): the recorded time to first token
    is the server's own (from the request head arriving to its first token) plus transit, not plus the
    body's construction."""
    big = request(range(1200))
    began = time.perf_counter()
    json.dumps(OpenAIBackbone(model="fake", base_url="http://h/v1").payload(big), ensure_ascii=False,
               separators=(",", ":"))
    build_s = time.perf_counter() - began
    with served(latency_s=0.05) as srv:
        [response] = send(srv.base_url, big)
        [server_ttft] = srv.latencies
    assert response.ok and response.ttft_s is not None
    assert server_ttft >= 0.05
    assert response.ttft_s - server_ttft < build_s / 3, (response.ttft_s, server_ttft, build_s)


def test_a_frame_is_base64_encoded_once_across_the_probes_of_a_trajectory(monkeypatch):
    """Two probes that share five frames (read afresh from the cache for each): the second encodes only
    its five new frames, and the server still gets every frame's bytes."""
    encoded: list[bytes] = []

    def counting(data: bytes) -> bytes:
        encoded.append(data)
        return base64.b64encode(data)

    monkeypatch.setattr(chat_body, "b64encode", counting)
    first, second = request(range(10)), request(range(5, 15))
    with served(keep_requests=True) as srv:
        responses = send(srv.base_url, first, second)
        sent = [[base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in body["messages"][0]["content"]
                 if p["type"] == "image_url"] for _, body in srv.requests]
    assert all(r.ok for r in responses)
    assert sent == [[f.jpeg for f in first.frames], [f.jpeg for f in second.frames]]
    assert encoded == [f.jpeg for f in first.frames] + [f.jpeg for f in second.frames[5:]]


def test_a_cached_encoding_is_used_only_for_the_same_bytes(monkeypatch):
    """The cache is keyed by the frame's identity (entry and offset) but a hit needs the same JPEG bytes:
    a frame claiming another's identity with other bytes is encoded, and sent, as it is."""
    monkeypatch.setattr(chat_body, "b64encode", base64.b64encode)
    honest = request(range(3))
    impostor = Frame("DAY1/S001", 1.0, T0 + 1, b"other bytes", "e1")
    forged = Request((Message("user", (FramePart(impostor), TextPart("q"))),), request_id="k9")
    backbone = OpenAIBackbone(model="fake", base_url="http://h/v1")
    backbone.wire(honest)
    [part, _] = json.loads(bytes(backbone.wire(forged)))["messages"][0]["content"]
    assert base64.b64decode(part["image_url"]["url"].split(",", 1)[1]) == b"other bytes"


def test_the_server_gets_exactly_the_bytes_the_engine_encodes():
    """What is pinned (tests/test_request_bytes.py digests ``wire``) is what goes out."""
    req = request(range(4))
    with served(keep_requests=True) as srv:
        send(srv.base_url, req)
        [got] = srv.bodies
        [(headers, _)] = srv.requests
    assert got == bytes(OpenAIBackbone(model="fake", base_url="http://h/v1").wire(req))
    assert headers["content-type"] == "application/json"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=2, scale="tiny")


def test_every_record_of_a_served_engine_says_how_long_its_body_took_to_encode(tiny, tmp_path):
    overrides = ["backbone=openai_compatible", "backbone.model=fake", "memory=none", "dataset.tasks=[ER,OCR]"]
    with served(latency_s=0.02) as srv:
        recs = records(run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                                       [*overrides, f"backbone.base_url={srv.base_url}"])))
    assert recs and all(r["frames"] for r in recs)
    for r in recs:
        lat = r["latency"]
        assert 0 < lat["encode_s"] < lat["elapsed_s"]
        assert lat["ttft_s"] == pytest.approx(lat["prep_s"] + lat["engine_ttft_s"])  # not part of the TTFT


def test_bodies_built_ahead_of_a_connection_slot_are_bounded():
    """Six requests for one slot: while the first is answered, only BODIES_PER_SLOT bodies exist (its own
    and the next), not all six."""
    built: list[str] = []
    built_when_answered: list[int] = []

    async def main(url: str) -> None:
        async with OpenAIBackbone(model="fake", base_url=url, concurrency=1) as backbone:
            wire = backbone.wire

            def counted(r: Request) -> Body:
                built.append(r.request_id)
                return wire(r)

            backbone.wire = counted  # type: ignore[method-assign]

            async def one(r: Request) -> None:
                assert (await backbone.generate(r)).ok
                built_when_answered.append(len(built))

            await asyncio.gather(*(one(request(range(i, i + 2))) for i in range(6)))

    with served(latency_s=0.1) as srv:
        asyncio.run(main(srv.base_url))
    assert built_when_answered[0] == BODIES_PER_SLOT and len(built) == 6
