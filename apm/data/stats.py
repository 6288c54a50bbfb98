"""Summary statistics of a release: the shapes of the paper's Figure 4 and Section 3."""

from __future__ import annotations

from collections import Counter
from typing import Any

from apm.data.instances import release_instances
from apm.data.model import Release
from apm.data.tasks import EA, TASKS


def release_stats(release: Release) -> dict[str, Any]:
    """Counts and durations a researcher checks before running anything."""
    trajs = release.trajectories
    sessions = [s for t in trajs for s in t.sessions]
    spans = [t.sessions[-1].end - t.sessions[0].start for t in trajs]
    instances = release_instances(release)
    per_task = Counter(c.task for c in release.candidates)
    return {
        "trajectories": len(trajs),
        "sessions": len(sessions),
        "sessions_per_trajectory": len(sessions) / max(len(trajs), 1),
        "video_hours": sum(s.duration for s in sessions) / 3600,
        "mean_session_minutes": sum(s.duration for s in sessions) / max(len(sessions), 1) / 60,
        "mean_trajectory_video_minutes": sum(t.video_seconds for t in trajs) / max(len(trajs), 1) / 60,
        "mean_real_world_span_hours": sum(spans) / max(len(spans), 1) / 3600,
        "max_real_world_span_hours": max(spans, default=0) / 3600,
        "candidates": len(release.candidates),
        "candidates_per_task": {task: per_task.get(task, 0) for task in TASKS},
        "instances": len(instances),
        "instances_per_family": dict(sorted(Counter(i.family for i in instances).items())),
        "instances_per_task_polarity": {
            f"{task}/{pol}": n
            for (task, pol), n in sorted(Counter((i.task, i.polarity or "none") for i in instances).items())
        },
        "ea_candidates": {
            "evidence_available": sum(1 for c in release.ea_candidates if c.fields["evidence_available"]),
            "evidence_unavailable": sum(1 for c in release.ea_candidates if not c.fields["evidence_available"]),
        },
        "ea_instances": sum(1 for i in instances if i.task == EA),
    }


def format_stats(stats: dict[str, Any]) -> str:
    """Human-readable form of :func:`release_stats`."""
    lines = []
    for key, value in stats.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k:<24} {v}" for k, v in value.items()]
        elif isinstance(value, float):
            lines.append(f"{key:<32} {value:.2f}")
        else:
            lines.append(f"{key:<32} {value}")
    return "\n".join(lines)
