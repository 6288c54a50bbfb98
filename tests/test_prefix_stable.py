"""The ``session_stable`` frame layout (docs/prompts.md, "Frame layouts"): the same causality (on
pixels), frame budget and independence as the paper's ``uniform``; the earlier sessions' part of
consecutive probes is byte-identical as sent; the current prefix only grows; every media item carries
its ``uuid``; a data-parallel server gets each trajectory on one engine; and the real vLLM CPU build
reports the prompt tokens it served from its prefix cache (``cached_tokens``)."""

from __future__ import annotations

import asyncio
import json
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from support.runner import compose_run, pixel_second, records, run, served
from support.spies import ShownFrames
from support.tiny_vlm import CONF
from support.vllm_fixtures import run_offline

from apm.backbones import instantiate_backbone
from apm.backbones.base import FramePart, GenerationSettings, Message, Request, Stills, TextPart, frame_uuid
from apm.backbones.hf import to_chat_inputs
from apm.backbones.openai_api import OpenAIBackbone, engine_of
from apm.backbones.vllm_offline import multi_modal_uuids
from apm.backbones.vllm_server import VLLMServerBackbone
from apm.data.instances import Instance, release_instances
from apm.data.model import Release
from apm.data.release import load_release
from apm.memory.video import RawVideo
from apm.runner.app import build_setup
from apm.runner.config import FrameLayout, config_hash
from apm.runner.context import Prepared, prepare, prompt_digest
from apm.runner.request import prepare_instance, state_dir_of
from apm.synth import generate
from apm.video.cache import FrameCache
from apm.video.select import EARLIER_SHARE, still_count

STABLE = FrameLayout.session_stable


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> tuple[Path, Release, list[Instance], FrameCache]:
    root = generate(tmp_path_factory.mktemp("rel") / "tiny", seed=0, scale="tiny")
    release = load_release(root)
    return root, release, release_instances(release), FrameCache(tmp_path_factory.mktemp("cache"))


def prepared(world, inst: Instance, max_frames: int, layout: FrameLayout = STABLE,
             frames_per_still: float = 1.0) -> Prepared:
    """``inst``'s request under raw-video memory (earlier sessions in full), laid out by ``layout``."""
    _, release, _, cache = world
    traj = release.trajectory(inst.trajectory_id)
    history = RawVideo().history(inst, traj, Path("/nonexistent"))  # no state folder: no turns kept …
    history = replace(history, spans=tuple(replace(s, video=None) for s in history.spans))  # … release videos
    return prepare(cache, traj, inst, history, max_frames, GenerationSettings(max_tokens=4), layout, frames_per_still)


def server() -> OpenAIBackbone:
    """The client of a vLLM server backbone (not launched), whose payloads the tests read."""
    return VLLMServerBackbone(model="m", launch=False, base_url="http://h/v1", frame_mode="video").client


def by_session(instances: list[Instance]) -> list[list[Instance]]:
    """Instances that see the same sessions, grouped per (trajectory, session), in probe-time order."""
    groups: dict[tuple, list[Instance]] = defaultdict(list)
    for inst in instances:
        groups[(inst.trajectory_id, inst.session, inst.visible_sessions)].append(inst)
    return [sorted(g, key=lambda i: (i.probe_time, i.key)) for g in groups.values() if len(g) > 1]


@pytest.mark.parametrize("max_frames", [1, 2, 5, 12, 64])
def test_no_frame_after_the_probe_on_pixels_and_the_budget_holds(world, max_frames: int) -> None:
    _, release, instances, _ = world
    for inst in instances:
        shown = prepared(world, inst, max_frames).frames
        seconds = [pixel_second(f) for f in shown]
        assert seconds == [f.wall_clock for f in shown], inst.key
        assert max(seconds) == inst.probe_time, inst.key  # inclusive of the probe second, never after
        assert {f.session for f in shown} <= set(inst.visible_sessions), inst.key
        assert len(shown) <= max_frames, inst.key
        earlier = [f for f in shown if f.session != inst.session]
        assert len(earlier) <= math.floor(EARLIER_SHARE * max_frames), inst.key
        assert [(release.trajectory(inst.trajectory_id).session(f.session).index, f.offset) for f in shown] == sorted(
            (release.trajectory(inst.trajectory_id).session(f.session).index, f.offset) for f in shown)


def test_earlier_sessions_are_the_same_and_the_current_prefix_only_grows(world) -> None:
    _, _, instances, _ = world
    checked = 0
    for group in by_session(instances):
        shown = [prepared(world, inst, 16) for inst in group]
        for a, b in zip(shown, shown[1:]):
            inst = a.instance
            (a_earlier, a_now), (b_earlier, b_now) = (split(x.frames, inst.session) for x in (a, b))
            assert a_earlier == b_earlier, inst.key
            grid = a_now[:-1]  # its own latest may be off the stride
            assert b_now[: len(grid)] == grid, inst.key
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("frames_per_still", [3.0, 112 / 9])
def test_stills_are_spent_at_their_tokens_worth_and_still_only_grow(world, frames_per_still: float) -> None:
    """A still worth ``frames_per_still`` video frames: the room the earlier sessions leave buys that many
    fewer stills (at least the latest frame), still on a stride fixed per session."""
    _, _, instances, _ = world
    checked = 0
    for group in by_session(instances):
        shown = [prepared(world, inst, 64, frames_per_still=frames_per_still) for inst in group]
        for a, b in zip(shown, shown[1:]):
            (a_earlier, a_now), (b_earlier, b_now) = (split(x.frames, a.instance.session) for x in (a, b))
            assert 1 <= len(a_now) <= still_count(64 - len(a_earlier), frames_per_still), a.instance.key
            assert a_earlier == b_earlier and b_now[: len(a_now) - 1] == a_now[:-1], a.instance.key
            checked += 1
    assert checked > 20


def test_the_runner_spends_stills_as_the_backbones_guard_counts_them(world, tmp_path) -> None:
    """Under the Qwen3-VL preset a still is worth 112 / 9 frames: a first session's probe gets at most 5
    stills of a 64-frame budget, where it used to get 64."""
    setup, plan = build_setup(compose_run(world[0], tmp_path / "runs", tmp_path / "cache", [
        "memory=raw_video", "backbone=qwen3_vl_8b", "backbone.max_frames=64", "frames.layout=session_stable"]))
    assert setup.backbone.guard.frames_per_still == 112 / 9
    by_id = {t.trajectory_id: t for t in plan.trajectories}
    first = [i for i in plan.run_instances if i.session == i.visible_sessions[0]]
    stills = [sum(p.still for p in prepare_instance(setup, by_id[i.trajectory_id], i,
                                                    state_dir_of(setup, by_id[i.trajectory_id]))[0]
                  .request.messages[1].parts if isinstance(p, FramePart)) for i in first]
    assert first and max(stills) == still_count(64, 112 / 9) == 5


def split(frames, session: str) -> tuple[list, list]:
    """Frames of earlier sessions, and of ``session``."""
    return [f for f in frames if f.session != session], [f for f in frames if f.session == session]


def _content(body: dict) -> list[str]:
    """A chat body's messages as serialised items: the system message, then each user content part."""
    system, user = body["messages"]
    return [json.dumps(system), *(json.dumps(p) for p in user["content"])]


def test_consecutive_probes_share_the_earlier_part_byte_for_byte_as_sent(world) -> None:
    """What a vLLM server is sent: system message, memory text and headers, the earlier sessions' video
    (with its timing) are identical in every probe of a session; the stills of one probe open the next."""
    _, _, instances, _ = world
    checked = 0
    for group in by_session(instances):
        if group[0].session == group[0].visible_sessions[0]:
            continue  # no earlier session
        bodies = [server().payload(prepared(world, inst, 16).request) for inst in group]
        for a, b in zip(bodies, bodies[1:]):
            ca, cb = _content(a), _content(b)
            video = next(i for i, p in enumerate(ca) if '"video_url"' in p)
            assert ca[: video + 1] == cb[: video + 1]
            assert a["media_io_kwargs"] == b["media_io_kwargs"]
            stills = [p for p in ca[video + 1 :] if '"image_url"' in p][:-1]
            assert cb[video + 1 : video + 1 + len(stills)] == stills
            checked += 1
    assert checked > 10


def test_uniform_is_the_default_and_keeps_its_hash(world, tmp_path) -> None:
    def config(*overrides: str):
        return compose_run(world[0], tmp_path, tmp_path / "cache", list(overrides))

    base = config()
    assert base.frames.layout == FrameLayout.uniform
    assert config_hash(base) == config_hash(config("frames.layout=uniform"))
    assert config_hash(base) != config_hash(config("frames.layout=session_stable"))
    with pytest.raises(Exception) as refused:  # noqa: PT011 — Hydra wraps OmegaConf's ValidationError
        config("frames.layout=stable")
    assert "expected one of [uniform, session_stable]" in str(refused.value.__cause__)


def test_stills_are_named_by_the_digest_and_sent_as_images_everywhere(world) -> None:
    _, _, instances, _ = world
    inst = next(i for i in instances if i.session != i.visible_sessions[0])
    stable = prepared(world, inst, 16)
    user = stable.request.messages[1]
    kinds = [type(s).__name__ for s in user.segments()]
    assert kinds == ["TextPart", "tuple", "Stills", "TextPart"]
    stills = [p.frame for p in user.parts if isinstance(p, FramePart) and p.still]
    assert {f.session for f in stills} == {inst.session}
    as_video = Message("user", tuple(FramePart(p.frame) if isinstance(p, FramePart) else p for p in user.parts))
    assert prompt_digest((stable.request.messages[0], as_video)) != stable.prompt_sha256
    body = server().payload(stable.request)
    parts = body["messages"][1]["content"]
    assert [p["type"] for p in parts] == ["text", "video_url", *["image_url"] * len(stills), "text"]
    assert [p["uuid"] for p in parts if p["type"] == "image_url"] == [frame_uuid(f) for f in stills]
    assert body["media_io_kwargs"]["video"]["num_frames"] == len(stable.frames) - len(stills)
    chat = to_chat_inputs(stable.request.messages, "video")
    assert (len(chat.videos), len(chat.images)) == (1, len(stills))
    assert multi_modal_uuids(chat) == {"video": chat.video_uuids, "image": [frame_uuid(f) for f in stills]}


def test_uuids_are_the_frame_cache_key_and_offset_and_only_go_where_asked(world) -> None:
    _, _, instances, cache = world
    inst = next(i for i in instances if i.session != i.visible_sessions[0])
    request = prepared(world, inst, 16).request
    for f in request.frames:
        assert frame_uuid(f) == f"{f.entry}@{f.offset!r}" and f.entry
    same = prepared(world, inst, 16).request
    plain = OpenAIBackbone(model="m", base_url="http://h/v1", frame_mode="video")  # an API may refuse extra keys
    assert all("uuid" not in p for p in plain.payload(request)["messages"][1]["content"])
    uuids = [p.get("uuid") for p in server().payload(request)["messages"][1]["content"] if p["type"] != "text"]
    assert None not in uuids and uuids == [p.get("uuid") for p in server().payload(same)["messages"][1]["content"]
                                           if p["type"] != "text"]
    uniform = prepared(world, inst, 16, FrameLayout.uniform).request
    (video,) = [p for p in server().payload(uniform)["messages"][1]["content"] if p["type"] == "video_url"]
    assert video["uuid"] != uuids[0]  # another set of frames, another item


def test_a_data_parallel_server_gets_each_trajectory_on_one_engine(world) -> None:
    _, release, instances, _ = world
    assert {engine_of(f"t{i}", 4) for i in range(64)} == {0, 1, 2, 3}
    assert engine_of("t1", 4) == engine_of("t1", 4)

    async def send(backbone: OpenAIBackbone, requests: list[Request]) -> None:
        async with backbone:
            for r in requests:
                assert (await backbone.generate(r)).ok

    picked = [i for i in instances if i.task in ("ER", "ERA")][:12]
    requests = [Request((Message.text("user", i.key),), GenerationSettings(max_tokens=2), trajectory_id=i.trajectory_id)
                for i in picked]
    requests.append(Request((Message.text("user", "no trajectory"),), GenerationSettings(max_tokens=2)))
    with served(keep_requests=True) as fake:
        asyncio.run(send(VLLMServerBackbone(model="m", launch=False, base_url=fake.base_url, data_parallel_size=3),
                         requests))
    ranks = [headers.get("x-data-parallel-rank") for headers, _ in fake.requests]
    assert ranks == [str(engine_of(i.trajectory_id, 3)) for i in picked] + [None]
    assert "--data-parallel-size" in VLLMServerBackbone(model="m", data_parallel_size=2).argv(8000)
    assert "--data-parallel-size" not in VLLMServerBackbone(model="m").argv(8000)


@pytest.fixture(scope="module")
def shown(world, tmp_path_factory):
    """Every request of a raw-video run laid out ``session_stable`` (tests/test_independent_instances.py
    checks their independence under this layout too)."""
    root, _, _, _ = world
    out = tmp_path_factory.mktemp("runs")
    run_dir = run(compose_run(root, out, out / "cache", [
        "memory=raw_video", "backbone=oracle", "backbone.max_frames=16", "frames.layout=session_stable",
        "backbone._target_=support.spies.ShownFrames"]))
    assert all(len(r["frames"]) <= 16 for r in records(run_dir))
    return dict(ShownFrames.seen)


def test_a_session_stable_run_shows_only_causal_pixels(shown) -> None:
    requests = shown
    stills = 0
    for request in requests.values():
        inst = request.instance
        seconds = [pixel_second(f) for f in request.frames]
        assert seconds == [f.wall_clock for f in request.frames] and max(seconds) == inst.probe_time, inst.key
        assert len(request.frames) <= 16
        stills += sum(isinstance(s, Stills) for m in request.messages for s in m.segments())
    assert stills == len(requests)


# --- the real engine: vLLM's CPU build serving the tiny Qwen2-VL -------------------------------------


def _cached(responses) -> list[tuple[int, int]]:
    return [(r.prompt_tokens, r.cached_tokens) for r in responses]


@pytest.mark.slow
def test_the_vllm_server_reports_the_tokens_its_prefix_cache_served(
    world, vllm_python: str, tiny_model: Path, loop: asyncio.Runner, tmp_path: Path  # noqa: F811
) -> None:
    """Two consecutive probes of a session, each layout on a fresh cache: the first is served cold
    (``cached_tokens`` 0); session_stable's second finds most of its prompt cached, uniform's little."""
    _, _, instances, _ = world
    group = next(pair for g in by_session(instances) if len(g[0].visible_sessions) == 3
                 for pair in zip(g, g[1:]) if pair[0].candidate_id == pair[1].candidate_id)
    backbone = instantiate_backbone(OmegaConf.load(CONF / "tiny_qwen2vl_vllm.yaml"), model=str(tiny_model),
                                    python=vllm_python, log_dir=str(tmp_path),
                                    extra_args=["--enforce-eager", "--block-size", "32"])  # CPU default 128: coarse
    loop.run(backbone.start())
    try:
        seen = {}
        for layout in (FrameLayout.uniform, STABLE):
            salt = f"[{layout.value}]"  # a fresh prefix per layout: nothing carries over from the other
            first, second = (replace_system(prepared(world, i, 32, layout).request, salt) for i in group)
            seen[layout] = [loop.run(backbone.generate(first)), loop.run(backbone.generate(second))]
    finally:
        loop.run(backbone.close())
    for layout, (cold, warm) in seen.items():
        assert cold.ok and warm.ok, (cold.error, warm.error)
        assert cold.cached_tokens == 0, layout
    (_, uniform), (_, stable) = seen[FrameLayout.uniform], seen[STABLE]
    print({k.value: _cached(v) for k, v in seen.items()})
    assert stable.cached_tokens > uniform.cached_tokens, (_cached(seen[FrameLayout.uniform]), _cached(seen[STABLE]))


def replace_system(request: Request, salt: str) -> Request:
    """``request`` with ``salt`` opening its system message, so two layouts never share a cached prefix."""
    system, *rest = request.messages
    return replace(request, messages=(Message.text("system", salt + system.parts[0].text), *rest))


@pytest.mark.slow
def test_the_offline_engine_reports_cached_tokens(
    world, vllm_python: str, tiny_model: Path, tmp_path: Path  # noqa: F811
) -> None:
    """vllm_offline (run by the vLLM venv's python): the same probe twice; the second from the cache."""
    _, _, instances, _ = world
    inst = next(i for i in instances if len(i.visible_sessions) > 1)
    request = prepared(world, inst, 32).request
    cold, warm = run_offline(vllm_python, tiny_model, [request, request], tmp_path)
    assert cold.ok and warm.ok and cold.cached_tokens == 0, (cold.error, warm.error, _cached([cold, warm]))
    assert warm.cached_tokens >= warm.prompt_tokens // 2, _cached([cold, warm])


def test_text_parts_unchanged_by_the_layout(world) -> None:
    """Only the frames differ between the layouts: the text parts are the same, in the same order."""
    _, _, instances, _ = world
    for inst in instances[:40]:
        texts = [[p.text for m in prepared(world, inst, 16, layout).request.messages for p in m.parts
                  if isinstance(p, TextPart)] for layout in FrameLayout]
        assert texts[0] == texts[1], inst.key
