"""Causal frame selection, proved on pixels of the synthetic release (each frame shows its wall-clock second)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.runner import pixel_second

from apm.data.instances import Instance, release_instances
from apm.data.model import Release
from apm.data.release import load_release
from apm.synth import generate
from apm.video.cache import FrameCache
from apm.video.select import (
    CausalityError,
    Span,
    prefix_frames,
    raw_video_frames,
    raw_video_spans,
    recent_frames,
    select_frames,
    uniform_indices,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Release, list[Instance], FrameCache]:
    root = tmp_path_factory.mktemp("synth")
    release = load_release(generate(root / "rel", seed=0, scale="tiny"))
    return release, release_instances(release), FrameCache(root / "cache")


@pytest.mark.parametrize(("n", "k"), [(10, 3), (1000, 1024), (5000, 1024), (7, 1), (7, 2), (128, 127), (3, 0)])
def test_uniform_indices(n: int, k: int) -> None:
    picked = uniform_indices(n, k)
    assert len(picked) == min(n, k) and picked == sorted(set(picked))
    if k:
        assert picked[-1] == n - 1 and (k == 1 or picked[0] == 0)
    assert uniform_indices(n, k) == picked  # deterministic


def test_no_frame_after_the_probe_on_pixels(world: tuple[Release, list[Instance], FrameCache]) -> None:
    release, instances, cache = world
    assert len({i.task for i in instances}) >= 10
    for inst in instances:
        traj = release.trajectory(inst.trajectory_id)
        for frames in (
            raw_video_frames(cache, traj, inst, max_frames=12),
            prefix_frames(cache, traj, inst, max_frames=6),
        ):
            seconds = [pixel_second(f) for f in frames]
            assert seconds == [f.wall_clock for f in frames], inst.key
            assert max(seconds) == inst.probe_time, inst.key  # inclusive of the probe second, never after
            assert {f.session for f in frames} <= set(inst.visible_sessions)


def test_simplestream_sees_exactly_the_four_latest_seconds(world: tuple[Release, list[Instance], FrameCache]) -> None:
    release, instances, cache = world
    assert any(i.probe_time - 3 < release.trajectory(i.trajectory_id).session(i.session).start for i in instances)
    for inst in instances:
        traj = release.trajectory(inst.trajectory_id)
        frames = recent_frames(cache, traj, inst)
        expected = list(range(max(traj.session(inst.session).start, inst.probe_time - 3), inst.probe_time + 1))
        assert [pixel_second(f) for f in frames] == expected, inst.key
        assert {f.session for f in frames} == {inst.session}


def test_raw_video_replays_every_visible_second_up_to_the_cap(
    world: tuple[Release, list[Instance], FrameCache],
) -> None:
    release, instances, cache = world
    inst = max(instances, key=lambda i: (len(i.visible_sessions), i.probe_time))
    traj = release.trajectory(inst.trajectory_id)
    every = raw_video_frames(cache, traj, inst, max_frames=1024)
    total = sum(s.duration for s in (traj.session(k) for k in inst.visible_sessions[:-1]))
    assert total < len(every) <= 1024
    assert [(f.session, f.offset) for f in every] == sorted((f.session, f.offset) for f in every)
    assert all(f.wall_clock == traj.session(f.session).start + int(f.offset) for f in every)
    few = raw_video_frames(cache, traj, inst, max_frames=10)
    assert len(few) == 10 and few[0] == every[0] and few[-1] == every[-1]


def test_ea_history_is_restricted(world: tuple[Release, list[Instance], FrameCache]) -> None:
    release, instances, cache = world
    inst = next(
        i
        for i in instances
        if i.task == "EA"
        and len(i.visible_sessions) < 1 + [s.key for s in release.trajectory(i.trajectory_id).sessions].index(i.session)
    )
    traj = release.trajectory(inst.trajectory_id)
    assert {s.session for s in raw_video_spans(traj, inst)} == set(inst.visible_sessions)
    assert {f.session for f in raw_video_frames(cache, traj, inst)} == set(inst.visible_sessions)


def test_spans_that_break_causality_raise(world: tuple[Release, list[Instance], FrameCache]) -> None:
    release, instances, cache = world
    inst = next(i for i in instances if i.visible_sessions[0] != i.session)
    traj = release.trajectory(inst.trajectory_id)
    current = traj.session(inst.session)
    later = [s for s in traj.sessions if s.index > current.index]
    with pytest.raises(CausalityError, match="after the probe"):
        select_frames(cache, traj, inst, [Span(current.key, current.start, inst.probe_time + 1)])
    if later:
        with pytest.raises(CausalityError, match="not among"):
            select_frames(cache, traj, inst, [Span(later[0].key, later[0].start, later[0].start)])
    oldest = traj.session(inst.visible_sessions[0])
    with pytest.raises(CausalityError, match="not among"):  # e.g. a protocol ignoring the EA restriction
        select_frames(
            cache, traj, replace(inst, visible_sessions=(inst.session,)), [Span(oldest.key, oldest.start, oldest.end)]
        )
    with pytest.raises(ValueError, match="not within session"):
        select_frames(cache, traj, inst, [Span(current.key, current.start - 5, current.start)])
    with pytest.raises(ValueError, match="not both"):
        select_frames(cache, traj, inst, [], max_frames=4, recent=4)


def test_overlapping_spans_count_each_second_once(world: tuple[Release, list[Instance], FrameCache]) -> None:
    release, instances, cache = world
    inst = instances[-1]
    traj = release.trajectory(inst.trajectory_id)
    start = traj.session(inst.session).start
    frames = select_frames(
        cache, traj, inst, [Span(inst.session, start, start + 5), Span(inst.session, start + 3, start + 8)]
    )
    assert [pixel_second(f) for f in frames] == list(range(start, start + 9))
