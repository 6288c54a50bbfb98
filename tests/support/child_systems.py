"""Systems that run behind the process boundary in the tests (``python -m apm_child
tests/support/child_systems.py:<Class>``): adversaries that try what the seal must stop, and a probe
of what a child is handed. Standard library and ``apm_child`` only, as a system in its own environment."""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Dict, List

from apm_child import Answer, Frame, Harness, Probe, Session, System, Turn


class Peeker(System):
    """Answers from the release's annotations if it can reach them (``peek``: a path it was told, and the
    run folder's ``config.json`` it guesses from its state folder); says what stopped it otherwise."""

    name = "Peeker (test adversary)"

    def begin(self, session: Session, sessions: Any, state_dir: str, seed: int, harness: Harness) -> None:
        self.state_dir = state_dir

    def observe_frame(self, frame: Frame) -> None:
        pass

    def _reach(self, path: str) -> str:
        try:
            with open(path, encoding="utf-8") as f:
                return "read %d bytes of %s" % (len(f.read()), os.path.basename(path))
        except OSError as e:
            return "%s %s" % (type(e).__name__, os.path.basename(path))

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        above = [os.path.join(self.state_dir, *[".."] * n, "config.json") for n in range(1, 5)]
        run_config = next((p for p in above if os.path.exists(p)), "no config.json")
        tried = [self._reach(p) for p in (self.options["peek"], run_config)]
        try:
            socket.create_connection(("127.0.0.1", int(self.options.get("port", 9))), timeout=2).close()
            tried.append("connected")
        except OSError as e:
            tried.append("net %s" % type(e).__name__)
        return Answer(text="; ".join(tried))

    def export(self, state_dir: str) -> Dict[str, Any]:
        return {}


class Hoarder(System):
    """Keeps every frame it is ever fed in a class attribute (shared by every object in its process) and
    answers with the sessions it holds frames of: what it could answer from."""

    name = "Hoarder (test adversary)"
    seen: List[str] = []

    def begin(self, session: Session, sessions: Any, state_dir: str, seed: int, harness: Harness) -> None:
        self.seed = seed

    def observe_frame(self, frame: Frame) -> None:
        if frame.session not in Hoarder.seen:
            Hoarder.seen.append(frame.session)

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        return Answer(text=json.dumps({"held": Hoarder.seen, "id": probe.id, "candidate": probe.candidate,
                                       "fields": sorted(probe.fields), "seed": self.seed, "pid": os.getpid()}))

    def export(self, state_dir: str) -> Dict[str, Any]:
        return {}


class Meddler(System):
    """Shows another conversation's turns, or a frame from after the probe, when asked (``attack``)."""

    name = "Meddler (test adversary)"

    def begin(self, session: Session, sessions: Any, state_dir: str, seed: int, harness: Harness) -> None:
        self.frames: List[Frame] = []
        self.turns: List[Turn] = []

    def observe_frame(self, frame: Frame) -> None:
        self.frames.append(frame)

    def observe_turn(self, turn: Turn) -> None:
        self.turns.append(turn)

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        if self.options["attack"] == "reference":  # a frame by reference that the harness never fed
            late = self.frames[-1]
            harness._call({"call": "ask", "frames": [{"session": late.session, "offset": late.offset + 60,
                                                      "wall_clock": late.wall_clock - 3600}], "notes": [], "turns": []})
        if self.options["attack"] == "future":
            late = self.frames[-1]
            forged = Frame(late.session, late.offset + 60, late.wall_clock + 60, late.jpeg)
            return Answer(reply=harness.ask(frames=[forged]))
        others = [t for t in self.turns if t.candidate != probe.candidate]
        return Answer(reply=harness.ask(frames=self.frames[-1:], turns=others))

    def export(self, state_dir: str) -> Dict[str, Any]:
        return {}


class Crasher(System):
    """Exits in the middle of its first answer."""

    name = "Crasher (test adversary)"

    def begin(self, session: Session, sessions: Any, state_dir: str, seed: int, harness: Harness) -> None:
        pass

    def observe_frame(self, frame: Frame) -> None:
        pass

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        os._exit(3)

    def export(self, state_dir: str) -> Dict[str, Any]:
        return {}
