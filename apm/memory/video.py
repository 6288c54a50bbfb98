"""Raw video as memory: prior-session videos are kept on disk and replayed at query time."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History, MemoryProtocol, SessionView, prior_sessions
from apm.video.select import Span


def _keep(src: Path, dst: Path) -> None:
    """Store a session video in the state folder (a hard link where possible: same bytes on disk)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class RawVideo(MemoryProtocol):
    """Every completed session's video is stored; instances see all earlier sessions in full.

    With ``keep_sessions=k`` only the k most recent completed sessions are kept and shown
    (``restricted``; k = 2 is the Evidence Availability-Aware setting).
    """

    name = "Raw Video as Memory"

    def __init__(self, keep_sessions: int | None = None, name: str | None = None):
        super().__init__(name)
        self.keep_sessions = keep_sessions

    async def end_session(self, view: SessionView, state_dir: Path, writer=None) -> dict:
        session = view.session
        _keep(session.video, state_dir / f"{session.index:04d}_{session.day_id}_{session.session_id}{session.video.suffix}")
        if self.keep_sessions is not None:
            stored = sorted(p for p in state_dir.iterdir() if not p.name.endswith(".tmp"))
            for old in stored[: max(0, len(stored) - self.keep_sessions)]:
                old.unlink()
        return {}

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        prior = prior_sessions(instance, trajectory)
        if self.keep_sessions is not None:
            prior = prior[-self.keep_sessions :] if self.keep_sessions else []
        return History(spans=tuple(Span(s.key, s.start, s.end) for s in prior))
