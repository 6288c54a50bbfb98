"""The two reference streaming systems end to end on the tiny release: the KV-cache memory on the tiny
Qwen2-VL's real cache, the event memory cut on pixels and retrieved with BM25; both under apm-run,
their state measured on disk and their answers independent of which probes are asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import DictConfig
from support.runner import (
    assert_storage_is_on_disk,
    compose_run,
    memory_records,
    records,
    release_instance_count,
    run,
)

from apm.data.frames import Frame
from apm.data.model import Session
from apm.data.release import load_release
from apm.streaming.events import change, thumbnail
from apm.streaming.kv_cache import encode_chunk
from apm.video.cache import FrameCache

pytestmark = pytest.mark.slow
EVENTS = ["memory=event_memory", "backbone=random", "+backbone@writer=random",
          "writer._target_=support.spies.SceneWriter"]


def _kv(model: Path, tasks: str) -> list[str]:
    return ["memory=kv_cache", "backbone=tiny_qwen2vl_hf", f"backbone.model={model}", "generation.max_tokens=6",
            f"dataset.tasks=[{tasks}]"]


def _assert_causal(run_dir: Path, release: Path) -> None:
    """Every frame an answer drew on is of a visible session and not after the probe."""
    loaded = load_release(release)
    for r in records(run_dir):
        traj = loaded.trajectory(r["trajectory_id"])
        current = traj.session(f"{r['day_id']}/{r['session_id']}")
        for f in r["frames"]:
            assert traj.session(f["session"]).index <= current.index
            assert f["session"] != current.key or f["wall_clock"] <= r["probe_time"]


def test_kv_cache_memory_keeps_the_models_own_cache_and_answers_from_it(one, cache, tiny_model, tmp_path):  # noqa: F811
    run_dir = run(compose_run(one, tmp_path / "runs", cache, _kv(tiny_model, "ER,ERA,EA")))
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["tokens"]["completion"] > 0 for r in recs)
    assert all(r["latency"]["ttft_from"] == "last_update" and r["latency"]["ttft_s"] > 0 for r in recs)
    _assert_causal(run_dir, one)
    for r in (r for r in recs if r["task"] == "EA"):  # only the two latest completed sessions
        traj = load_release(one).trajectory(r["trajectory_id"])
        index = traj.session(f"{r['day_id']}/{r['session_id']}").index
        assert all(traj.session(f["session"]).index >= index - 2 for f in r["frames"])
    lines = sorted(memory_records(run_dir), key=lambda m: m["session_index"])
    assert all(m["chunks"] > 0 for m in lines) and [m["bytes"] for m in lines] == sorted({m["bytes"] for m in lines})
    assert_storage_is_on_disk(run_dir)

    state = run_dir / "memory_state" / "syn001"
    index = json.loads(next(state.glob("0000_*.kv.json")).read_text())
    with np.load(next(state.glob("0000_*.kv.npz"))) as kept:
        keys = kept["keys0"]
    assert keys.dtype == np.float16 and keys.shape == (2, 1, index["chunks"][0]["tokens"], 32)
    from transformers import AutoModelForImageTextToText, AutoProcessor  # after apm's torchvision fix

    session = load_release(one).trajectories[0].sessions[0]
    entry = FrameCache(cache).entry(session.video)
    frames = [Frame(session.key, o, s, entry.jpeg(int(o))) for o, s in index["chunks"][0]["frames"]]
    model = AutoModelForImageTextToText.from_pretrained(tiny_model).eval()
    again, _, _, _ = encode_chunk(AutoProcessor.from_pretrained(tiny_model), model, frames)
    np.testing.assert_allclose(keys.astype(np.float32), again, atol=2e-3)  # the model's own keys, as kept

    subset = run(compose_run(one, tmp_path / "subset", cache, _kv(tiny_model, "ER")))
    asked = {r["key"]: r["output"] for r in records(subset)}
    assert asked and all({r["key"]: r["output"] for r in recs}[k] == out for k, out in asked.items())


def test_event_memory_cuts_events_where_the_scene_changes(tiny, cache, tmp_path):
    cfg = compose_run(tiny, tmp_path / "runs", cache, EVENTS)
    run_dir = run(cfg)
    recs = records(run_dir)
    assert len(recs) == release_instance_count(tiny) and all(r["error"] is None for r in recs)
    _assert_causal(run_dir, tiny)
    earlier = [f for r in recs if r["task"] == "ER" for f in r["frames"]
               if f["session"] != f"{r['day_id']}/{r['session_id']}"]
    assert earlier  # cross-session questions retrieve earlier sessions' events
    assert_storage_is_on_disk(run_dir)
    world = json.loads((tiny / "synth_world.json").read_text())
    changes = {seg["start"] for traj in world["trajectories"] for s in traj["sessions"] for seg in s["timeline"][1:]}
    cut = []
    for traj in load_release(tiny).trajectories:
        state = run_dir / "memory_state" / traj.trajectory_id
        for session in traj.sessions:
            kept = json.loads(next(state.glob(f"*_{session.key.replace('/', '_')}.events.json")).read_text())
            assert [e["start"] for e in kept["events"][1:]] == expected_cuts(session, cache, cfg.memory)
            assert all(e["description"] for e in kept["events"])
            cut += [e["start"] for e in kept["events"][1:]]
    assert cut and set(cut) <= changes  # the pixels change where the synthetic scene does


def expected_cuts(session: Session, cache: Path, memory: DictConfig) -> list[int]:
    """Where event memory must cut a session (the module's contract): at a frame whose thumbnail differs from
    the previous one's by more than ``cut`` once the open event has ``min_event_s`` frames, or wherever it
    reaches ``max_event_s``."""
    entry = FrameCache(cache).entry(session.video)
    thumbs = [thumbnail(Frame(session.key, i, session.start + i, entry.jpeg(i)), memory.margin)
              for i in range(len(entry))]
    cuts, opened = [], 0
    for i in range(1, len(thumbs)):
        scene_changed = change(thumbs[i], thumbs[i - 1]) > memory.cut
        if i - opened >= memory.max_event_s or (scene_changed and i - opened >= memory.min_event_s):
            cuts.append(session.start + i)
            opened = i
    return cuts


def test_event_memory_answers_independently_of_the_probes_asked(tiny, cache, tmp_path):
    full = {r["key"]: r["prompt_sha256"] for r in records(run(compose_run(tiny, tmp_path / "a", cache, EVENTS)))}
    part = run(compose_run(tiny, tmp_path / "b", cache, [*EVENTS, "dataset.tasks=[ER,PRM]"]))
    assert all(full[r["key"]] == r["prompt_sha256"] for r in records(part))


def test_event_memory_on_the_tiny_model_as_writer_and_backbone(one, cache, tiny_model, tmp_path):  # noqa: F811
    run_dir = run(compose_run(one, tmp_path / "runs", cache, [
        "memory=event_memory", "memory.min_event_s=12", "memory.max_tokens=12", "backbone=tiny_qwen2vl_hf",
        f"backbone.model={tiny_model}", "generation.max_tokens=6", "dataset.tasks=[ER,RCR]"]))
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["frames"] for r in recs)
    lines = memory_records(run_dir)
    assert all(m["error"] is None and m["events"] > 0 for m in lines)
    described = [e["description"] for p in (run_dir / "memory_state").rglob("*.events.json")
                 for e in json.loads(p.read_text())["events"]]
    assert described and all(described)  # real (random-weight) text from the transformers path
