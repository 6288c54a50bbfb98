"""A complete child-side system to copy from: keyframes kept as the stream goes by, answered through the
run's backbone. Start it with ``python -m apm_child apm_child.template:KeyframeTemplate``.

State per session: ``<index>_<day>_<session>.keyframes/<wall clock>.jpg``, one frame every ``every_s``
seconds; a probe is shown the visible sessions' keyframes, the current session's and its ``recent``
latest frames.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

from apm_child.system import Answer, Frame, Harness, Probe, Session, System


class KeyframeTemplate(System):
    name = "Keyframe Template (child process)"
    declaration = {"family": "specialised", "streaming": True, "persistent": True, "representation": ""}

    def __init__(self, every_s: int = 10, recent: int = 2) -> None:
        super().__init__(every_s=every_s, recent=recent)
        self.every_s, self.recent = int(every_s), int(recent)

    def begin(self, session: Session, sessions: Tuple[Session, ...], state_dir: str, seed: int,
              harness: Harness) -> None:
        self.session = session
        self.earlier: List[Frame] = []
        for s in sessions[: session.index]:
            folder = os.path.join(state_dir, s.file_stem + ".keyframes")
            names = sorted(os.listdir(folder), key=lambda n: int(n.split(".")[0])) if os.path.isdir(folder) else []
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    at = int(name.split(".")[0])
                    self.earlier.append(Frame(s.key, float(at - s.start), at, f.read()))
        self.kept: List[Frame] = []
        self.latest: List[Frame] = []

    def observe_frame(self, frame: Frame) -> None:
        if (frame.wall_clock - self.session.start) % self.every_s == 0:
            self.kept.append(frame)
        self.latest = (self.latest + [frame])[-self.recent:]

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        visible = set(probe.visible_sessions)
        shown = [f for f in self.earlier if f.session in visible] + self.kept
        shown += [f for f in self.latest if f not in shown]
        return Answer(reply=harness.ask(frames=shown))

    def export(self, state_dir: str) -> Dict[str, Any]:
        folder = os.path.join(state_dir, self.session.file_stem + ".keyframes")
        os.makedirs(folder, exist_ok=True)
        for frame in self.kept:
            path = os.path.join(folder, "%d.jpg" % frame.wall_clock)
            with open(path + ".tmp", "wb") as f:
                f.write(frame.jpeg)
            os.replace(path + ".tmp", path)
        return {"keyframes": len(self.kept)}
