"""Structural and semantic checks of release files, collecting every problem with its place.

Checks, in the order a user would fix them: JSON syntax; shapes (missing or mistyped fields, option
ids); identity (unknown task types, duplicate ids, unknown trajectories or sessions); times (format,
inside their session, windows with start < end); causality (evidence, registrations and questions
released no later than the probe that needs them).
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Mapping

from apm.data import clock
from apm.data.ids import has_control, id_problem
from apm.data.instances import EA_HISTORY_SESSIONS, probe_points
from apm.data.located_json import Path_, format_path, value_lines
from apm.data.model import Candidate, Session, Trajectory
from apm.data.problems import Problems
from apm.data.shapes import CANDIDATE_IDS, TASK_SHAPES, Bool, Choices, Id, List, Obj, OneOf, Shape, Str
from apm.data.tasks import CROSS_SESSION, EA, EA_UNAVAILABLE_OPTION

MAX_DAY = 9999
"""The last day a trajectory may reach (27 years); beyond it a ``DAYn`` is a typo, and past 4,300 digits
Python would not even turn it into a number."""

_TYPE_NAMES = {Str: "a string", Id: "a string", Bool: "true or false", OneOf: "a string", Choices: "a list",
               Obj: "an object", List: "a list"}


class Located:
    """One parsed JSON value and its text (to find the line of any path in it), reporting into ``problems``."""

    def __init__(self, file: str, value: Any, text: str, problems: Problems, base_line: int = 0):
        self.file, self.value, self.text, self.problems, self.base_line = file, value, text, problems, base_line

    @cached_property
    def lines(self) -> dict[Path_, int]:
        """The line of every path, worked out only when a problem needs one (most values have none)."""
        return value_lines(self.text) if "\n" in self.text.strip() else {}

    def line(self, path: Path_) -> int:
        while path not in self.lines and path:
            path = path[:-1]
        return self.base_line + self.lines.get(path, 1)

    def error(self, path: Path_, message: str) -> None:
        self.problems.add(self.file, self.line(path), format_path(path), message)

    def check(self, value: Any, shape: Shape, path: Path_) -> bool:
        """Check ``value`` against ``shape``; report and return False where it does not fit."""
        expected = _TYPE_NAMES[type(shape)]
        if isinstance(shape, (Str, Id, OneOf)) and not isinstance(value, str):
            return self._wrong(path, value, expected)
        if isinstance(shape, Id) and (problem := id_problem(value)):
            self.error(path, problem)
            return False
        if isinstance(shape, Bool) and not isinstance(value, bool):
            return self._wrong(path, value, expected)
        if isinstance(shape, OneOf) and value not in shape.values:
            self.error(path, f"{value!r} is not one of {', '.join(shape.values)}")
            return False
        if isinstance(shape, Obj):
            return self._check_obj(value, shape, path)
        if isinstance(shape, List):
            if not isinstance(value, list):
                return self._wrong(path, value, expected)
            if shape.nonempty and not value:
                self.error(path, "must not be empty")
                return False
            return all([self.check(item, shape.item, path + (i,)) for i, item in enumerate(value)])
        if isinstance(shape, Choices):
            return self._check_choices(value, shape, path)
        return True

    def _wrong(self, path: Path_, value: Any, expected: str) -> bool:
        self.error(path, f"expected {expected}, got {json.dumps(value)[:40]}")
        return False

    def _check_obj(self, value: Any, shape: Obj, path: Path_) -> bool:
        if not isinstance(value, dict):
            return self._wrong(path, value, "an object")
        ok = True
        for name, sub in shape.fields.items():
            if name not in value:
                if not sub.optional:
                    self.error(path + (name,), "missing")
                    ok = False
            elif not (sub.optional and value[name] is None):
                ok = self.check(value[name], sub, path + (name,)) and ok
        return ok

    def _check_choices(self, value: Any, shape: Choices, path: Path_) -> bool:
        if not isinstance(value, list):
            return self._wrong(path, value, "a list")
        ok = True
        seen = []
        for i, choice in enumerate(value):
            if not self._check_obj(choice, Obj({"option_id": Str(), "text": Str()}), path + (i,)):
                ok = False
                continue
            oid = choice["option_id"]
            if oid not in shape.options:
                span = f"{shape.options[0]}-{shape.options[-1]}"
                self.error(path + (i, "option_id"), f"{oid!r} is not an option id ({span})")
                ok = False
            elif oid in seen:
                self.error(path + (i, "option_id"), f"option {oid} appears twice")
                ok = False
            seen.append(oid)
        missing = [o for o in shape.options if o not in seen]
        if ok and missing:
            self.error(path, f"missing option{'s' * (len(missing) > 1)} {', '.join(missing)}")
            ok = False
        return ok


def day_problem(day_id: str) -> str | None:
    """Why a session's ``day_id`` is not ``DAY1`` … ``DAY9999`` (None when it is); :mod:`clock` reads it after."""
    digits = day_id[3:]
    if not (day_id.startswith("DAY") and digits.isascii() and digits.isdigit() and digits[0] != "0"):
        return f"not DAYn: {day_id!r}"
    if len(digits) > len(str(MAX_DAY)) or int(digits) > MAX_DAY:
        return f"day number above {MAX_DAY}: {day_id[:20]!r}"
    return None


def video_link_problem(root: Path, video: str) -> str | None:
    """Why ``root/video`` is not inside the release once its links are followed (None when it is, or is
    not there, or not a relative path: :func:`video_path_problem`): a session video linked out of the
    release is refused, since the release would not hold it."""
    if video_path_problem(video):
        return None
    real = Path(os.path.realpath(root / video))
    if real.is_relative_to(os.path.realpath(root)):
        return None
    return f"{video[:60]!r} is a link to {str(real)[:80]!r}, outside the release; copy the video into the release"


def video_path_problem(video: str) -> str | None:
    """Why ``video`` is not a relative path inside the release (None when it is)."""
    path = PurePosixPath(video)
    if not video or path.is_absolute() or ".." in path.parts or has_control(video):
        return f"{video[:60]!r} is not a relative path inside the release (no '..', no control characters)"
    return None


def session_objects(value: Any, shape: Shape, path: Path_ = ()) -> Iterable[tuple[Path_, dict, Obj]]:
    """Every object inside ``value`` that names a session, with its path and shape."""
    if isinstance(shape, Obj) and isinstance(value, dict):
        if shape.session:
            yield path, value, shape
        for name, sub in shape.fields.items():
            if value.get(name) is not None:
                yield from session_objects(value[name], sub, path + (name,))
    elif isinstance(shape, List) and isinstance(value, list):
        for i, item in enumerate(value):
            yield from session_objects(item, shape.item, path + (i,))


def check_session_times(loc: Located, obj: dict, shape: Obj, path: Path_, traj: Trajectory) -> bool:
    """The session exists; every ``*_time`` is ``HH:MM:SS`` inside it; windows have start < end."""
    key = f"{obj['day_id']}/{obj['session_id']}"
    try:
        session = traj.session(key)
    except KeyError:
        loc.error(path + ("session_id",), f"no session {key} in trajectory {traj.trajectory_id}")
        return False
    ok = True
    times: dict[str, int] = {}
    for name in shape.fields:
        if not name.endswith("_time"):
            continue
        try:
            t = clock.absolute(obj["day_id"], obj[name])
        except clock.ClockError as e:
            loc.error(path + (name,), str(e))
            ok = False
            continue
        times[name] = t
        if not session.contains(t):
            loc.error(path + (name,), f"{obj[name]} is outside session {key} [{_span(session)}]")
            ok = False
    if "start_time" in times and "end_time" in times:
        start, end = times["start_time"], times["end_time"]
        if end < start or (shape.window and end == start):
            loc.error(path + ("start_time",), f"start {obj['start_time']} is not before end {obj['end_time']}")
            ok = False
    return ok


def _span(s: Session) -> str:
    return f"{clock.split(s.start)[1]}, {clock.split(s.end)[1]}"


def check_candidate(loc: Located, task: str, traj: Trajectory) -> None:
    """Shape, sessions and times, then causality of one candidate (``loc.value`` is its object)."""
    raw = loc.value
    shape = Obj(TASK_SHAPES[task])
    if not loc.check(raw, shape, ()):
        return
    if not all([check_session_times(loc, o, s, p, traj) for p, o, s in session_objects(raw, shape)]):
        return
    if "correct_option_id" in raw:
        options = [c["option_id"] for c in raw["choices"]]
        if raw["correct_option_id"] not in options:
            wrong = f"{raw['correct_option_id']!r} is not among the choices {''.join(options)}"
            loc.error(("correct_option_id",), wrong)
    check_causality(loc, Candidate(task, raw["trajectory_id"], raw["candidate_id"], raw), traj)


def check_causality(loc: Located, c: Candidate, traj: Trajectory) -> None:
    """Evidence, registrations and the ERA question are released no later than their probes."""
    f = c.fields
    probes = list(probe_points(c))
    positive = [p for p in probes if p[1] != "negative"]
    evidence_field = "answer_evidence_moments" if c.task == "ERA" else "evidence_moments"
    for i, moment in enumerate(f.get(evidence_field) or []):
        end = clock.absolute(moment["day_id"], moment["end_time"])
        for _, _, _, t, _ in positive:
            if end > t:
                late = f"evidence ends at {clock.label(end)}, after the probe at {clock.label(t)} (causality)"
                loc.error((evidence_field, i, "end_time"), late)
                break
        if c.task in CROSS_SESSION + ("MPA", "TPG", EA):
            ev_session = f"{moment['day_id']}/{moment['session_id']}"
            if c.task != EA and _index(traj, ev_session) >= _index(traj, positive[0][2]):
                same = f"cross-session evidence must come from an earlier session than {positive[0][2]}"
                loc.error((evidence_field, i, "session_id"), same)
    if "registration_event" in f:
        reg = f["registration_event"]
        reg_t = clock.absolute(reg["day_id"], reg["registration_time"])
        reg_session = f"{reg['day_id']}/{reg['session_id']}"
        for _, _, session, t, _ in probes:
            if reg_t > t:
                late = f"registered at {clock.label(reg_t)}, after the probe at {clock.label(t)} (causality)"
                loc.error(("registration_event", "registration_time"), late)
                break
            if c.task == "RCR" and session != reg_session:
                wrong = f"an RCR registration must be in the probe's session {session}"
                loc.error(("registration_event", "session_id"), wrong)
                break
            if c.task == "PRM" and _index(traj, reg_session) >= _index(traj, session):
                wrong = f"a PRM registration must be in a session before {session}"
                loc.error(("registration_event", "session_id"), wrong)
                break
    if c.task == "ERA" and len({p[2] for p in probes}) > 1:
        loc.error(("negative_heartbeats",), "ERA heartbeats must all be in the session whose start releases the "
                                            "question")
    if c.task == EA:
        _check_ea(loc, c, traj)


def _index(traj: Trajectory, key: str) -> int:
    return [s.key for s in traj.sessions].index(key)


def _check_ea(loc: Located, c: Candidate, traj: Trajectory) -> None:
    f = c.fields
    if not f["evidence_available"] and f["correct_option_id"] != EA_UNAVAILABLE_OPTION:
        wrong = f"evidence is unavailable, so the correct option must be {EA_UNAVAILABLE_OPTION}"
        loc.error(("correct_option_id",), wrong)
    query = f"{f['query']['day_id']}/{f['query']['session_id']}"
    q = _index(traj, query)
    accessible = {s.key for s in traj.sessions[max(0, q - EA_HISTORY_SESSIONS) : q]}
    within = all(f"{m['day_id']}/{m['session_id']}" in accessible for m in f["evidence_moments"])
    if f["evidence_moments"] and within != f["evidence_available"]:
        where = f"{'' if within else 'not '}within the {EA_HISTORY_SESSIONS} sessions before {query}"
        loc.error(("evidence_available",), f"is {str(f['evidence_available']).lower()}, but the evidence is {where}")


def check_original(loc: Located, originals: Mapping[str, str]) -> None:
    """An EA candidate's ``original_candidate_id`` (when given) names a candidate of
    ``candidates.jsonl`` (``originals``: id → trajectory id) in the EA candidate's own trajectory."""
    original, trajectory = loc.value.get("original_candidate_id"), loc.value["trajectory_id"]
    if original is None or originals.get(original) == trajectory:
        return
    where = f"of trajectory {originals[original]!r}, not {trajectory!r}" if original in originals else "missing"
    loc.error(("original_candidate_id",), f"names no candidate of candidates.jsonl: {original!r} is {where}")


def check_candidate_ids(loc: Located) -> bool:
    return loc.check(loc.value, Obj(CANDIDATE_IDS), ())

