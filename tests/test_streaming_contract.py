"""The streaming-system contract through apm-run: causality proved on pixels, independent probes, resume
by replay, latency fields, and a system from outside the package (docs/streaming-systems.md). The
checks are apm-check-system's own (``apm.check.checks``), on the project's spy."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
from support.runner import (
    assert_storage_is_on_disk,
    compose_run,
    memory_records,
    records,
    release_instance_count,
    release_sessions,
    run,
    unsealed,
)
from support.spies import PixelSpy, take

from apm.check import checks
from apm.check.runs import Subject, run_here, spec_of
from apm.data.frames import Frame
from apm.data.instances import release_instances
from apm.data.release import load_release
from apm.memory.base import History, Note
from apm.records.declaration import run_declaration
from apm.records.jsonl import latest_records
from apm.records.select import latest_by
from apm.runner.online import session_frames
from apm.runner.streaming import compose_request
from apm.video.decode import VideoDecodeError
from apm.video.select import CausalityError

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
SPY = [f"hydra.searchpath=[file://{TESTS / 'conf'}]", "memory=pixel_spy", "backbone=random"]


@pytest.fixture(scope="module")
def spied(tiny, tmp_path_factory) -> tuple[Path, dict, list]:
    """One uninterrupted spy run over every instance of the release, observed as apm-check-system observes
    a system; what the spy saw and what the observer logged."""
    root = tmp_path_factory.mktemp("spy")
    spec = spec_of(Subject.of("pixel_spy", [SPY[0], "backbone=random"]), tiny, root / "runs", root / "cache")
    outcome = run_here(spec, root / "observed.log")
    assert outcome.error is None
    keys = unsealed(tiny)  # the spy and the observer are told each instance's opaque id, never its key
    events = [{**e, "key": keys.get(e["key"], e["key"])} if e["event"] == "answer" else e for e in outcome.events]
    return outcome.run_dir, {keys[k]: v for k, v in PixelSpy.ANSWERED.items()}, events


def test_nothing_after_the_probe_is_observed_before_the_answer_on_pixels(tiny, spied):
    run_dir, answered, observed = spied
    release = load_release(tiny)
    instances = release_instances(release)
    assert {i.task for i in instances} >= {"ER", "ERA", "RCR", "MPA", "PRM", "TPG", "EA"}
    assert set(answered) == {i.key for i in instances}
    assert all(answered[i.key]["session"] == i.session for i in instances)
    by_key = {i.key: i for i in instances}
    assert checks.pixel_causality(by_key, observed, latest_records(run_dir / "records")) == []
    assert checks.frame_order(release, observed) == []  # each frame of a session once a pass, in order, one per second
    answers = [e for e in observed if e["event"] == "answer"]
    assert len(answers) == len(by_key) and all(e["last_seen"] == by_key[e["key"]].probe_time for e in answers)


def test_streaming_records_carry_the_update_latency_and_validate(tiny, spied):
    run_dir, _, observed = spied
    recs = records(run_dir)
    for r in recs:
        lat = r["latency"]
        assert lat["ttft_from"] == "last_update" and 0 <= lat["update_s"] <= min(lat["observe_s"], lat["ttft_s"])
        assert lat["rtf"] == pytest.approx((lat["observe_s"] + lat["ttft_s"] - lat["update_s"]) / lat["prefix_s"])
        assert r["output"].startswith("state ")
    lines = memory_records(run_dir)
    assert checks.schema(recs, lines, run_declaration(PixelSpy)) == []  # a plug-in in process: "not sealed"
    assert {tuple(r["run"]["capabilities"].values()) for r in recs} == {(True, True)}
    assert len(lines) == release_sessions(tiny)
    assert all(m["observed"] > 0 and m["observe_s"] > 0 and m["error"] is None for m in lines)
    assert checks.state_bytes(run_dir / "memory_state", lines, observed) == []
    assert_storage_is_on_disk(run_dir)


def test_probes_are_independent_of_which_are_asked(tiny, spied, tmp_path):
    full = latest_records(spied[0] / "records")
    subset = latest_records(run(compose_run(tiny, tmp_path / "a", tmp_path / "cache",
                                            [*SPY, "dataset.tasks=[ER,RCR]"])) / "records")
    assert subset and checks.non_mutating(full, subset) == []
    leaky = [*SPY, "memory._target_=support.spies.LeakySpy"]
    every = latest_records(run(compose_run(tiny, tmp_path / "b", tmp_path / "cache", leaky)) / "records")
    some = latest_records(run(compose_run(tiny, tmp_path / "c", tmp_path / "cache",
                                          [*leaky, "dataset.tasks=[ER,RCR]"])) / "records")
    assert checks.non_mutating(every, some)  # the check catches an answer that writes


def test_lost_records_are_redone_by_replaying_their_session(tiny, spied, tmp_path):
    clean = latest_records(spied[0] / "records")
    cfg = compose_run(tiny, tmp_path / "runs", tmp_path / "cache", SPY)
    run_dir = run(cfg)
    keys = unsealed(tiny)
    assert {keys[k] for k in take(PixelSpy.ANSWERED)} == set(clean)  # the first run asked everything
    (path,) = (run_dir / "records").glob("*.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    lost = [json.loads(x)["key"] for x in lines[40::3]]
    path.write_text("".join(lines[:40] + [x for i, x in enumerate(lines[40:]) if i % 3]))
    before = len(memory_records(run_dir))
    run(cfg)
    assert {keys[k] for k in PixelSpy.ANSWERED} == set(lost)  # only what was lost is asked again
    assert len(memory_records(run_dir)) > before  # replayed sessions export the same state
    newest = list(latest_by(memory_records(run_dir), lambda m: (m["trajectory_id"], m["session_index"])).values())
    assert checks.same_outcome(clean, latest_records(run_dir / "records"), memory_records(spied[0]), newest,
                               "losing records") == []


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
    setup = type("Setup", (), {"settings": None, "opaque": staticmethod(lambda key: f"opaque:{len(key)}")})()
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
    assert all(str(e).startswith(f"{ea.key}: ") for e in refusals)  # the record names the key …
    with pytest.raises(CausalityError) as raised:
        compose_request(setup, traj, ea, refusals, History(), (late,))
    assert ea.key not in str(raised.value) and str(raised.value).startswith(f"opaque:{len(ea.key)}: ")  # … not it


def test_streaming_systems_import_nothing_from_the_runner():
    package = Path(importlib.util.find_spec("apm.streaming").origin).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith(("apm.runner", "apm.reduce", "apm.judge")), path.name


def test_a_session_whose_video_cannot_be_decoded_records_why_and_the_run_goes_on(tiny, tmp_path, monkeypatch):
    import apm.runner.online as replay

    def broken(cache, session, limit, previews=False):
        if session.key == "DAY1/S002":
            raise VideoDecodeError(session.video, 3.0, "corrupt packet")
        return session_frames(cache, session, limit)

    monkeypatch.setattr(replay, "session_frames", broken)
    recs = records(run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", SPY)))
    failed = [r for r in recs if r["error"]]
    assert failed and {(r["day_id"], r["session_id"]) for r in failed} == {("DAY1", "S002")}
    assert all("cannot decode video at 3.000s: corrupt packet" in r["error"] for r in failed)
    assert not {r["key"] for r in failed} & {unsealed(tiny)[k] for k in PixelSpy.ANSWERED}  # never asked unseen
    assert len(recs) == release_instance_count(tiny)
