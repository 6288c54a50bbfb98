"""A streaming sweep without a tail (issue 37, item 1): the longest trajectories start first and are served
first, a replay through the backbone holds no slot between its requests, and a trajectory's composed
probes are in flight while its stream goes on — with the records of a one-at-a-time run
(docs/streaming-systems.md, "What the runner does per session")."""

from __future__ import annotations

import itertools
from pathlib import Path

from support.backbones import Overlapping
from support.runner import compose_run, records, run
from support.spies import take
from test_streaming_concurrency import _comparable

from apm.data.release import load_release
from apm.runner.online import longest_first

TESTS = Path(__file__).resolve().parent
EVENTS = [
    f"hydra.searchpath=[file://{TESTS / 'conf'}]",
    "memory=event_memory",
    "backbone._target_=support.backbones.Overlapping",
    "+backbone@writer=random",
    "writer._target_=support.spies.SceneWriter",
    "dataset.tasks=[ER,ERA,RCR,MPA,TPG,EA]",
]


def test_the_longest_trajectories_come_first(tiny):
    trajectories = load_release(tiny).trajectories
    ordered = longest_first(trajectories)
    lengths = [sum(x.duration for x in t.sessions) for t in ordered]
    assert sorted(t.trajectory_id for t in ordered) == sorted(t.trajectory_id for t in trajectories)
    assert lengths == sorted(lengths, reverse=True) and lengths[0] > lengths[-1]


def test_with_one_slot_the_trajectories_take_turns_between_requests(tiny, tmp_path):
    """One slot, three trajectories: no replay holds the slot while it observes frames, so the requests
    of the trajectories interleave instead of running one trajectory after another."""
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*EVENTS, "concurrency=1"]))
    order = list(Overlapping.ORDER)
    switches = sum(1 for _ in itertools.groupby(order)) - 1
    assert len(set(order)) == 3 and switches > 2 * len(set(order))


def test_a_trajectorys_probes_are_in_flight_while_it_streams(tiny, tmp_path):
    """One trajectory: several of its probes were in flight at once (each composed at its time)."""
    run(
        compose_run(
            tiny, tmp_path / "runs", tmp_path / "cache", [*EVENTS, "concurrency=8", "dataset.trajectories=[syn001]"]
        )
    )
    assert take(Overlapping.PEAK)["of_one"] > 1


def test_overlapping_replays_give_the_records_of_a_one_at_a_time_run(tiny, tmp_path):
    one = run(compose_run(tiny, tmp_path / "one", tmp_path / "cache", [*EVENTS, "concurrency=1"]))
    many = run(compose_run(tiny, tmp_path / "many", tmp_path / "cache", [*EVENTS, "concurrency=8"]))
    assert _comparable(many) == _comparable(one) and records(one)
    assert max(r["latency"]["in_flight"] for r in records(many)) > 1


def test_a_memory_protocols_sessions_answer_beside_each_other(tiny, tmp_path):
    """A session's update waits for its instances to read the state, not for their answers: instances of
    two sessions of one trajectory are in flight together (raw video, issue 37 item 2), with the records
    of a one-at-a-time run."""
    protocol = [
        f"hydra.searchpath=[file://{TESTS / 'conf'}]",
        "memory=raw_video",
        "backbone=random",
        "backbone._target_=support.backbones.Overlapping",
        "+backbone.delay_s=0.5",
        "dataset.tasks=[ER,MPA,TPG]",
        "dataset.trajectories=[syn001]",
    ]
    one = run(compose_run(tiny, tmp_path / "one", tmp_path / "cache", [*protocol, "concurrency=1"]))
    take(Overlapping.PEAK)
    many = run(compose_run(tiny, tmp_path / "many", tmp_path / "cache", [*protocol, "concurrency=16"]))
    assert take(Overlapping.PEAK)["sessions_of_one"] > 1
    assert _comparable(many) == _comparable(one) and records(one)


def test_in_latency_mode_a_trajectory_still_replays_alone(tiny, tmp_path):
    """Isolated latency: nothing beside a timed request, so no probe overlaps the stream or another replay."""
    run(compose_run(tiny, tmp_path / "runs", tmp_path / "cache", [*EVENTS, "latency_mode=true"]))
    order = list(Overlapping.ORDER)
    switches = sum(1 for _ in itertools.groupby(order)) - 1
    assert len(set(order)) == 3 and switches <= len(set(order))  # one trajectory after another (and the warm-up)
