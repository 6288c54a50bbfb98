"""A streaming memory system that lives outside the package: keyframes kept as the stream goes by.

It stands for the paper's specialised systems (docs/streaming-systems.md): the runner feeds it each
session's frames in wall-clock order and asks each probe from its current state; at the session end
it exports its state (one JPEG every ``every_s`` seconds) into its state folder, where ``apm-run``
measures it in bytes. It answers through the run's backbone: earlier sessions' keyframes, the
current session's keyframes and its ``recent`` latest frames.
"""

from __future__ import annotations

from pathlib import Path

from apm.backbones.base import ask
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.records.atomic import write_atomically
from apm.records.declaration import Declaration
from apm.streaming import Answer, Probe, SessionContext, StreamingSystem


class KeyframeStream(StreamingSystem):
    """Keeps one frame every ``every_s`` seconds of each session, plus the ``recent`` latest frames."""

    name = "Keyframe Stream (example plug-in)"
    declaration = Declaration("specialised", streaming=True, persistent=True)

    def __init__(self, every_s: int = 10, recent: int = 2, name: str | None = None):
        super().__init__(name)
        self.every_s, self.recent = every_s, recent

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.earlier: list[Frame] = []
        for s in context.trajectory.sessions[: context.session.index]:
            folder = session_path(context.state_dir, s, ".keyframes")
            for path in sorted(folder.glob("*.jpg"), key=lambda p: int(p.stem)) if folder.exists() else []:
                self.earlier.append(Frame(s.key, float(int(path.stem) - s.start), int(path.stem), path.read_bytes()))
        self.kept: list[Frame] = []
        self.latest: list[Frame] = []

    async def observe_frame(self, frame: Frame) -> None:
        if (frame.wall_clock - self.context.session.start) % self.every_s == 0:
            self.kept.append(frame)
        self.latest = [*self.latest, frame][-self.recent :]

    async def answer(self, probe: Probe) -> Answer:
        visible = set(probe.instance.visible_sessions)
        shown = [f for f in self.earlier if f.session in visible] + self.kept
        shown += [f for f in self.latest if f not in shown]
        request = probe.request(frames=shown)
        return Answer(await ask(self.context.backbone, request, probe.instance), request)

    async def export(self, state_dir: Path) -> dict:
        folder = session_path(state_dir, self.context.session, ".keyframes")
        for frame in self.kept:
            write_atomically(folder / f"{frame.wall_clock}.jpg", frame.jpeg)
        return {"keyframes": len(self.kept)}
