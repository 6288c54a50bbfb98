"""Typed objects of a loaded release: sessions, trajectories, candidates.

A candidate keeps its annotation exactly as released (``fields``), so the judge and the records see
the paper's field names; the few values every stage needs are lifted out and converted to absolute
seconds (see :mod:`apm.data.clock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


@dataclass(frozen=True)
class Session:
    """One recorded session; ``start``/``end`` are absolute seconds, video offset 0 is ``start``."""

    trajectory_id: str
    day_id: str
    session_id: str
    index: int
    start: int
    end: int
    video: Path

    @property
    def key(self) -> str:
        """``DAY1/S002``: identifies the session within its trajectory."""
        return f"{self.day_id}/{self.session_id}"

    @property
    def duration(self) -> int:
        return self.end - self.start

    def offset(self, abs_second: float) -> float:
        """Video offset (seconds) of an absolute wall-clock time."""
        return abs_second - self.start

    def contains(self, abs_second: float) -> bool:
        return self.start <= abs_second <= self.end


@dataclass(frozen=True)
class Trajectory:
    trajectory_id: str
    source: str
    title: str
    sessions: tuple[Session, ...]

    def session(self, key: str) -> Session:
        for s in self.sessions:
            if s.key == key:
                return s
        raise KeyError(f"{self.trajectory_id}: no session {key}")

    @property
    def video_seconds(self) -> int:
        return sum(s.duration for s in self.sessions)


@dataclass(frozen=True)
class Candidate:
    """One annotated candidate (a line of ``candidates.jsonl`` or ``ea_candidates.jsonl``).

    ``task`` is the paper's task type, or ``EA`` for the Evidence Availability-Aware set.
    ``source`` is ``file:line`` of the annotation.
    """

    task: str
    trajectory_id: str
    candidate_id: str
    fields: Mapping[str, Any]
    source: str = ""


@dataclass(frozen=True)
class Release:
    root: Path
    trajectories: tuple[Trajectory, ...]
    candidates: tuple[Candidate, ...]
    ea_candidates: tuple[Candidate, ...] = field(default=())

    def trajectory(self, trajectory_id: str) -> Trajectory:
        for t in self.trajectories:
            if t.trajectory_id == trajectory_id:
                return t
        raise KeyError(trajectory_id)

    @property
    def all_candidates(self) -> tuple[Candidate, ...]:
        return self.candidates + self.ea_candidates
