"""The thought-memory reference (VST-like) end to end under apm-run: thoughts written every ``every_s``
seconds from frames up to their time (read back from the pixels), chained, kept as the state measured
on disk, recalled without regard to which probes are asked, never from a session an EA instance may not
see, replayed identically on resume; and on the tiny Qwen2-VL as writer and backbone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.runner import (
    assert_storage_is_on_disk,
    compose_run,
    first_trajectory,
    memory_records,
    records,
    release_instance_count,
    run,
)
from support.spies import ClockWriter, ShownFrames, take

from apm.backbones.base import TextPart
from apm.data import clock
from apm.data.frames import Frame
from apm.data.instances import release_instances
from apm.data.model import Session
from apm.data.release import load_release
from apm.memory.base import History
from apm.records.declaration import Declaration
from apm.runner.context import build_parts
from apm.streaming.thoughts import PREVIOUS, Thought, ThoughtMemory
from apm.video.cache import FrameCache

pytestmark = pytest.mark.slow
THOUGHTS = ["memory=thought_memory", "memory.every_s=7", "backbone=oracle",
            "backbone._target_=support.spies.ShownFrames", "+backbone@writer=random",
            "writer._target_=support.spies.ClockWriter"]
SEEN = re.compile(r"seen (\d+)-(\d+): ")
"""What ClockWriter's text opens with: the first and last second its frames showed on their pixels."""


@pytest.fixture(scope="module")
def thought(tiny, cache, tmp_path_factory) -> tuple[Path, list[tuple[str, str]], dict]:
    """One run over every instance of the release; what the writer was asked and each request shown."""
    run_dir = run(compose_run(tiny, tmp_path_factory.mktemp("full") / "runs", cache, THOUGHTS))
    return run_dir, list(ClockWriter.ASKED), take(ShownFrames.seen)


def _kept(state: Path, session: Session) -> dict:
    return json.loads(next(state.glob(f"*_{session.key.replace('/', '_')}.thoughts.json")).read_text())


def _shown_text(request) -> str:
    return "\n".join(p.text for m in request.messages for p in m.parts if isinstance(p, TextPart))


def test_thoughts_come_every_every_s_seconds_from_frames_up_to_their_time(tiny, cache, thought):
    run_dir, asked, _ = thought
    every, think = 7, ThoughtMemory().think_frames
    recs = records(run_dir)
    assert len(recs) == release_instance_count(tiny) and all(r["error"] is None for r in recs)
    lines = memory_records(run_dir)
    assert all(m["error"] is None and m["thoughts"] > 0 and m["writer_errors"] == 0 for m in lines)
    assert_storage_is_on_disk(run_dir)
    prompts = set(asked)
    previous = None
    for traj in load_release(tiny).trajectories:
        state = run_dir / "memory_state" / traj.trajectory_id
        for session in traj.sessions:
            frames = len(FrameCache(cache).entry(session.video))
            cadence = [session.start + k - 1 for k in range(every, frames + 1, every)]
            tail = [session.start + frames - 1] if frames % every else []
            kept = _kept(state, session)["thoughts"]
            assert [t["time"] for t in kept] == cadence + tail
            for t in kept:
                first, last = map(int, SEEN.match(t["text"]).groups())  # the seconds its frames showed
                assert last == t["time"] and t["time"] - think < first <= last  # the latest frames, none after
                label = Frame(session.key, t["offset"], t["time"], b"").label
                request_id = f"{traj.trajectory_id}/{session.key}/thought@{label}"
                chained = f"{PREVIOUS} {previous}" if previous else None
                assert any(rid == request_id and (chained in text if chained else PREVIOUS not in text)
                           for rid, text in prompts), (request_id, previous)
                previous = t["text"]
        previous = None


def test_every_probe_is_shown_thoughts_formed_by_its_time_under_headers_that_hide_the_future(tiny, thought):
    run_dir, _, shown = thought
    release = load_release(tiny)
    instances = {i.key: i for i in release_instances(release)}
    noted = 0
    for key, request in shown.items():
        inst = instances[key]
        traj = release.trajectory(inst.trajectory_id)
        text = _shown_text(request)
        for first, last in SEEN.findall(text):
            noted += 1
            assert int(last) <= inst.probe_time
            assert any(traj.session(k).start <= int(first) <= int(last) <= traj.session(k).end
                       for k in inst.visible_sessions), (key, first, last)  # EA: never a hidden session's
        current = traj.session(inst.session)
        assert f"{current.key}, {clock.label(current.start)} to {clock.split(current.end)[1]}]" not in text
    assert noted and {i.task for i in instances.values() if SEEN.search(_shown_text(shown[i.key]))} >= {"EA", "ER"}


def test_a_current_session_note_shows_now_not_the_sessions_end(tiny):
    release = load_release(tiny)
    inst = next(i for i in release_instances(release) if i.task == "ER")
    traj = release.trajectory(inst.trajectory_id)
    current = traj.session(inst.session)
    thought = Thought(current, inst.probe_time, inst.probe_time - current.start, "a red mug on the desk")
    (text, *_) = build_parts(traj, inst, History(notes=(thought.note(),)), [])
    header = text.text.splitlines()[1]
    assert header.endswith("to now]") and current.key in header, header


def test_thought_memory_answers_independently_of_the_probes_asked(tiny, cache, thought, tmp_path):
    full = {r["key"]: r["prompt_sha256"] for r in records(thought[0])}
    part = records(run(compose_run(tiny, tmp_path / "b", cache, [*THOUGHTS, "dataset.tasks=[ER,PRM]"])))
    assert part and all(full[r["key"]] == r["prompt_sha256"] for r in part)


def test_the_latest_recall_replays_the_latest_thoughts(tiny, cache, tmp_path):
    take(ShownFrames.seen)
    run_dir = run(compose_run(tiny, tmp_path / "runs", cache, [
        *THOUGHTS, "memory.recall=latest", "memory.top_k=2", "dataset.tasks=[ER,TPG]"]))
    shown = take(ShownFrames.seen)
    release = load_release(tiny)
    instances = {i.key: i for i in release_instances(release)}
    replayed = 0
    for r in records(run_dir):
        inst = instances[r["key"]]
        traj = release.trajectory(inst.trajectory_id)
        current = traj.session(inst.session)
        state = run_dir / "memory_state" / inst.trajectory_id
        earlier = [t["time"] for s in traj.sessions[: current.index] for t in _kept(state, s)["thoughts"]]
        now = [t["time"] for t in _kept(state, current)["thoughts"]  # written by the probe (the tail: at the end)
               if t["time"] <= inst.probe_time and (t["time"] - current.start + 1) % 7 == 0]
        expected = (earlier + now)[-2:]
        replayed += bool(expected)
        assert [int(last) for _, last in SEEN.findall(_shown_text(shown[r["key"]]))] == expected
    assert replayed


def _answered(run_dir: Path) -> dict[str, tuple[str, str, str]]:
    """Each instance's prompt digest (what it was shown), the state it was answered from, and its output."""
    return {r["key"]: (r["prompt_sha256"], r["memory_sha256"], r["output"]) for r in records(run_dir)}


def test_a_lost_record_is_redone_by_replaying_its_session_identically(tiny, cache, thought, tmp_path):
    cfg = compose_run(tiny, tmp_path / "runs", cache, THOUGHTS)
    run_dir = run(cfg)
    (path,) = (run_dir / "records").glob("*.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:30] + [x for i, x in enumerate(lines[30:]) if i % 4]))
    before = len(memory_records(run_dir))
    run(cfg)
    assert len(memory_records(run_dir)) > before  # the lost records' sessions were replayed
    assert _answered(run_dir) == _answered(thought[0])
    states = [{m["state_sha256"] for m in memory_records(d)} for d in (run_dir, thought[0])]
    assert states[0] == states[1]  # the replayed sessions export the same state


def test_thought_memory_on_the_tiny_model_as_writer_and_backbone(tiny, cache, tiny_model, tmp_path):
    one = first_trajectory(tiny, tmp_path / "one")
    run_dir = run(compose_run(one, tmp_path / "runs", cache, [
        "memory=thought_memory", "memory.every_s=15", "memory.max_tokens=8", "backbone=tiny_qwen2vl_hf",
        f"backbone.model={tiny_model}", "generation.max_tokens=6", "dataset.tasks=[ER,RCR]"]))
    recs = records(run_dir)
    assert recs and all(r["error"] is None and r["tokens"]["completion"] > 0 for r in recs)
    lines = memory_records(run_dir)
    assert all(m["error"] is None and m["thoughts"] > 0 for m in lines)
    assert_storage_is_on_disk(run_dir)
    kept = [json.loads(p.read_text()) for p in (run_dir / "memory_state").rglob("*.thoughts.json")]
    thoughts = [t for k in kept for t in k["thoughts"]]
    assert thoughts and all(t["text"] for t in thoughts)  # real (random-weight) text from the transformers path


def test_thought_memory_declares_itself_and_refuses_an_unknown_recall():
    assert ThoughtMemory.declaration == Declaration("specialised", streaming=True, persistent=True,
                                                    tag="reference system", representation="reasoning_thoughts")
    with pytest.raises(ValueError, match="recall must be one of"):
        ThoughtMemory(recall="all")
