"""Deterministic shards of trajectories, balanced by video duration.

Longest first onto the currently lightest shard (ties: lower shard index; equal durations: by
trajectory id), so every shard's total lies within the longest trajectory's duration of the others.
"""

from __future__ import annotations

from apm.data.model import Trajectory


def assign_shards(trajectories: tuple[Trajectory, ...] | list[Trajectory], count: int) -> list[list[Trajectory]]:
    """All shards: disjoint, complete, each in the release's trajectory order."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    loads = [0] * count
    members: list[list[str]] = [[] for _ in range(count)]
    for t in sorted(trajectories, key=lambda t: (-t.video_seconds, t.trajectory_id)):
        lightest = min(range(count), key=lambda i: (loads[i], i))
        loads[lightest] += t.video_seconds
        members[lightest].append(t.trajectory_id)
    order = {t.trajectory_id: t for t in trajectories}
    return [[order[tid] for tid in order if tid in set(m)] for m in members]


def shard_trajectories(trajectories, index: int, count: int) -> list[Trajectory]:
    """The trajectories of shard ``index`` of ``count``."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is outside 0..{count - 1}")
    return assign_shards(trajectories, count)[index]
