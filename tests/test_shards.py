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
"""Random releases (0–40 trajectories of 1–6 sessions) and shard counts: each property below is one test
that checks every case and names the first that fails, so 300 cases count as one item."""


def test_shards_are_complete_disjoint_and_in_release_order():
    for seed, count in CASES:
        trajs = random_release(seed)
        shards = assign_shards(trajs, count)
        assert len(shards) == count, (seed, count)
        ids = [t.trajectory_id for shard in shards for t in shard]
        assert sorted(ids) == sorted(t.trajectory_id for t in trajs), (seed, count)  # complete, nothing twice
        order = {t.trajectory_id: i for i, t in enumerate(trajs)}
        in_order = all([order[t.trajectory_id] for t in s] == sorted(order[t.trajectory_id] for t in s)
                       for s in shards)
        assert in_order, (seed, count)


def test_shards_are_balanced_within_the_longest_trajectory():
    for seed, count in CASES:
        trajs = random_release(seed)
        loads = [sum(t.video_seconds for t in s) for s in assign_shards(trajs, count)]
        longest = max((t.video_seconds for t in trajs), default=0)
        assert max(loads) - min(loads) <= longest, (seed, count, loads, longest)


def test_shards_do_not_depend_on_input_order_or_process():
    ids = lambda shards: [sorted(t.trajectory_id for t in s) for s in shards]  # noqa: E731
    for seed in range(20):
        trajs = random_release(seed)
        shuffled = trajs[:]
        random.Random(seed).shuffle(shuffled)
        orders = [ids(assign_shards(each, 5)) for each in (trajs, shuffled, list(trajs))]
        assert orders[0] == orders[1] == orders[2], seed


def test_each_index_selects_its_own_shard_and_bad_indices_fail():
    trajs = random_release(3)
    assert [shard_trajectories(trajs, i, 4) for i in range(4)] == assign_shards(trajs, 4)
    for index, count in [(4, 4), (-1, 4), (0, 0)]:
        with pytest.raises(ValueError):
            shard_trajectories(trajs, index, count)
