"""The streaming-system contract through apm-run: causality proved on pixels, independent probes, resume
by replay, latency fields, and a system from outside the package (docs/streaming-systems.md)."""

from __future__ import annotations

import ast
import importlib.util
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
from runner_helpers import (
    assert_storage_is_on_disk,
    compose_run,
    memory_records,
    records,
    release_instance_count,
    release_sessions,
    run,
    take,
)
from streaming_spies import PixelSpy

from apm.data.frames import Frame
from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.memory.base import History, Note
from apm.runner.online import session_frames
from apm.runner.streaming import compose_request
from apm.synth import generate
from apm.video.decode import VideoDecodeError
from apm.video.select import CausalityError

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
SPY = [f"hydra.searchpath=[file://{TESTS / 'conf'}]", "memory=pixel_spy", "backbone=random"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("rel") / "tiny", seed=1, scale="tiny")


@pytest.fixture(scope="module")
def spied(tiny, tmp_path_factory) -> tuple[Path, dict, dict]:
    """One uninterrupted spy run over every instance of the release, and what the spy saw."""
    root = tmp_path_factory.mktemp("spy")
    run_dir = run(compose_run(tiny, root / "runs", root / "cache", SPY))
    return run_dir, dict(PixelSpy.ANSWERED), {k: list(v) for k, v in PixelSpy.FED.items()}


def _outputs(run_dir: Path) -> dict[str, str]:
    return {r["key"]: r["output"] for r in records(run_dir)}


def test_nothing_after_the_probe_is_observed_before_the_answer_on_pixels(tiny, spied):
    run_dir, answered, fed = spied
    release = load_release(tiny)
    instances = release_instances(release)
    assert {i.task for i in instances} >= {"ER", "ERA", "RCR", "MPA", "PRM", "TPG", "EA"}
    assert set(answered) == {i.key for i in instances}
    for inst in instances:
        seen = answered[inst.key]
        assert seen["session"] == inst.session
        assert seen["last_seen"] == inst.probe_time, inst.key  # up to the probe second, never after it
    for traj in release.trajectories:
        for session in traj.sessions:  # each frame of the session once a pass, in order, one per second
            seconds = fed[traj.trajectory_id, session.key]
            starts = [i for i, second in enumerate(seconds) if second == session.start]
            passes = [seconds[a:b] for a, b in zip(starts, [*starts[1:], len(seconds)])]
            assert starts[:1] == [0] and passes  # the main replay, then one per EA visible set holding it
            for one in passes:
                assert one == list(range(session.start, session.start + len(one)))
                assert session.duration <= len(one) <= session.duration + 1


def test_streaming_records_carry_the_update_latency_and_validate(tiny, spied):
    run_dir, _, _ = spied
    schema = json.loads(resources.files("apm.records").joinpath("schemas", "record.schema.json").read_text())
    recs = records(run_dir)
    for r in recs:
        jsonschema.validate(r, schema)
        lat = r["latency"]
        assert lat["ttft_from"] == "last_update" and 0 <= lat["update_s"] <= lat["observe_s"]
        assert lat["rtf"] == pytest.approx((lat["observe_s"] + lat["ttft_s"]) / lat["prefix_s"])
        assert r["run"]["capabilities"] == {"streaming": True, "persistent": True}
        assert r["output"].startswith("state ")
    lines = memory_records(run_dir)
    assert len(lines) == release_sessions(tiny)
    assert all(m["observed"] > 0 and m["observe_s"] > 0 and m["error"] is None for m in lines)
    assert_storage_is_on_disk(run_dir)


def test_probes_are_independent_of_which_are_asked(tiny, spied, tmp_path):
    full = _outputs(spied[0])
    subset = _outputs(run(compose_run(tiny, tmp_path / "a", tmp_path / "cache", [*SPY, "dataset.tasks=[ER,RCR]"])))
    assert subset and all(full[k] == out for k, out in subset.items())
    leaky = [*SPY, "memory._target_=streaming_spies.LeakySpy"]
    every = _outputs(run(compose_run(tiny, tmp_path / "b", tmp_path / "cache", leaky)))
    some = _outputs(run(compose_run(tiny, tmp_path / "c", tmp_path / "cache", [*leaky, "dataset.tasks=[ER,RCR]"])))
    assert any(every[k] != out for k, out in some.items())  # the test catches an answer that writes


def test_lost_records_are_redone_by_replaying_their_session(tiny, spied, tmp_path):
    clean = _outputs(spied[0])
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", SPY)
    run_dir = run(cfg)
    assert set(take(PixelSpy.ANSWERED)) == set(clean)  # the first run asked everything
    (path,) = (run_dir / "records").glob("*.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    lost = [json.loads(x)["key"] for x in lines[40::3]]
    path.write_text("".join(lines[:40] + [x for i, x in enumerate(lines[40:]) if i % 3]))
    before = len(memory_records(run_dir))
    run(cfg)
    assert set(PixelSpy.ANSWERED) == set(lost)  # only what was lost is asked again
    assert _outputs(run_dir) == clean
    newest = {(m["trajectory_id"], m["session_index"]): m["state_sha256"] for m in memory_records(run_dir)}
    assert len(memory_records(run_dir)) > before and set(newest.values()) == {
        m["state_sha256"] for m in memory_records(spied[0])}  # replayed sessions export the same state


def test_a_streaming_system_from_outside_the_package_runs_through_apm_run(tiny, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    search = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"
    run_dir = run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache",
                              [search, "memory=keyframe_stream", "backbone=my_backbone", "dataset.tasks=[ER,OCR]"]))
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["parse_status"] == "ok" for r in recs)
    assert {r["run"]["memory"] for r in recs} == {"Keyframe Stream (example plug-in)"}
    release = load_release(tiny)
    for r in recs:
        traj = release.trajectory(r["trajectory_id"])
        current = traj.session(f"{r['day_id']}/{r['session_id']}")
        assert r["frames"] and all(traj.session(f["session"]).index <= current.index for f in r["frames"])
        assert max(f["wall_clock"] for f in r["frames"] if f["session"] == current.key) <= r["probe_time"]
    lines = memory_records(run_dir)
    assert all(m["keyframes"] > 0 for m in lines)
    assert_storage_is_on_disk(run_dir)


def test_a_request_that_shows_the_future_or_a_hidden_session_raises(tiny):
    release = load_release(tiny)
    ea = next(i for i in release_instances(release)
              if i.task == "EA" and release.trajectory(i.trajectory_id).session(i.session).index == 3)
    traj = release.trajectory(ea.trajectory_id)
    setup = type("Setup", (), {"settings": None})()
    current = traj.session(ea.session)
    late = Frame(current.key, float(ea.probe_time - current.start + 1), ea.probe_time + 1, b"")
    refusals: list[CausalityError] = []
    with pytest.raises(CausalityError, match="after the probe"):
        compose_request(setup, traj, ea, refusals, History(), (late,))
    hidden = traj.sessions[0]
    assert hidden.key not in ea.visible_sessions
    with pytest.raises(CausalityError, match="not among"):
        compose_request(setup, traj, ea, refusals, History(notes=(Note(hidden, "what happened", hidden.end),)), ())
    assert len(refusals) == 2  # kept for the runner, even if the system catches what it raised


def test_streaming_systems_import_nothing_from_the_runner():
    package = Path(importlib.util.find_spec("apm.streaming").origin).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith(("apm.runner", "apm.reduce", "apm.judge")), path.name


def test_a_session_whose_video_cannot_be_decoded_records_why_and_the_run_goes_on(tiny, tmp_path, monkeypatch):
    import apm.runner.online as replay

    def broken(cache, session, limit):
        if session.key == "DAY1/S002":
            raise VideoDecodeError(session.video, 3.0, "corrupt packet")
        return session_frames(cache, session, limit)

    monkeypatch.setattr(replay, "session_frames", broken)
    recs = records(run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", SPY)))
    failed = [r for r in recs if r["error"]]
    assert failed and {(r["day_id"], r["session_id"]) for r in failed} == {("DAY1", "S002")}
    assert all("cannot decode video at 3.000s: corrupt packet" in r["error"] for r in failed)
    assert not {r["key"] for r in failed} & set(PixelSpy.ANSWERED)  # never asked without its video
    assert len(recs) == release_instance_count(tiny)
