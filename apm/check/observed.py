"""The observer ``apm-check-system`` wraps a streaming system in: it forwards every call to the real
system unchanged and writes what the system was given (the second each frame shows on its pixels, the
sessions each copy was fed, the state folder at each ``begin``) to a log the checks read afterwards."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import uuid
from pathlib import Path
from typing import Any

from apm.data.frames import Frame
from apm.data.instances import Turn
from apm.memory.base import state_files
from apm.records.declaration import declared
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem
from apm.video.pixelcode import read_code

Event = dict[str, Any]
"""One observation: ``event`` (``begin``, ``frame``, ``answer``, ``export``) and what was seen."""

LOG_ENV = "APM_CHECK_LOG"
"""The environment variable naming the observation log: outside the config, so a rerun of a checked
run is the same run (same config hash, same run folder) whatever log it writes to."""


def note(event: str, **fields: Any) -> None:
    """Append one observation to the log ``$APM_CHECK_LOG`` names (nothing when it is unset)."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"event": event, **fields}) + "\n")


def read_log(path: Path) -> list[Event]:
    """The observations of one run, in the order they were made (a torn last line is dropped)."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a run killed mid-write
    return events


class Observed(StreamingSystem):
    """A streaming system seen through the checks: every call goes to ``system`` as the runner made it;
    ``delay_s`` lengthens each answer (so a kill lands mid-session) without changing what it returns."""

    def __init__(self, system: StreamingSystem, delay_s: float = 0.0, name: str | None = None):
        super().__init__(name or system.name)
        self.system, self.delay_s = system, delay_s
        self.__wrapped__ = system
        """The system observed (what the run records as the method: ``apm.records.declaration.run_declaration``)."""
        self.copy: str | None = None
        """Which copy of the system this is (set at its first ``begin``: each EA copy gets its own)."""

    async def begin(self, context: SessionContext) -> None:
        self.copy = self.copy or uuid.uuid4().hex
        self.where = {"copy": self.copy, "trajectory": context.trajectory.trajectory_id,
                      "session": context.session.key}
        self.last_seen: int | None = None
        held = {p.relative_to(context.state_dir).as_posix(): p.stat().st_size for p in state_files(context.state_dir)}
        note("begin", **self.where, state=held)
        await self.system.begin(context)

    async def observe_frame(self, frame: Frame) -> None:
        shown = read_code(frame.pixels())
        self.last_seen = shown
        note("frame", **self.where, shown=shown, wall_clock=frame.wall_clock)
        await self.system.observe_frame(frame)

    async def observe_turn(self, turn: Turn) -> None:
        await self.system.observe_turn(turn)

    async def answer(self, probe: Probe) -> Answer:
        note("answer", **self.where, key=probe.instance.key, last_seen=self.last_seen)
        answer = await self.system.answer(probe)
        await asyncio.sleep(self.delay_s)
        return answer

    async def export(self, state_dir: Path) -> dict[str, Any]:
        facts = await self.system.export(state_dir)
        note("export", **self.where)
        return facts

    async def close(self) -> None:
        await self.system.close()


@functools.cache
def _observer_of(kind: type[StreamingSystem]) -> type[Observed]:
    """``Observed`` declaring what ``kind`` declares (and replayed as serially), so the run records the real
    system's declaration and drives it as it asks."""
    own = {"declaration": kind.declaration, "serial": kind.serial, "needs_writer": kind.needs_writer}
    return type(f"Observed{kind.__name__}", (Observed,), {**own, "__module__": __name__})


def observed(system: StreamingSystem, delay_s: float = 0.0, name: str | None = None) -> Observed:
    """``system`` wrapped for the checks (the ``_target_`` a checked run's memory config names), declaring
    what the system declares (a child system declares per config: ``apm.boundary.ChildSystem``)."""
    wrapper = _observer_of(type(system))(system, delay_s, name)
    if declared(system) != declared(wrapper):
        wrapper.declaration = declared(system)  # type: ignore[misc]  # declared per object, as the system
    return wrapper
