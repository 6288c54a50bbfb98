"""What each served engine sends, pinned to the byte: the chat-completions body and its routing
headers for requests that exercise every encoding choice (images, videos, stills, media ids, JSON
output, guided decoding, extra body fields, data-parallel routing), on every served-engine class.

The digests were taken from the engine code before the OpenAI client was split into transport,
encoding and engine parts (issue 21, item 3), when httpx serialised the body; they now digest the
pre-encoded bytes actually sent (issue 24, item 2). A change of one byte of a request fails here.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from apm.backbones.base import FramePart, GenerationSettings, Message, Request, TextPart
from apm.backbones.openai_api import OpenAIBackbone
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.data import clock
from apm.data.frames import Frame

T0 = clock.absolute("DAY2", "09:30:00")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def frame(session: str, offset: float, still: bool = False, entry: str = "") -> FramePart:
    """A frame whose JPEG bytes are fixed (engines send them as they are, so no encoder is involved)."""
    jpeg = hashlib.sha256(f"{session}@{offset}".encode()).digest() * 3
    return FramePart(Frame(session, offset, T0 + int(offset), jpeg, entry), still=still)


def requests() -> dict[str, Request]:
    """Requests that between them take every branch of the encoding."""
    one_run = (frame("DAY2/S001", 0.0, entry="e1"), frame("DAY2/S001", 0.5, entry="e1"),
               frame("DAY2/S001", 2.0, entry="e1"))
    stills = (frame("DAY2/S001", 3.0, still=True), frame("DAY2/S001", 4.0, still=True))
    other_timing = (frame("DAY2/S002", 0.0), frame("DAY2/S002", 1.0 / 3))
    mcqa = GenerationSettings(max_tokens=64, json_output=True, stop=("}",))
    return {
        "text_only": Request((Message.text("system", "Be brief."), Message.text("user", "Hello?", T0)),
                             GenerationSettings(seed=None), request_id="k0"),
        "one_run": Request((Message.text("system", "S"), Message("user", (TextPart("before"), *one_run,
                                                                           TextPart("after")), T0 + 3)),
                           mcqa, request_id="k1", trajectory_id="T-1"),
        "run_and_stills": Request((Message("user", (*one_run, *stills, TextPart("q"))),
                                   Message.text("assistant", "earlier answer"), Message.text("user", "again")),
                                  GenerationSettings(temperature=0.7, seed=7, json_schema=SCHEMA), request_id="k2",
                                  trajectory_id="T-2"),
        "two_timings": Request((Message("user", (*one_run, TextPart("mid"), *other_timing, TextPart("q"))),),
                               mcqa, request_id="k3", trajectory_id="T-3"),
    }


def engines() -> dict[str, OpenAIBackbone]:
    """Every served-engine class under the options that change what it sends (a vLLM server's: its client)."""
    url = "http://127.0.0.1:9/v1"
    return {
        "openai_images": OpenAIBackbone(model="m", base_url=url),
        "openai_video_uuids": OpenAIBackbone(model="m", base_url=url, frame_mode="video", media_uuids=True,
                                             json_schema_format=True, data_parallel_size=4),
        "openai_no_json_extra": OpenAIBackbone(model="m", base_url=url, json_response_format=False,
                                               extra_body={"top_k": 5, "chat_template_kwargs": {"think": False}}),
        "vllm_served_name": VLLMServerBackbone(model="/models/q", served_model_name="q", launch=False, base_url=url,
                                               frame_mode="video", data_parallel_size=2).client,
        "vllm_images": VLLMServerBackbone(model="/models/q", launch=True, json_schema_format=True).client,
    }


def sent(engine: OpenAIBackbone, request: Request) -> str:
    """What goes on the wire for ``request``, as one canonical digest: the body's bytes as sent
    (:meth:`OpenAIBackbone.wire`) and the routing headers."""
    return hashlib.sha256(bytes(engine.wire(request)) + json.dumps(engine.route(request), sort_keys=True).encode()
                          ).hexdigest()[:16]


def httpx_json(engine: OpenAIBackbone, request: Request) -> bytes:
    """The body as httpx's ``json=`` serialised it before bodies were pre-encoded (issue 24, item 2)."""
    return json.dumps(engine.payload(request), ensure_ascii=False, separators=(",", ":")).encode()


PINNED: dict[str, str] = {
    "openai_images/text_only": "c5076e9a7714625d",
    "openai_images/one_run": "89c4e02d47f50a4d",
    "openai_images/run_and_stills": "97590a914aa49fa8",
    "openai_images/two_timings": "f4b53c978a2a6c37",
    "openai_video_uuids/text_only": "c5076e9a7714625d",
    "openai_video_uuids/one_run": "8d09a2b423e69469",
    "openai_video_uuids/run_and_stills": "c8a9f5b7d9e33992",
    "openai_video_uuids/two_timings": "07ff7be267fe3640",
    "openai_no_json_extra/text_only": "f2ea7b8177a6a2ea",
    "openai_no_json_extra/one_run": "50037b6835fa0a71",
    "openai_no_json_extra/run_and_stills": "a19a350f102e9904",
    "openai_no_json_extra/two_timings": "f48614cc3e0d20d4",
    "vllm_served_name/text_only": "9bc867ba936b3eaf",
    "vllm_served_name/one_run": "d56ff7e588da03d5",
    "vllm_served_name/run_and_stills": "036b9e99da845ee6",
    "vllm_served_name/two_timings": "09acd456f798cfd5",
    "vllm_images/text_only": "f52838742608ec9f",
    "vllm_images/one_run": "0e92ebd50231ea2e",
    "vllm_images/run_and_stills": "65b62ae29838a5b7",
    "vllm_images/two_timings": "af6c07d99c618c76",
}
"""``engine/request`` → the digest of what it sends (taken before the split)."""


@pytest.mark.parametrize("engine", sorted(engines()))
def test_every_engine_sends_exactly_what_it_sent_before_the_split(engine: str) -> None:
    backbone = engines()[engine]
    got = {f"{engine}/{name}": sent(backbone, request) for name, request in requests().items()}
    assert got == {key: PINNED[key] for key in got}


@pytest.mark.parametrize("engine", sorted(engines()))
def test_the_pre_encoded_body_is_what_httpx_encoded(engine: str) -> None:
    """The same bytes, text with every character JSON escapes or passes through included."""
    backbone = engines()[engine]
    tricky = Request((Message.text("user", 'é ✓ "q" \\ / \n\t\x01\x1f\x7f\u2028 😀'),), request_id="k4")
    for request in (*requests().values(), tricky):
        assert bytes(backbone.wire(request)) == httpx_json(backbone, request)


def test_the_pin_covers_every_encoding_branch() -> None:
    """The pinned requests are not all alike: videos, images, stills, uuids and routing all appear."""
    bodies = {(e, r): engines()[e].payload(req) for e in engines() for r, req in requests().items()}
    kinds = {p.get("type") for b in bodies.values() for m in b["messages"] if isinstance(m["content"], list)
             for p in m["content"]}
    assert kinds == {"text", "image_url", "video_url"}
    assert any("uuid" in p for b in bodies.values() for m in b["messages"] if isinstance(m["content"], list)
               for p in m["content"])
    assert {b.get("response_format", {}).get("type") for b in bodies.values()} == {None, "json_object", "json_schema"}
    assert any("media_io_kwargs" in b for b in bodies.values()) and any("top_k" in b for b in bodies.values())
    assert any(engines()[e].route(req) for e in engines() for req in requests().values())
