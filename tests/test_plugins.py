"""A memory protocol and a backbone that live outside the package run through apm-run unchanged."""

from __future__ import annotations

from pathlib import Path

from support.runner import compose_run, memory_records, records, run
from support.spies import ShownFrames

from apm.memory.base import state_bytes
from apm.synth import generate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_outside_plugins_run_with_storage_and_causality(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    tiny = generate(tmp_path / "tiny", seed=6, scale="tiny")
    search = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [search, "memory=keyframes", "backbone=my_backbone", "dataset.tasks=[ER,OCR]"]))
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["parse_status"] == "ok" for r in recs)
    assert {r["run"]["memory"] for r in recs} == {"Keyframe Memory (example plug-in)"}
    for m in memory_records(run_dir):
        assert m["keyframes"] > 0
    for tid in {r["trajectory_id"] for r in recs}:
        stored = state_bytes(run_dir / "memory_state" / tid)
        assert stored == max(m["bytes"] for m in memory_records(run_dir) if m["trajectory_id"] == tid) > 0

    run(compose_run(tiny, tmp_path / "runs2", tmp_path / "cache",
                    [search, "memory=keyframes", "backbone=oracle", "backbone.max_frames=1024",
                     "backbone._target_=support.spies.ShownFrames", "dataset.tasks=[ER]"]))
    for request in ShownFrames.seen.values():
        if request.instance is None:
            continue
        current = request.instance.session
        earlier = [f for f in request.frames if f.session != current]
        assert earlier, request.instance.key  # ER questions are about earlier sessions
        assert all(f.offset % 10 == 0 for f in earlier)  # only the kept keyframes
        assert max(f.wall_clock for f in request.frames) <= request.instance.probe_time
