"""Protocols without written memory: SimpleStream (``none``) and the annotation ``oracle`` control."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from apm.data import clock
from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History, MemoryProtocol
from apm.prompts import turn_text
from apm.records.declaration import Declaration
from apm.video.select import Span


class SimpleStream(MemoryProtocol):
    """No memory: only the ``recent_frames`` most recent frames of the current session (paper: 4)."""

    name = "SimpleStream"
    declaration = Declaration("baseline", streaming=False, persistent=False)

    def __init__(self, recent_frames: int = 4, name: str | None = None):
        super().__init__(name)
        self.recent_frames = recent_frames

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        return History(current="recent", recent_frames=self.recent_frames)


class OracleEvidence(MemoryProtocol):
    """Appendix B.6 control: only the annotated evidence before the cutoff (and an earlier-session
    registration), plus the current prefix.

    It reads the annotations, so it is a control, never a method; it keeps no persistent state.
    """

    name = "Oracle Evidence"
    declaration = Declaration("reference", streaming=False, persistent=False, tag="oracle-evidence control")

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        fields = instance.candidate.fields
        moments = list(fields.get("evidence_moments") or []) + list(fields.get("answer_evidence_moments") or [])
        visible = set(instance.visible_sessions[:-1])
        spans = []
        for m in moments:
            key = f"{m['day_id']}/{m['session_id']}"
            if key not in visible:
                continue
            start = clock.absolute(m["day_id"], m["start_time"])
            end = min(clock.absolute(m["day_id"], m["end_time"]), instance.probe_time)
            spans.append(Span(key, start, end))
        spans.sort(key=lambda s: (s.start, s.end))
        current_start = trajectory.session(instance.session).start
        earlier = tuple(replace(t, text=turn_text(t, instance)) for t in instance.turns if t.time < current_start)
        return History(spans=tuple(spans), turns=earlier)
