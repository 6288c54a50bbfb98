"""Write a synthetic release: videos, trajectories, candidates, EA candidates and the world script.

The release is built in a hidden sibling directory and renamed into place at the end, so an
interrupted run never leaves a half-written release at ``out``; ``out`` must be new, empty or an
earlier synthetic release (``apm.records.atomic.replaced_output``). Everything is a function of the
seed: the same seed gives byte-identical files.
"""

from __future__ import annotations

import json
import logging
import random
from contextlib import closing
from pathlib import Path
from typing import Iterator

from apm.data import clock
from apm.live.progress import Unit, stage_progress
from apm.records.atomic import replaced_output
from apm.synth.candidates import MinedTrajectory, mine, quota
from apm.synth.render import add_motion, render_state
from apm.synth.world import (
    ACTIONS,
    OBJECT_COLOURS,
    SCALES,
    Scale,
    SessionWorld,
    TrajectoryWorld,
    make_trajectory,
    session_json,
)
from apm.video.encode import H264Writer

log = logging.getLogger(__name__)
PROG = "apm-data synth"
MAX_ATTEMPTS = 200
"""Worlds drawn per trajectory before giving up on one that yields every task."""


def _trajectory(seed: int, index: int, scale: Scale) -> tuple[TrajectoryWorld, MinedTrajectory]:
    """The first world (for this seed and index) whose annotations meet its quota (every task and EA split)."""
    tid = f"syn{index + 1:03d}"
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"apm-synth:{seed}:{index}:{attempt}")
        world = make_trajectory(tid, scale, rng, index)
        mined = mine(world, quota(scale, index), rng)
        if mined is not None:
            return world, mined
    raise RuntimeError(f"no world for trajectory {tid} covers every task after {MAX_ATTEMPTS} attempts")


def write_session_video(path: Path, world: TrajectoryWorld, session: SessionWorld, scale: Scale) -> None:
    """Encode one session, frame by frame: each second rendered once, its frames differing by motion."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with H264Writer(path, scale.width, scale.height, scale.fps) as writer:
        for t, state in enumerate(session.states):
            base = render_state(state, session.start + t, world.objects, scale.width, scale.height)
            for k in range(scale.fps):
                writer.write(add_motion(base, t * scale.fps + k))


def _trajectory_json(world: TrajectoryWorld, index: int) -> dict:
    """The ``trajectories.json`` entry of a trajectory."""
    return {
        "trajectory_id": world.trajectory_id,
        "source": "synthetic",
        "title": f"Synthetic kitchen {index + 1}: {', '.join(world.objects)}",
        "sessions": [
            {
                "day_id": s.day_id,
                "session_id": s.session_id,
                "start_time": clock.split(s.start)[1],
                "end_time": clock.split(s.end)[1],
                "video": f"videos/{world.trajectory_id}/{s.video_name()}",
            }
            for s in world.sessions
        ],
    }


def _jsonl(path: Path, rows: list[dict]) -> None:
    """Write one JSON object per line."""
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def mined_release(seed: int, scale: Scale, n_trajectories: int) -> Iterator[tuple[TrajectoryWorld, MinedTrajectory]]:
    """The worlds and annotations of the release's first ``n_trajectories`` trajectories, in order."""
    for index in range(n_trajectories):
        yield _trajectory(seed, index, scale)


def write_manifests(root: Path, seed: int, scale: Scale, mined: list[tuple[TrajectoryWorld, MinedTrajectory]]) -> None:
    """Write the release's JSON files (trajectories, candidates, EA candidates, world script) under ``root``."""
    candidates = [c for _, m in mined for c in m.candidates]
    ea_candidates = [c for _, m in mined for c in m.ea_candidates]
    proofs = {cid: p for _, m in mined for cid, p in m.proofs.items()}
    trajectories = [_trajectory_json(world, index) for index, (world, _) in enumerate(mined)]
    worlds = [{"trajectory_id": world.trajectory_id, "objects": world.objects,
               "sessions": [session_json(s) for s in world.sessions]} for world, _ in mined]
    (root / "trajectories.json").write_text(json.dumps(trajectories, indent=2) + "\n", encoding="utf-8")
    _jsonl(root / "candidates.jsonl", candidates)
    _jsonl(root / "ea_candidates.jsonl", ea_candidates)
    world_json = {"seed": seed, "scale": scale.name, "width": scale.width, "height": scale.height, "fps": scale.fps,
                  "object_colours": OBJECT_COLOURS, "action_colours": ACTIONS, "trajectories": worlds, "proofs": proofs}
    (root / "synth_world.json").write_text(json.dumps(world_json) + "\n", encoding="utf-8")


def _write_release(root: Path, seed: int, scale: Scale, n_trajectories: int, progress: bool = True) -> None:
    """Write every file of the release under ``root``: each trajectory's videos as it is mined, then the JSON;
    ``progress``: the trajectories, and each one's sessions, on stderr as they are written."""
    mined = []
    with closing(stage_progress(n_trajectories, PROG, Unit("trajectories"), enabled=progress)) as trajectories:
        for world, found in mined_release(seed, scale, n_trajectories):
            with closing(stage_progress(len(world.sessions), f"{PROG}: {world.trajectory_id}", Unit("sessions"),
                                        enabled=progress, inner=True)) as sessions:
                for session in world.sessions:
                    log.info("synth: %s %s/%s", world.trajectory_id, session.day_id, session.session_id)
                    path = root / "videos" / world.trajectory_id / session.video_name()
                    write_session_video(path, world, session, scale)
                    sessions.update(1)
            mined.append((world, found))
            trajectories.update(1)
    write_manifests(root, seed, scale, mined)


def generate(out: Path, seed: int, scale: str, limit_trajectories: int | None = None, progress: bool = True) -> Path:
    """Write a synthetic release of ``scale`` (tiny, small, paper) to ``out``: a new or empty folder, or
    an earlier synthetic release (:func:`apm.records.atomic.claim_output`), replaced whole; ``progress``
    on stderr (:func:`_write_release`)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {', '.join(SCALES)}")
    config = SCALES[scale]
    n = config.trajectories if limit_trajectories is None else max(0, min(limit_trajectories, config.trajectories))
    with replaced_output(out, PROG) as stage:
        _write_release(stage, seed, config, n, progress)
    return Path(out)
