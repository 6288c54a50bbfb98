"""The streaming replay at the run's concurrency (issue 24, item 1) and latency that chunk alignment does
not move (issue 22, item 3): trajectories replay at the same time, each through its own copy of the
system, giving exactly the records of a serial run; a system that must be serial is replayed serially;
a probe's latency includes the update its frames triggered (docs/streaming-systems.md)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from support.backbones import Overlapping
from support.runner import compose_run, memory_records, records, run, unsealed
from support.spies import ChunkSpy, PixelSpy, take

from apm.streaming.base import StreamingSystem

TESTS = Path(__file__).resolve().parent
SPY = [f"hydra.searchpath=[file://{TESTS / 'conf'}]", "memory=pixel_spy", "backbone=random"]
THROUGH_SLOW_BACKBONE = [*SPY, "memory._target_=support.spies.BackboneSpy",
                         "backbone._target_=support.backbones.Overlapping", "dataset.tasks=[ER,ERA,RCR,MPA,PRM,TPG,EA]"]


def _comparable(run_dir: Path) -> tuple[dict[str, tuple], dict[tuple[str, int], str]]:
    """What each instance answered and was shown, and the state each session left."""
    recs = {r["key"]: (r["output"], r["memory_sha256"], r["memory_bytes"], r["prompt_sha256"], r["frames"], r["error"])
            for r in records(run_dir)}
    states = {(m["trajectory_id"], m["session_index"]): m["state_sha256"] for m in memory_records(run_dir)}
    return recs, states


def test_streaming_systems_replay_concurrently_by_default() -> None:
    assert StreamingSystem.serial is False


def test_trajectories_replay_at_the_same_time_with_the_records_of_a_serial_run(tiny, tmp_path):
    serial_dir = run(compose_run(tiny, tmp_path / "serial", tmp_path / "cache", [*THROUGH_SLOW_BACKBONE,
                                                                                  "concurrency=1"]))
    assert take(Overlapping.PEAK)["trajectories"] == 1
    serial_seen = take(PixelSpy.ANSWERED)
    concurrent_dir = run(compose_run(tiny, tmp_path / "concurrent", tmp_path / "cache", [*THROUGH_SLOW_BACKBONE,
                                                                                          "concurrency=8"]))
    assert take(Overlapping.PEAK)["trajectories"] > 1  # two trajectories' requests were in flight together
    assert take(PixelSpy.ANSWERED) == serial_seen  # every probe saw the state it saw in the serial run
    serial, concurrent = _comparable(serial_dir), _comparable(concurrent_dir)
    assert concurrent == serial and len(serial[0]) == len(records(serial_dir))
    assert max(r["latency"]["in_flight"] for r in records(concurrent_dir)) > 1


def test_a_system_that_declares_itself_serial_replays_one_session_at_a_time(tiny, tmp_path):
    cfg = [*THROUGH_SLOW_BACKBONE, "memory._target_=support.spies.SerialSpy", "concurrency=8"]
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", cfg))
    assert Overlapping.PEAK["trajectories"] == 1
    assert {r["latency"]["in_flight"] for r in records(run_dir)} == {1}


ENCODE_S = 0.2


@pytest.mark.slow
def test_a_probe_on_a_chunk_boundary_includes_the_update_it_required(tiny, tmp_path):
    """A chunked update costs the same whether it ran as the probe second's frame was observed (a probe on
    the boundary) or inside the answer (between boundaries): both latencies include it."""
    cfg = [*SPY, "memory._target_=support.spies.ChunkSpy", "+memory.chunk_frames=4", f"+memory.encode_s={ENCODE_S}",
           "dataset.tasks=[ER,MPA,TPG]", "concurrency=1"]
    recs = records(run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", cfg)))
    keys = unsealed(tiny)
    aligned = {keys[opaque]: was for opaque, was in ChunkSpy.ALIGNED.items()}  # told each probe's opaque id
    on, off = ([r["latency"]["ttft_s"] for r in recs if aligned[r["key"]] is side] for side in (True, False))
    assert len(on) >= 3 and len(off) >= 3
    assert min(on) >= ENCODE_S and min(off) >= ENCODE_S  # every probe waited for one chunk's encoding
    assert abs(statistics.mean(on) - statistics.mean(off)) < ENCODE_S / 2
    for r in recs:
        lat = r["latency"]
        if aligned[r["key"]]:  # the boundary's update is the probe's required update, on the record
            assert lat["update_s"] >= ENCODE_S and lat["ttft_s"] >= lat["update_s"]
        assert lat["rtf"] == pytest.approx((lat["observe_s"] + lat["ttft_s"] - lat["update_s"]) / lat["prefix_s"])


@pytest.mark.slow
def test_the_kv_cache_reference_replays_concurrently_on_its_backbones_worker_thread(tiny, tmp_path, tiny_model):
    """Two trajectories' sessions interleave their model calls on the one worker thread; every answer,
    prompt and exported state is the serial run's."""
    cfg = ["memory=kv_cache", "backbone=tiny_qwen2vl_hf", f"backbone.model={tiny_model}", "generation.max_tokens=4",
           "dataset.tasks=[ER]", "dataset.trajectories=[syn001,syn002]"]
    serial = run(compose_run(tiny, tmp_path / "serial", tmp_path / "cache", [*cfg, "concurrency=1"]))
    concurrent = run(compose_run(tiny, tmp_path / "concurrent", tmp_path / "cache", [*cfg, "concurrency=2"]))
    assert _comparable(concurrent) == _comparable(serial)
    assert len({r["trajectory_id"] for r in records(concurrent)}) == 2
