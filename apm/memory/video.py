"""Raw video as memory: prior-session videos are kept on disk and replayed at query time.

What the user said during a session (registrations, ERA questions) is not in its video; it is kept
beside it as ``<stem>.turns.json``, each turn with the candidate it belongs to, and an instance is
shown only its own candidate's turns: every probe is an independent instance (Section 3.3).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from apm.data.ids import session_path
from apm.data.instances import Instance, Turn
from apm.data.model import Session, Trajectory
from apm.memory.base import History, MemoryProtocol, SessionView, prior_sessions
from apm.records.atomic import temp_name, write_atomically
from apm.records.declaration import Declaration
from apm.video.select import Span


def _keep(src: Path, dst: Path) -> None:
    """Store a session video in the state folder (a hard link where possible: same bytes on disk)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(dst)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)  # rename() keeps both names when they already link one file


def _stored(state_dir: Path, session: Session) -> Path | None:
    """The session's stored video, which replay reads; None (the release's copy) only while it is not
    stored yet — when a preflight or ``print_request`` plans requests before the run has kept it."""
    path = session_path(state_dir, session, session.video.suffix)
    return path if path.exists() else None


class RawVideo(MemoryProtocol):
    """Every completed session's video is stored; instances see all earlier sessions in full, read
    from the stored copies (what is measured is what is replayed).

    With ``keep_sessions=k`` only the k most recent completed sessions are kept and shown
    (``restricted``; k = 2 is the Evidence Availability-Aware setting).
    """

    name = "Raw Video as Memory"
    declaration = Declaration("general", streaming=False, persistent=True)

    def __init__(self, keep_sessions: int | None = None, name: str | None = None):
        super().__init__(name)
        self.keep_sessions = keep_sessions

    async def end_session(self, view: SessionView, state_dir: Path, writer=None) -> dict:
        session = view.session
        _keep(session.video, session_path(state_dir, session, session.video.suffix))
        if view.interactions:
            turns = [{"kind": t.kind, "time": t.time, "text": t.text, "candidate_id": t.candidate_id}
                     for t in view.interactions]
            turns_json = json.dumps(turns, ensure_ascii=False).encode()
            write_atomically(session_path(state_dir, session, ".turns.json"), turns_json)
        if self.keep_sessions is not None:
            stems = sorted({p.name.split(".")[0] for p in state_dir.iterdir() if not p.name.endswith(".tmp")})
            for old in stems[: max(0, len(stems) - self.keep_sessions)]:
                for path in state_dir.glob(f"{old}.*"):
                    path.unlink(missing_ok=True)  # another writer of this session may have been first
        return {}

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        prior = prior_sessions(instance, trajectory)
        if self.keep_sessions is not None:
            prior = prior[-self.keep_sessions :] if self.keep_sessions else []
        turns = []
        for s in prior:
            log = session_path(state_dir, s, ".turns.json")
            if log.exists():
                turns += [Turn(t["kind"], t["time"], t["text"], t["candidate_id"])
                          for t in json.loads(log.read_text()) if t.get("candidate_id") == instance.candidate_id]
        return History(spans=tuple(Span(s.key, s.start, s.end, _stored(state_dir, s)) for s in prior),
                       turns=tuple(turns))
