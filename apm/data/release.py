"""Load an APM-Bench release from disk, validating all of it first (DESIGN.md, "The release format").

``load_release(root)`` returns a :class:`~apm.data.model.Release` or raises
:class:`~apm.data.problems.ReleaseError` listing every problem as ``file:line: field: message``.
It never writes anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from apm.data import clock
from apm.data.ids import fold
from apm.data.located_json import JsonProblem, Path_, decode, parse
from apm.data.model import Candidate, Release, Session, Trajectory
from apm.data.problems import Problems, ReleaseError
from apm.data.shapes import TRAJECTORY, List, Obj
from apm.data.tasks import EA, TASKS
from apm.data.validate import (
    Located,
    check_candidate,
    check_candidate_ids,
    check_original,
    day_problem,
    video_link_problem,
    video_path_problem,
)
from apm.data.videoprobe import video_duration

TRAJECTORIES = "trajectories.json"
CANDIDATES = "candidates.jsonl"
EA_CANDIDATES = "ea_candidates.jsonl"
VIDEO_TOLERANCE_S = 1.0
"""A video may be this much shorter than its session's wall-clock span (frame-rate rounding)."""
Seen = dict[str, tuple[str, Located, Path_]]
"""Ids met so far, by :func:`fold`: the id as written and where."""


def load_release(root: Path | str, check_videos: bool = True) -> Release:
    """Read and validate ``root``; raise ``ReleaseError`` with every problem found."""
    root = Path(root)
    problems = Problems()
    trajectories, refused = _load_trajectories(root, problems, check_videos)
    by_id = {t.trajectory_id: t for t in trajectories}
    originals: dict[str, str] = {}
    candidates = list(_load_candidates(root, CANDIDATES, by_id, refused, problems, originals))
    has_ea = (root / EA_CANDIDATES).exists()
    ea = list(_load_candidates(root, EA_CANDIDATES, by_id, refused, problems, originals)) if has_ea else []
    if problems:
        raise ReleaseError(str(root), problems)
    return Release(root, tuple(trajectories), tuple(candidates), tuple(ea))


def _read_json(root: Path, name: str, problems: Problems) -> Located | None:
    path = root / name
    if not path.is_file():
        problems.add(name, 0, "(file)", "missing")
        return None
    try:
        text = decode(path.read_bytes())
        value = parse(text)
    except JsonProblem as e:
        problems.add(name, e.line, e.field, e.message)
        return None
    return Located(name, value, text, problems)


def _load_trajectories(root: Path, problems: Problems, check_videos: bool) -> tuple[list[Trajectory], set[str]]:
    """The valid trajectories, and the ids of refused ones (whose candidates wait until they are fixed)."""
    loc = _read_json(root, TRAJECTORIES, problems)
    if loc is None or not loc.check(loc.value, List(Obj({})), ()):
        return [], set()
    out: list[Trajectory] = []
    refused: set[str] = set()
    seen: Seen = {}
    for i, raw in enumerate(loc.value):
        tid = raw.get("trajectory_id")
        valid = loc.check(raw, TRAJECTORY, (i,))
        valid = valid and not _repeated(loc, (i, "trajectory_id"), f"trajectory id {tid!r}", tid, seen)
        sessions = _sessions(loc, i, raw, root) if valid else None
        if sessions is None:
            if isinstance(tid, str):
                refused.add(tid)
            continue
        out.append(Trajectory(tid, raw["source"], raw["title"], sessions))
        if check_videos:
            _check_videos(loc, i, raw, sessions)
    return out, refused


def _repeated(loc: Located, path: Path_, what: str, id_: str, seen: Seen) -> bool:
    """Report ``id_`` if an id in ``seen`` names the same file (see :func:`fold`); else remember it."""
    key = fold(id_)
    if key not in seen:
        seen[key] = (id_, loc, path)
        return False
    first, first_loc, first_path = seen[key]
    line = first_loc.line(first_path)
    if first == id_:
        loc.error(path, f"duplicate {what} (first on line {line})")
    else:
        loc.error(path, f"duplicate {what}: the same name as {first!r} (line {line}) to file systems that ignore "
                        "case, Unicode form or trailing dots and spaces")
    return True


def _sessions(loc: Located, i: int, raw: dict[str, Any], root: Path) -> tuple[Session, ...] | None:
    """Sessions in real order (by day, then start time); None if any of them is invalid."""
    parsed: list[tuple[int, int, int, dict]] = []
    seen: Seen = {}
    ok = True
    for j, s in enumerate(raw["sessions"]):
        path = (i, "sessions", j)
        key = f"{s['day_id']}/{s['session_id']}"
        if _repeated(loc, path + ("session_id",), f"session {key} in trajectory {raw['trajectory_id']}", key, seen):
            ok = False
        span = _session_span(loc, path, s)
        if span is None:
            ok = False
            continue
        parsed.append((*span, j, s))
    parsed.sort()
    for (s0, e0, j0, a), (s1, _, j1, b) in zip(parsed, parsed[1:]):
        if s1 < e0:
            overlap = f"session {b['day_id']}/{b['session_id']} overlaps {a['day_id']}/{a['session_id']}"
            loc.error((i, "sessions", j1, "start_time"), overlap)
            ok = False
    for j, s in enumerate(raw["sessions"]):
        if problem := video_link_problem(root, s["video"]):
            loc.error((i, "sessions", j, "video"), problem)
            ok = False
    if not ok:
        return None
    tid = raw["trajectory_id"]
    return tuple(
        Session(tid, s["day_id"], s["session_id"], index, start, end, root / s["video"])
        for index, (start, end, _, s) in enumerate(parsed)
    )


def _session_span(loc: Located, path: Path_, s: dict[str, Any]) -> tuple[int, int] | None:
    """A session's (start, end) in absolute seconds, once its day, times and video path are valid."""
    wrong = {"day_id": day_problem(s["day_id"]), "video": video_path_problem(s["video"])}
    for name, problem in wrong.items():
        if problem:
            loc.error(path + (name,), problem)
    if any(wrong.values()):
        return None
    times = []
    for name in ("start_time", "end_time"):
        try:
            times.append(clock.absolute(s["day_id"], s[name]))
        except clock.ClockError as e:
            loc.error(path + (name,), str(e))
    if len(times) < 2:
        return None
    start, end = times
    if end <= start:
        loc.error(path + ("end_time",), f"{s['end_time']} is not after start_time {s['start_time']}")
        return None
    return start, end


def _jsonl(root: Path, name: str, problems: Problems) -> Iterator[Located]:
    path = root / name
    if not path.is_file():
        problems.add(name, 0, "(file)", "missing")
        return
    for n, data in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not data.strip():
            continue
        try:
            text = decode(data)
            value = parse(text)
        except JsonProblem as e:
            problems.add(name, n, e.field, e.message)
            continue
        if not isinstance(value, dict):
            problems.add(name, n, "(line)", "expected one JSON object per line")
            continue
        yield Located(name, value, text, problems, base_line=n - 1)


def _load_candidates(
    root: Path, name: str, trajectories: dict[str, Trajectory], refused: set[str], problems: Problems,
    originals: dict[str, str],
) -> Iterator[Candidate]:
    """The valid candidates of ``name``. ``candidates.jsonl`` fills ``originals`` (candidate id →
    trajectory id of every line naming both, valid or not: an invalid one is reported at its own line);
    an EA candidate is checked against it for the candidate it was built from."""
    seen: Seen = {}
    for loc in _jsonl(root, name, problems):
        raw = loc.value
        if name == CANDIDATES and all(isinstance(raw.get(k), str) for k in ("candidate_id", "trajectory_id")):
            originals.setdefault(raw["candidate_id"], raw["trajectory_id"])
        task = EA if name == EA_CANDIDATES else raw.get("task_type")
        if task not in TASKS and task != EA:
            loc.error(("task_type",), f"unknown task type {task!r} (expected one of {' '.join(TASKS)})")
            continue
        if not check_candidate_ids(loc):
            continue
        cid, tid = raw["candidate_id"], raw["trajectory_id"]
        if _repeated(loc, ("candidate_id",), f"candidate id {cid!r}", cid, seen):
            continue
        if tid not in trajectories:
            if tid not in refused:  # a refused trajectory's own problems are listed already
                loc.error(("trajectory_id",), f"no trajectory {tid!r} in {TRAJECTORIES}")
            continue
        before = len(problems.items)
        check_candidate(loc, task, trajectories[tid])
        if name == EA_CANDIDATES:
            check_original(loc, originals)
        if len(problems.items) == before:
            yield Candidate(task, tid, cid, raw, f"{name}:{loc.line(())}")


def _check_videos(loc: Located, i: int, raw: dict[str, Any], sessions: tuple[Session, ...]) -> None:
    """Each session's video exists, decodes, and lasts as long as the session."""
    order = {f"{s['day_id']}/{s['session_id']}": j for j, s in enumerate(raw["sessions"])}
    for s in sessions:
        if problem := _video_problem(s):
            loc.error((i, "sessions", order[s.key], "video"), f"video file {s.video} {problem}")


def _video_problem(s: Session) -> str | None:
    """What is wrong with a session's video file (missing, unusable, too short); None if nothing is."""
    try:
        if not s.video.is_file():
            return "is missing"
        duration = video_duration(s.video)
    except OSError as e:  # a name the file system refuses: too long, not permitted
        return f"is unusable: {e.strerror or e}"
    except ValueError as e:
        return f"is unusable: {e}"
    if duration + VIDEO_TOLERANCE_S < s.duration:
        return f"lasts {duration:.1f} s, shorter than its session ({s.duration} s)"
    return None
