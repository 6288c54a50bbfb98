"""End-to-end: apm-run on the tiny synthetic release, every protocol, baseline backbones."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.runner import compose_run, memory_records, records, release_sessions, run
from support.spies import ShownFrames

from apm.data import clock
from apm.data.tasks import ADAPTIVE
from apm.memory.base import state_bytes
from apm.memory.text import memory_text
from apm.synth import generate
from apm.video.pixelcode import read_code

_CODES: dict[bytes, int | None] = {}


def _code(frame) -> int | None:
    """The pixel code of a frame (memoised by its JPEG bytes)."""
    if frame.jpeg not in _CODES:
        _CODES[frame.jpeg] = read_code(frame.pixels())
    return _CODES[frame.jpeg]


PROTOCOLS = ["none", "raw_video", "restricted", "text_summary", "oracle", "retrieval_bm25"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=0, scale="tiny")


@pytest.mark.parametrize("memory", PROTOCOLS)
def test_oracle_backbone_answers_everything_right(tiny, cache, tmp_path, memory):
    run_dir = run(compose_run(tiny, tmp_path, cache, [f"memory={memory}", "backbone=oracle"]))
    recs = records(run_dir)
    assert recs and all(r["error"] is None for r in recs)
    for r in recs:
        if r["task"] in ADAPTIVE:
            assert r["gate_pass"] is True, r["key"]
        else:
            assert r["correct"] is True, r["key"]
    assert {r["task"] for r in recs} >= set(ADAPTIVE) | {"ER", "OCR", "EA"}
    sessions = {(r["trajectory_id"], r["day_id"], r["session_id"]) for r in memory_records(run_dir)}
    assert len(sessions) == release_sessions(tiny)  # every completed session was observed once


@pytest.mark.parametrize("memory", ["none", "text_summary"])
def test_always_silent_passes_exactly_the_negative_gates(tiny, cache, tmp_path, memory):
    recs = records(run(compose_run(tiny, tmp_path, cache, [f"memory={memory}", "backbone=always_silent"])))
    adaptive = [r for r in recs if r["family"] == "adaptive"]
    assert adaptive
    assert all(r["gate_pass"] == (r["polarity"] == "negative") for r in adaptive)


@pytest.mark.parametrize("memory", PROTOCOLS)
def test_no_frame_shows_a_moment_after_the_probe(tiny, cache, tmp_path, memory):
    """Causality on pixels: read the wall-clock code of every frame of every request."""
    cfg = compose_run(tiny, tmp_path, cache, [f"memory={memory}", "backbone=oracle", "backbone.max_frames=64",
                                              "backbone._target_=support.spies.ShownFrames"])
    recs = {r["key"]: r for r in records(run(cfg))}
    writer_requests = {k: v for k, v in ShownFrames.seen.items() if v.instance is None}
    for key, request in writer_requests.items():  # the summary writer sees only its completed session
        assert {f.session for f in request.frames} <= {key.split("/", 1)[1].rsplit("/", 1)[0]}
    probes = {k: v for k, v in ShownFrames.seen.items() if v.instance is not None}
    assert set(probes) == set(recs)
    shown_any = 0
    for key, request in probes.items():
        probe = request.instance.probe_time
        codes = [_code(f) for f in request.frames]
        assert None not in codes, key
        assert max(codes) <= probe, f"{key}: frame of {clock.label(max(codes))} after probe {clock.label(probe)}"
        assert codes == [f.wall_clock for f in request.frames]  # metadata tells the truth
        assert [f["wall_clock"] for f in recs[key]["frames"]] == [clock.label(c) for c in codes]
        allowed = set(request.instance.visible_sessions)
        assert {f.session for f in request.frames} <= allowed
        if memory == "none":  # exactly the 4 latest seconds (fewer only in a session's first seconds)
            start = request.instance.probe_time - recs[key]["latency"]["prefix_s"]
            assert codes == list(range(max(probe - 3, int(start)), probe + 1)), key
        shown_any += len(codes)
    assert shown_any > 0


def test_raw_video_shows_all_prior_sessions_and_ea_only_two(tiny, cache, tmp_path):
    cfg = compose_run(tiny, tmp_path, cache, ["memory=raw_video", "backbone=oracle", "backbone.max_frames=1024",
                                              "backbone._target_=support.spies.ShownFrames"])
    run(cfg)
    for key, request in ShownFrames.seen.items():
        if request.instance is None:
            continue
        sessions = {f.session for f in request.frames}
        assert sessions == set(request.instance.visible_sessions), key
        if request.instance.task == "EA":
            assert len(sessions - {request.instance.session}) <= 2


def test_storage_is_the_bytes_on_disk(tiny, cache, tmp_path):
    run_dir = run(compose_run(tiny, tmp_path, cache, ["memory=raw_video", "backbone=random"]))
    mem = memory_records(run_dir)
    last = {}
    for m in mem:
        last[m["trajectory_id"]] = m["bytes"]
    for tid, size in last.items():
        assert size == state_bytes(run_dir / "memory_state" / tid) > 100_000
    per_session = {(m["trajectory_id"], m["session_index"]): m["bytes"] for m in mem}
    for r in records(run_dir):
        # an instance sees the state after the previous session of its trajectory
        idx = next(
            m["session_index"]
            for m in mem
            if m["trajectory_id"] == r["trajectory_id"]
            and m["session_id"] == r["session_id"]
            and m["day_id"] == r["day_id"]
        )
        assert r["memory_bytes"] == per_session.get((r["trajectory_id"], idx - 1), 0)


def test_restricted_memory_shrinks_to_two_sessions(tiny, cache, tmp_path):
    run_dir = run(compose_run(tiny, tmp_path, cache, ["memory=restricted", "backbone=random"]))
    for tid_dir in (run_dir / "memory_state").iterdir():
        assert len({p.name.split(".")[0] for p in tid_dir.iterdir()}) == 2  # a video (+ its turns) per session


def test_records_validate_against_the_documented_schema(tiny, cache, tmp_path):
    import json
    from importlib import resources

    import jsonschema

    schemas = resources.files("apm.records").joinpath("schemas")
    record_schema = json.loads(schemas.joinpath("record.schema.json").read_text())
    memory_schema = json.loads(schemas.joinpath("memory.schema.json").read_text())
    for memory in ("text_summary", "none"):
        run_dir = run(compose_run(tiny, tmp_path, cache, [f"memory={memory}", "backbone=random"]))
        recs = records(run_dir)
        for r in recs:
            jsonschema.validate(r, record_schema)
        for m in memory_records(run_dir):
            jsonschema.validate(m, memory_schema)
        assert {r["parse_status"] for r in recs} == {"ok"}
    bad = dict(recs[0], task="XX")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, record_schema)


def test_text_summaries_are_kib_and_raw_video_mib_scale(tiny, cache, tmp_path, monkeypatch):
    """A real (tiny, random-weight) VLM writes the summaries; storage is what lies on disk."""
    from support.tiny_vlm import build_tiny_qwen2vl_once

    monkeypatch.setenv("APM_TINY_MODEL", str(build_tiny_qwen2vl_once(tmp_path / "model")))
    text_dir = run(
        compose_run(
            tiny,
            tmp_path,
            cache,
            [
                "memory=text_summary",
                "memory.max_tokens=128",
                "backbone=random",
                "+backbone@writer=tiny_qwen2vl_hf",
                "dataset.tasks=[ER]",
            ],
        )
    )
    video_dir = run(compose_run(tiny, tmp_path, cache, ["memory=raw_video", "backbone=random", "dataset.tasks=[ER]"]))
    for run_dir in (text_dir, video_dir):
        for m in memory_records(run_dir):
            if m["session_index"] == 3:
                assert m["bytes"] == state_bytes(run_dir / "memory_state" / m["trajectory_id"])
    text_peak = max(m["bytes"] for m in memory_records(text_dir))
    video_peak = max(m["bytes"] for m in memory_records(video_dir))
    assert 1024 <= text_peak < 64 * 1024, text_peak
    assert video_peak >= 512 * 1024 and video_peak > 20 * text_peak, video_peak
    statuses = [m["writer_parse_status"] for m in memory_records(text_dir)]
    # The random-weight writer's 128 tokens are never the E.5 JSON: each session's status says so, and its
    # note is the reply as it came, which reads back as "failed" again (a reply mislabelled ok would not).
    assert statuses == ["failed"] * release_sessions(tiny), statuses
    notes = sorted((text_dir / "memory_state").rglob("*.txt"))
    assert len(notes) == len(statuses) and all(memory_text(n.read_text()) == (n.read_text(), "failed") for n in notes)


@pytest.mark.parametrize("memory,shown", [("none", False), ("raw_video", True), ("oracle", True)])
def test_earlier_session_registrations_come_only_from_memory(tiny, cache, tmp_path, memory, shown):
    """PRM: the registration was said in an earlier session; without memory the model never hears it."""
    from apm.backbones.base import TextPart

    run(
        compose_run(
            tiny,
            tmp_path,
            cache,
            [
                f"memory={memory}",
                "backbone=oracle",
                "backbone.max_frames=64",
                "backbone._target_=support.spies.ShownFrames",
                "dataset.tasks=[PRM,RCR]",
            ],
        )
    )
    checked = 0
    for request in ShownFrames.seen.values():
        inst = request.instance
        registration = inst.candidate.fields["registration_event"]["registration_text"]
        text = "\n".join(p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))
        said = text.count(f"User: {registration}")
        if inst.task == "RCR":
            assert said == 1  # in-session: always part of the current prefix
        else:
            assert said == (1 if shown else 0), (memory, inst.key)
            if shown:  # said at its time in the earlier session
                reg = inst.candidate.fields["registration_event"]
                at = clock.absolute(reg["day_id"], reg["registration_time"])
                assert f"[{clock.label(at)}] User: {registration}" in text
                assert f"{reg['day_id']}/{reg['session_id']}" != inst.session
            checked += 1
    assert checked > 0


def test_raw_video_memory_replays_what_it_stores(tiny, tmp_path, monkeypatch):
    """Earlier sessions' frames are read from the state folder's copies, not from the release."""
    from apm.video.cache import FrameCache

    read: list[Path] = []
    original = FrameCache.entry
    monkeypatch.setattr(FrameCache, "entry", lambda self, video: read.append(Path(video)) or original(self, video))
    run_dir = run(
        compose_run(
            tiny, tmp_path / "runs", tmp_path / "cache",
            ["memory=raw_video", "backbone=oracle", "backbone.max_frames=8", "dataset.tasks=[ER]"],
        )
    )
    state = (run_dir / "memory_state").resolve()
    stored = {p for p in read if state in p.resolve().parents}
    assert stored and all(p.exists() for p in stored)
