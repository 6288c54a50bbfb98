"""Load an APM-Bench release from disk, validating all of it first (DESIGN.md, "The release format").

``load_release(root)`` returns a :class:`~apm.data.model.Release` or raises
:class:`~apm.data.problems.ReleaseError` listing every problem as ``file:line: field: message``.
It never writes anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from apm.data import clock
from apm.data.jsonlines import value_lines
from apm.data.model import Candidate, Release, Session, Trajectory
from apm.data.problems import Problems, ReleaseError
from apm.data.shapes import TRAJECTORY, List
from apm.data.tasks import EA, TASKS
from apm.data.validate import Located, check_candidate, check_candidate_ids
from apm.data.videoprobe import video_duration

TRAJECTORIES = "trajectories.json"
CANDIDATES = "candidates.jsonl"
EA_CANDIDATES = "ea_candidates.jsonl"
VIDEO_TOLERANCE_S = 1.0
"""A video may be this much shorter than its session's wall-clock span (frame-rate rounding)."""


def load_release(root: Path | str, check_videos: bool = True) -> Release:
    """Read and validate ``root``; raise ``ReleaseError`` with every problem found."""
    root = Path(root)
    problems = Problems()
    trajectories = _load_trajectories(root, problems, check_videos)
    by_id = {t.trajectory_id: t for t in trajectories}
    candidates = list(_load_candidates(root, CANDIDATES, by_id, problems))
    ea = list(_load_candidates(root, EA_CANDIDATES, by_id, problems)) if (root / EA_CANDIDATES).exists() else []
    if problems:
        raise ReleaseError(str(root), problems)
    return Release(root, tuple(trajectories), tuple(candidates), tuple(ea))


def _read_json(root: Path, name: str, problems: Problems) -> Located | None:
    path = root / name
    if not path.is_file():
        problems.add(name, 0, "(file)", "missing")
        return None
    text = path.read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        problems.add(name, e.lineno, "(syntax)", f"malformed JSON: {e.msg} (column {e.colno})")
        return None
    return Located(name, value, value_lines(text), problems)


def _load_trajectories(root: Path, problems: Problems, check_videos: bool) -> list[Trajectory]:
    loc = _read_json(root, TRAJECTORIES, problems)
    if loc is None or not loc.check(loc.value, List(TRAJECTORY), ()):
        return []
    out: list[Trajectory] = []
    seen: set[str] = set()
    for i, raw in enumerate(loc.value):
        tid = raw["trajectory_id"]
        if tid in seen:
            loc.error((i, "trajectory_id"), f"duplicate trajectory id {tid!r}")
            continue
        seen.add(tid)
        sessions = _sessions(loc, i, raw, root)
        if sessions is not None:
            out.append(Trajectory(tid, raw["source"], raw["title"], sessions))
            if check_videos:
                _check_videos(loc, i, raw, sessions)
    return out


def _sessions(loc: Located, i: int, raw: dict[str, Any], root: Path) -> tuple[Session, ...] | None:
    """Sessions in real order (by day, then start time); None if any of them is invalid."""
    parsed: list[tuple[int, int, int, dict]] = []
    keys: set[str] = set()
    ok = True
    for j, s in enumerate(raw["sessions"]):
        path = (i, "sessions", j)
        key = f"{s['day_id']}/{s['session_id']}"
        if key in keys:
            loc.error(path + ("session_id",), f"duplicate session {key} in trajectory {raw['trajectory_id']}")
            ok = False
        keys.add(key)
        try:
            start = clock.absolute(s["day_id"], s["start_time"])
        except clock.ClockError as e:
            loc.error(path + (("day_id",) if "DAY" in str(e) else ("start_time",)), str(e))
            ok = False
            continue
        try:
            end = clock.absolute(s["day_id"], s["end_time"])
        except clock.ClockError as e:
            loc.error(path + ("end_time",), str(e))
            ok = False
            continue
        if end <= start:
            loc.error(path + ("end_time",), f"{s['end_time']} is not after start_time {s['start_time']}")
            ok = False
        parsed.append((start, end, j, s))
    parsed.sort()
    for (s0, e0, j0, a), (s1, _, j1, b) in zip(parsed, parsed[1:]):
        if s1 < e0:
            loc.error((i, "sessions", j1, "start_time"), f"session {b['day_id']}/{b['session_id']} overlaps {a['day_id']}/{a['session_id']}")
            ok = False
    if not ok:
        return None
    tid = raw["trajectory_id"]
    return tuple(
        Session(tid, s["day_id"], s["session_id"], index, start, end, root / s["video"])
        for index, (start, end, _, s) in enumerate(parsed)
    )


def _jsonl(root: Path, name: str, problems: Problems) -> Iterator[Located]:
    path = root / name
    if not path.is_file():
        problems.add(name, 0, "(file)", "missing")
        return
    with path.open(encoding="utf-8") as fh:
        for n, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                problems.add(name, n, "(syntax)", f"malformed JSON: {e.msg} (column {e.colno})")
                continue
            if not isinstance(value, dict):
                problems.add(name, n, "(line)", "expected one JSON object per line")
                continue
            yield Located(name, value, value_lines(text), problems, base_line=n - 1)


def _load_candidates(root: Path, name: str, trajectories: dict[str, Trajectory], problems: Problems) -> Iterator[Candidate]:
    seen: dict[str, int] = {}
    for loc in _jsonl(root, name, problems):
        raw = loc.value
        task = EA if name == EA_CANDIDATES else raw.get("task_type")
        if task not in TASKS and task != EA:
            loc.error(("task_type",), f"unknown task type {task!r} (expected one of {' '.join(TASKS)})")
            continue
        if not check_candidate_ids(loc):
            continue
        cid, tid = raw["candidate_id"], raw["trajectory_id"]
        line = loc.line(())
        if cid in seen:
            loc.error(("candidate_id",), f"duplicate candidate id {cid!r} (first on line {seen[cid]})")
            continue
        seen[cid] = line
        if tid not in trajectories:
            loc.error(("trajectory_id",), f"no trajectory {tid!r} in {TRAJECTORIES}")
            continue
        before = len(problems.items)
        check_candidate(loc, task, trajectories[tid])
        if len(problems.items) == before:
            yield Candidate(task, tid, cid, raw, f"{name}:{line}")


def _check_videos(loc: Located, i: int, raw: dict[str, Any], sessions: tuple[Session, ...]) -> None:
    """Each session's video exists, decodes, and lasts as long as the session."""
    order = {f"{s['day_id']}/{s['session_id']}": j for j, s in enumerate(raw["sessions"])}
    for s in sessions:
        path = (i, "sessions", order[s.key], "video")
        if not s.video.is_file():
            loc.error(path, f"video file {s.video} is missing")
            continue
        try:
            duration = video_duration(s.video)
        except ValueError as e:
            loc.error(path, f"video file {s.video} is unusable: {e}")
            continue
        if duration + VIDEO_TOLERANCE_S < s.duration:
            loc.error(path, f"video file {s.video} lasts {duration:.1f} s, shorter than its session ({s.duration} s)")
