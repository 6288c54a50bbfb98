"""A memory protocol that lives outside the package: sparse keyframes of every completed session.

It stands for the specialised systems of the paper (visual tokens / features, KV caches, event trees,
parametric or reasoning-thought memories): whatever a system keeps goes into its state folder, where
``apm-run`` measures it in bytes after every session, and ``history`` says what an instance is shown.
Here the state is one JPEG every ``every_s`` seconds; an instance is shown those keyframes of the
completed sessions it may see, then its current causal prefix (added by the runner).
"""

from __future__ import annotations

from pathlib import Path

from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History, MemoryProtocol, SessionView, prior_sessions
from apm.records.declaration import Declaration
from apm.video.select import Span


class KeyframeMemory(MemoryProtocol):
    """Keeps one frame every ``every_s`` seconds of each completed session."""

    name = "Keyframe Memory (example plug-in)"
    declaration = Declaration("general", streaming=False, persistent=True)
    session_frames = 1 << 20  # every cached frame of the session; we keep a few

    def __init__(self, every_s: int = 10, name: str | None = None):
        super().__init__(name)
        self.every_s = every_s

    async def end_session(self, view: SessionView, state_dir: Path, writer=None) -> dict:
        folder = state_dir / view.session.key.replace("/", "_")
        folder.mkdir(parents=True, exist_ok=True)
        kept = [f for f in view.frames if (f.wall_clock - view.session.start) % self.every_s == 0]
        for frame in kept:
            (folder / f"{frame.wall_clock}.jpg").write_bytes(frame.jpeg)
        return {"keyframes": len(kept)}

    def history(self, instance: Instance, trajectory: Trajectory, state_dir: Path) -> History:
        spans = []
        for session in prior_sessions(instance, trajectory):
            folder = state_dir / session.key.replace("/", "_")
            seconds = sorted(int(p.stem) for p in folder.glob("*.jpg")) if folder.exists() else []
            spans += [Span(session.key, t, t) for t in seconds]
        return History(spans=tuple(spans))
