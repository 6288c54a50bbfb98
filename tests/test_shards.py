"""Shards of trajectories: deterministic, complete, disjoint, balanced by video duration."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from apm.data.model import Session, Trajectory
from apm.runner.shards import assign_shards, shard_trajectories


def trajectory(tid: str, durations: list[int]) -> Trajectory:
    sessions, start = [], 0
    for i, d in enumerate(durations):
        sessions.append(Session(tid, "DAY1", f"S{i:03d}", i, start, start + d, Path(f"videos/{tid}-{i}.mp4")))
        start += d + 60
    return Trajectory(tid, "synthetic", tid, tuple(sessions))


def random_release(seed: int) -> list[Trajectory]:
    rng = random.Random(seed)
    return [trajectory(f"T{seed}-{i:03d}", [rng.randint(1, 3600) for _ in range(rng.randint(1, 6))])
            for i in range(rng.randint(0, 40))]


CASES = [(seed, count) for seed in range(60) for count in (1, 2, 3, 7, 16)]


@pytest.mark.parametrize("seed,count", CASES)
def test_shards_are_complete_disjoint_and_in_release_order(seed, count):
    trajs = random_release(seed)
    shards = assign_shards(trajs, count)
    assert len(shards) == count
    ids = [t.trajectory_id for shard in shards for t in shard]
    assert sorted(ids) == sorted(t.trajectory_id for t in trajs)  # complete, and nothing twice
    order = {t.trajectory_id: i for i, t in enumerate(trajs)}
    assert all([order[t.trajectory_id] for t in s] == sorted(order[t.trajectory_id] for t in s) for s in shards)


@pytest.mark.parametrize("seed,count", CASES)
def test_shards_are_balanced_within_the_longest_trajectory(seed, count):
    trajs = random_release(seed)
    loads = [sum(t.video_seconds for t in s) for s in assign_shards(trajs, count)]
    longest = max((t.video_seconds for t in trajs), default=0)
    assert max(loads) - min(loads) <= longest


@pytest.mark.parametrize("seed", range(20))
def test_shards_do_not_depend_on_input_order_or_process(seed):
    trajs = random_release(seed)
    shuffled = trajs[:]
    random.Random(seed).shuffle(shuffled)
    ids = lambda shards: [sorted(t.trajectory_id for t in s) for s in shards]  # noqa: E731
    assert ids(assign_shards(trajs, 5)) == ids(assign_shards(shuffled, 5)) == ids(assign_shards(list(trajs), 5))


def test_each_index_selects_its_own_shard_and_bad_indices_fail():
    trajs = random_release(3)
    assert [shard_trajectories(trajs, i, 4) for i in range(4)] == assign_shards(trajs, 4)
    for index, count in [(4, 4), (-1, 4), (0, 0)]:
        with pytest.raises(ValueError):
            shard_trajectories(trajs, index, count)
