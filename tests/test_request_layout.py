"""One request, every engine (docs/prompts.md, "The request"): the runner lays a request out once and
the transformers, vLLM offline, vLLM server and OpenAI-compatible engines only encode it — the same
text parts in the same order, the same frames in the same order, nothing added — so ``prompt_sha256``
names exactly what is sent; frames sent as video carry their true timing; a request's video items
stay within the presets' ``limit_mm_per_prompt`` however many sessions and turns a trajectory has."""

from __future__ import annotations

import base64
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf
from support.runner import compose_run, records, run
from support.spies import ShownFrames, take
from support.tiny_vlm import CONF

from apm.backbones.base import FramePart, Message, Request, TextPart
from apm.backbones.hf import HFBackbone, to_chat_inputs
from apm.backbones.openai_api import OpenAIBackbone
from apm.backbones.vllm_offline import multi_modal_data
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.data.frames import Frame
from apm.data.model import Trajectory
from apm.data.release import load_release
from apm.runner.context import prompt_digest
from apm.synth import generate
from apm.synth.world import SCALES, Scale

Layout = list[tuple[str, list[tuple[str, Any]]]]
"""Per message: its role and its pieces, ``("text", str)`` or ``("frames", (frame index, …))``."""


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=0, scale="tiny")


@pytest.fixture(scope="module")
def run_of(root, tmp_path_factory):
    """Every request (and record) of a run on the tiny synthetic release, by memory protocol."""
    out = tmp_path_factory.mktemp("runs")

    def shown(memory: str) -> tuple[dict[str, Request], dict[str, dict]]:
        run_dir = run(compose_run(root, out / memory, out / "cache", [
            f"memory={memory}", "backbone=oracle", "backbone.max_frames=24",
            "backbone._target_=support.spies.ShownFrames"]))
        return take(ShownFrames.seen), {r["key"]: r for r in records(run_dir)}

    return shown


@pytest.fixture(scope="module")
def prm(root, run_of) -> tuple[Request, dict, Trajectory]:
    """A PRM probe's request under raw-video memory: frames of several sessions, its registration
    (said in an earlier session, kept by the memory) and its interval marker; its record; its trajectory."""
    requests, recs = run_of("raw_video")
    key = next(k for k, r in requests.items() if r.instance is not None and r.instance.task == "PRM"
               and len({f.session for f in r.frames}) > 1)
    return requests[key], recs[key], load_release(root).trajectory(requests[key].instance.trajectory_id)


def expected(request: Request) -> Layout:
    """The request's own layout: its text parts and runs of consecutive frames, in order."""
    index = {id(f): i for i, f in enumerate(request.frames)}
    layout = []
    for m in request.messages:
        pieces = []
        for is_frame, group in groupby(m.parts, key=lambda p: isinstance(p, FramePart)):
            if is_frame:
                pieces.append(("frames", tuple(index[id(p.frame)] for p in group)))
            else:
                pieces += [("text", p.text) for p in group]
        layout.append((m.role, pieces))
    return layout


def _runs(pieces: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Consecutive single images joined into one run, as the request has them."""
    out: list[tuple[str, Any]] = []
    for kind, value in pieces:
        if kind == "image" and out and out[-1][0] == "frames" and out[-1][1][1] == "image":
            out[-1] = ("frames", (out[-1][1][0] + value, "image"))
        else:
            out.append(("frames", (value, kind)) if kind in ("image", "video") else (kind, value))
    return [(k, v[0]) if k == "frames" else (k, v) for k, v in out]


def from_payload(body: dict, request: Request) -> Layout:
    """What an OpenAI-compatible engine is sent, read back from the chat-completions body."""
    by_jpeg = {f.jpeg: i for i, f in enumerate(request.frames)}
    layout = []
    for m in body["messages"]:
        if isinstance(m["content"], str):
            layout.append((m["role"], [("text", m["content"])]))
            continue
        pieces = []
        for p in m["content"]:
            if p["type"] == "text":
                pieces.append(("text", p["text"]))
            elif p["type"] == "video_url":
                data = p["video_url"]["url"].removeprefix("data:video/jpeg;base64,").split(",")
                pieces.append(("video", tuple(by_jpeg[base64.b64decode(x)] for x in data)))
            else:
                jpeg = base64.b64decode(p["image_url"]["url"].removeprefix("data:image/jpeg;base64,"))
                pieces.append(("image", (by_jpeg[jpeg],)))
        layout.append((m["role"], _runs(pieces)))
    return layout


def _pixel_index(request: Request) -> dict[bytes, int]:
    return {f.pixels().tobytes(): i for i, f in enumerate(request.frames)}


def from_chat_inputs(conversation: list[dict], videos: list[np.ndarray], request: Request) -> Layout:
    """What a local engine (transformers, vLLM offline) is given: chat turns and the videos they name."""
    by_pixels, queue = _pixel_index(request), iter(videos)
    layout = []
    for m in conversation:
        pieces = []
        for p in m["content"]:
            if p["type"] == "text":
                pieces.append(("text", p["text"]))
            else:
                pieces.append(("video", tuple(by_pixels[frame.tobytes()] for frame in next(queue))))
        layout.append((m["role"], _runs(pieces)))
    return layout


def digest_of(layout: Layout, request: Request) -> str:
    """``prompt_sha256`` computed from what an engine was sent (each frame by session and offset)."""
    frames = request.frames
    return prompt_digest(tuple(
        Message(role, tuple(p for kind, v in pieces for p in (
            [TextPart(v)] if kind == "text" else [FramePart(frames[i]) for i in v])))
        for role, pieces in layout))


def engines() -> dict[str, OpenAIBackbone]:
    return {
        "openai_api (video)": OpenAIBackbone(model="m", base_url="http://h/v1", frame_mode="video"),
        "openai_api (images)": OpenAIBackbone(model="m", base_url="http://h/v1", frame_mode="images"),
        "vllm_server": VLLMServerBackbone(model="m", launch=False, base_url="http://h/v1", frame_mode="video").client,
    }


def test_one_instance_is_the_same_request_on_every_engine(prm):
    request, record, _ = prm
    want = expected(request)
    sent = {name: from_payload(b.payload(request), request) for name, b in engines().items()}
    chat = to_chat_inputs(request.messages, "video")
    sent["hf"] = from_chat_inputs(chat.conversation, chat.videos, request)
    offline = multi_modal_data(chat)["video"]
    sent["vllm_offline"] = from_chat_inputs(chat.conversation, [video for video, _ in offline], request)
    for name, layout in sent.items():
        assert layout == want, name
        assert digest_of(layout, request) == record["prompt_sha256"], name
    assert [kind for kind, _ in want[1][1]] == ["text", "frames", "text"]  # one segment, texts around it


def test_the_digest_covers_every_text_part_and_frame(prm):
    request, record, _ = prm
    assert prompt_digest(request.messages) == record["prompt_sha256"]
    system, user = request.messages
    before, *frames, after = user.parts
    variants = [
        (system, Message("user", (TextPart(before.text + " "), *frames, after))),
        (system, Message("user", (before, *frames[:-1], after))),
        (system, Message("user", (before, *frames[::-1], after))),
        (system, Message("user", (before, after, *frames))),
        (Message.text("system", system.parts[0].text + "."), user),
    ]
    assert len({record["prompt_sha256"], *(prompt_digest(v) for v in variants)}) == 1 + len(variants)


def _seconds(traj: Trajectory, frames: tuple[Frame, ...]) -> list[float]:
    """Each frame's time since the start of the earliest session shown, from the release's session times."""
    starts = [traj.session(f.session).start for f in frames]
    return [start - min(starts) + f.offset for start, f in zip(starts, frames)]


def test_frames_sent_as_video_carry_their_true_timing(prm):
    request, _, traj = prm
    want = _seconds(traj, request.frames)
    assert max(want) - min(want) > 3600  # sessions hours apart: a contiguous clip would lie
    video = engines()["vllm_server"].payload(request)["media_io_kwargs"]["video"]
    assert [i / video["fps"] for i in video["frames_indices"]] == want
    assert video["num_frames"] == len(request.frames) <= video["total_num_frames"]
    chat = to_chat_inputs(request.messages, "video")
    (meta,) = chat.video_metadata
    assert [i / meta["fps"] for i in meta["frames_indices"]] == want
    ((_, offline_meta),) = multi_modal_data(chat)["video"]
    assert offline_meta == meta


def test_runs_whose_timings_differ_go_as_images_to_a_server(prm):
    """vLLM (0.32) takes one video timing per request: two runs with different timings cannot both be
    true as videos there, so they go as images; local engines take one timing per video."""
    request, _, _ = prm
    by_session: dict[str, list[Frame]] = {}
    for f in request.frames:
        by_session.setdefault(f.session, []).append(f)
    first, second = list(by_session.values())[:2]
    two = Request((Message("user", (*map(FramePart, first), TextPart("then"), *map(FramePart, second))),))
    body = engines()["vllm_server"].payload(two)
    assert "media_io_kwargs" not in body
    assert [p["type"] for p in body["messages"][0]["content"]] == ["image_url"] * len(first) + ["text"] + [
        "image_url"] * len(second)
    chat = to_chat_inputs(two.messages, "video")
    assert [m["frames_indices"][0] / m["fps"] for m in chat.video_metadata] == [first[0].offset, second[0].offset]


@pytest.mark.slow
def test_transformers_is_given_the_text_parts_in_order(prm, tiny_model: Path):  # noqa: F811
    """A real round trip on the tiny Qwen2-VL: the prompt it tokenises holds each text part, in order,
    and one video."""
    request, _, _ = prm
    hf = HFBackbone(str(tiny_model))
    hf._load()
    ids = hf._inputs(request)["input_ids"][0].tolist()
    prompt = hf._processor.tokenizer.decode(ids)
    at = 0
    for m in request.messages:
        for p in m.parts:
            if isinstance(p, TextPart):
                at = prompt.index(p.text, at) + len(p.text)
    assert prompt.count("<|vision_start|>") == 1


def test_a_request_fits_the_presets_video_limit_however_long_the_trajectory(tmp_path, monkeypatch):
    """20 sessions, every task's turns, raw video and text summaries (whose writer hears every turn
    of a session): each request, probe or summary, sends at most the presets' limit of video items."""
    monkeypatch.setitem(SCALES, "long", Scale("long", 1, (20,), (40, 48), 160, 120, 5, 2))
    long = generate(tmp_path / "long", seed=1, scale="long")
    limits = {name: OmegaConf.load(CONF / f"{name}.yaml").limit_mm_per_prompt
              for name in ("qwen3_vl_8b", "qwen3_8_27b", "internvl3_5_8b", "videollama3_7b")}
    server = engines()["vllm_server"]
    for memory in ("raw_video", "text_summary"):
        run(compose_run(long, tmp_path / memory, tmp_path / "cache", [
            f"memory={memory}", "backbone=oracle", "backbone.max_frames=64",
            "backbone._target_=support.spies.ShownFrames"]))
        shown = take(ShownFrames.seen)
        assert len(shown) > 20
        for key, request in shown.items():
            content = [p for m in server.payload(request)["messages"] if isinstance(m["content"], list)
                       for p in m["content"]]
            videos = sum(p["type"] == "video_url" for p in content)
            images = sum(p["type"] == "image_url" for p in content)
            for name, limit in limits.items():
                assert videos <= limit.video and images <= limit.image, (memory, key, name, videos, images)

