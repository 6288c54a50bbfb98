"""Causality on everything a request shows (docs/memory.md, "Causality"): every frame span, note and turn
carries the time it was formed, and the runner refuses an instance shown anything formed after its probe
or outside its visible sessions — an error on its record and a non-zero exit — for memory protocols and
streaming systems alike; and the current session's header shows its start and the current time only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.runner import compose_run, records, run

from apm.backbones.base import GenerationSettings, TextPart
from apm.data import clock
from apm.data.instances import Turn, release_instances
from apm.data.release import load_release
from apm.memory.base import History, Note
from apm.runner.causality import REFUSED, violations
from apm.runner.context import prepare
from apm.runner.stops import RunStopped
from apm.video.cache import FrameCache
from apm.video.select import Span

TESTS = Path(__file__).resolve().parent


def _adversary_run(tiny: Path, out: Path, target: str, tasks: str = "[ER,OCR,RCR]",
                   extra: tuple[str, ...] = ()) -> tuple[list[dict], RunStopped | None]:
    """Run the adversary ``target`` (tests/support/adversaries.py) with the random baseline; its records and
    how it stopped."""
    cfg = compose_run(tiny, out / "runs", out / "cache",
                      ["memory=none", f"memory._target_=support.adversaries.{target}", "~memory.recent_frames",
                       "backbone=random", f"dataset.tasks={tasks}", *extra])
    stopped = None
    try:
        run(cfg)
    except RunStopped as e:
        stopped = e
    run_dirs = [p.parent for p in (out / "runs").rglob("records")]
    return [r for d in run_dirs for r in records(d)], stopped


@pytest.mark.parametrize("target, why", [
    ("FutureNote", "a note of DAY"),
    ("BackdatedNote", "after the probe time"),
    ("FutureTurn", "a registration turn formed at"),
    ("FutureFrame", "a frame span"),
])
def test_a_protocol_that_shows_the_future_has_every_instance_refused_and_the_run_fails(tiny, tmp_path, monkeypatch,
                                                                                         target, why):
    monkeypatch.syspath_prepend(str(TESTS))
    recs, stopped = _adversary_run(tiny, tmp_path, target)
    assert recs, "the run recorded its instances"
    refused = [r for r in recs if (r["error"] or "").startswith(REFUSED)]
    assert len(refused) == len(recs)  # e.g. the last session's note: seen before it was formed, or hidden
    assert all(why in r["error"] for r in refused), {r["error"] for r in refused}
    assert all(r["output"] == "" and r["attempts"] == 0 for r in refused)  # never asked
    assert stopped is not None and "causality" in str(stopped) and f"{len(refused)} instances" in str(stopped)


def test_a_note_of_a_hidden_session_is_refused_under_ea_only(tiny, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    release = load_release(tiny)
    recs, stopped = _adversary_run(tiny, tmp_path, "FirstSessionNote", tasks="[ER,EA]")
    by_key = {i.key: i for i in release_instances(release)}
    hidden = {r["key"] for r in recs
              if release.trajectory(r["trajectory_id"]).sessions[0].key not in by_key[r["key"]].visible_sessions}
    assert hidden and all(by_key[k].task == "EA" for k in hidden)
    refused = {r["key"] for r in recs if (r["error"] or "").startswith(REFUSED)}
    assert refused == hidden  # the same note is fine for an instance that may see that session
    assert all("not among the visible sessions" in r["error"] for r in recs if r["key"] in refused)
    assert stopped is not None


@pytest.mark.parametrize("show, why", [("note", "a note of DAY"), ("frame", "a frame at")])
def test_a_streaming_system_that_shows_the_future_is_refused_even_when_it_swallows_the_refusal(
        tiny, tmp_path, monkeypatch, show, why):
    monkeypatch.syspath_prepend(str(TESTS))
    recs, stopped = _adversary_run(tiny, tmp_path, "StreamedFuture", extra=(f"+memory.show={show}",))
    assert recs and all((r["error"] or "").startswith(REFUSED) and why in r["error"] for r in recs)
    assert stopped is not None


def test_a_rerun_refuses_again_and_apm_run_exits_non_zero_in_one_line(tiny, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "apm.cli.run", f"dataset.root={tiny}", f"output_root={tmp_path / 'runs'}",
            f"frames.cache_dir={tmp_path / 'cache'}", "logging.wandb.mode=disabled", "logging.progress=false",
            "memory=none", "memory._target_=support.adversaries.FutureTurn", "~memory.recent_frames", "backbone=random",
            "dataset.tasks=[ER]"]
    for _ in range(2):  # the second run redoes the refused records: they are never taken as done
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stderr
        (line,) = [x for x in done.stderr.splitlines() if x.strip()]
        assert line.startswith("apm-run: error: ") and "causality" in line and "Traceback" not in done.stderr
        assert "0 already on record" in done.stdout


def test_an_honest_history_passes_and_each_item_is_checked_by_its_formed_at_time(tiny):
    release = load_release(tiny)
    inst = next(i for i in release_instances(release) if i.task == "ER")
    traj = release.trajectory(inst.trajectory_id)
    earlier = traj.session(inst.visible_sessions[0])
    current = traj.session(inst.session)
    honest = History(spans=(Span(earlier.key, earlier.start, earlier.end),),
                     notes=(Note(earlier, "summary", earlier.end), Note(current, "so far", inst.probe_time)),
                     turns=(Turn("registration", earlier.start, "remind me", inst.candidate_id),))
    assert violations(traj, inst, honest) == []
    between = Turn("registration", earlier.end + 1, "", inst.candidate_id)  # said between two sessions
    assert current.start > earlier.end + 1
    (why,) = violations(traj, inst, History(turns=(between,)))
    assert "outside the visible sessions" in why
    (why,) = violations(traj, inst, History(notes=((earlier, "a note without a time"),)))  # type: ignore[arg-type]
    assert "without the time it was formed" in why


def test_the_current_session_header_shows_its_start_and_now_and_the_request_the_current_time(tiny, tmp_path):
    release = load_release(tiny)
    cache = FrameCache(tmp_path / "cache")
    inst = next(i for i in release_instances(release)
                if i.task == "ER" and i.probe_time < release.trajectory(i.trajectory_id).session(i.session).end)
    traj = release.trajectory(inst.trajectory_id)
    current = traj.session(inst.session)
    prepared = prepare(cache, traj, inst, History(), 8, GenerationSettings())
    text = "\n".join(p.text for m in prepared.request.messages for p in m.parts if isinstance(p, TextPart))
    assert f"[Current session {current.key}, {clock.label(current.start)} to now]" in text
    assert f"[Current time: {clock.label(inst.probe_time)}]" in text
    assert clock.split(current.end)[1] not in text  # the session's end lies after the probe: never shown
