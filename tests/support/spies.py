"""Spies for tests: the oracle that keeps every request it was sent, a streaming system that reads the
pixel code of every frame it is fed, a leaky variant whose answers change its state (what the
independence test must catch), and systems broken on purpose, one per check of apm-check-system
(tests/test_check_system.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from apm.backbones.base import Request, Response, ask
from apm.backbones.baselines import Oracle, RandomBaseline
from apm.data.frames import Frame
from apm.data.ids import session_path
from apm.data.instances import Instance
from apm.records.atomic import write_atomically
from apm.records.declaration import Declaration
from apm.streaming import Answer, Probe, SessionContext, StreamingSystem
from apm.streaming.base import earlier_states
from apm.synth.render import read_scene
from apm.video.pixelcode import read_code

Log = TypeVar("Log", bound="dict[Any, Any] | list[Any]")

SPY_LOGS: list[dict[Any, Any] | list[Any]] = []
"""Every log a test class keeps on itself (Hydra builds it by ``_target_``; no test holds the instance):
conftest's ``fresh_spies`` empties each around every test. A class-level log is made with :func:`spy_log`."""


def spy_log(empty: Log) -> Log:
    """``empty``, registered on :data:`SPY_LOGS` (so no test clears it by hand)."""
    SPY_LOGS.append(empty)
    return empty


@dataclass(frozen=True)
class SeenRequest(Request):
    """A request as a spy keeps it, beside the instance it asked about (``None``: a summary writer's)."""

    instance: Instance | None = None


class ShownFrames(Oracle):
    """The oracle baseline that also keeps every request it was sent (to inspect the pixels shown), with
    the instance its reference channel was handed (the request itself carries none)."""

    seen: dict[str, Any] = spy_log({})

    def __init__(self, name: str = "Shown Frames Probe", max_frames: int | None = None):
        super().__init__(name=name, max_frames=max_frames)

    async def answer_instance(self, request, instance):
        ShownFrames.seen[instance.key] = SeenRequest(**vars(request), instance=instance)  # the id names no key
        return await super().answer_instance(request, instance)

    async def generate(self, request):
        ShownFrames.seen[request.request_id] = SeenRequest(**vars(request))
        return await super().generate(request)


def take(log: dict[Any, Any]) -> dict[Any, Any]:
    """A spy's log so far, emptied (conftest's ``fresh_spies`` empties every log around each test): each
    run's own, in a test that runs a spy more than once."""
    kept = dict(log)
    log.clear()
    return kept



class PixelSpy(StreamingSystem):
    """Keeps the wall-clock second each observed frame shows on its pixels, and what the user said.

    ``ANSWERED`` maps each instance's opaque id (``support.runner.unsealed`` names its key) to what the spy
    had observed when asked it; its answer names a digest of its whole state (earlier sessions' exports
    and this session so far), so two runs give the same outputs only if every probe saw the same state.
    """

    name = "Pixel Spy (test)"
    declaration = Declaration("specialised", streaming=True, persistent=True)
    ANSWERED: dict[str, dict[str, Any]] = spy_log({})
    FED: dict[tuple[str, str], list[int]] = spy_log({})
    """(trajectory, session) -> every second observed, in order, over all replays of the session."""

    def __init__(self, delay_s: float = 0.0, name: str | None = None):
        super().__init__(name)
        self.delay_s = delay_s
        """How long each answer takes (a kill test stops a run in the middle)."""

    async def begin(self, context: SessionContext) -> None:
        self.context = context
        self.earlier = [kept for _, _, kept in earlier_states(context, ".spy.json")]
        self.seconds: list[int] = []
        self.turns: list[str] = []

    async def observe_frame(self, frame: Frame) -> None:
        shown = read_code(frame.pixels())
        assert shown == frame.wall_clock, (frame, shown)
        self.seconds.append(shown)
        PixelSpy.FED.setdefault((self.context.trajectory.trajectory_id, self.context.session.key), []).append(shown)

    async def observe_turn(self, turn) -> None:
        self.turns.append(f"{turn.time}:{turn.kind}:{turn.candidate_id}")

    def digest(self) -> str:
        """SHA-256 of everything the spy holds now."""
        state = [self.earlier, self.seconds, self.turns]
        return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]

    async def answer(self, probe: Probe) -> Answer:
        await asyncio.sleep(self.delay_s)
        PixelSpy.ANSWERED[probe.instance.key] = {
            "probe_time": probe.instance.probe_time, "session": probe.instance.session,
            "last_seen": max(self.seconds, default=None), "seen": len(self.seconds), "state": self.digest(),
        }
        return Answer(Response(text=f"state {self.digest()}", ttft_s=0.0, total_s=0.0, finish_reason="stop"))

    async def export(self, state_dir: Path) -> dict:
        kept = {"session": self.context.session.key, "seconds": self.seconds, "turns": self.turns}
        write_atomically(session_path(state_dir, self.context.session, ".spy.json"), json.dumps(kept).encode())
        return {"observed": len(self.seconds)}


class LeakySpy(PixelSpy):
    """A spy whose answering writes into its state: later probes see which probes were asked."""

    async def answer(self, probe: Probe) -> Answer:
        self.turns.append(f"asked {probe.instance.key}")
        return await super().answer(probe)


class BackboneSpy(PixelSpy):
    """A spy that answers through the run's backbone, showing the latest frame it observed."""

    through_backbone = True

    async def begin(self, context: SessionContext) -> None:
        await super().begin(context)
        self.latest: Frame | None = None

    async def observe_frame(self, frame: Frame) -> None:
        await super().observe_frame(frame)
        self.latest = frame

    async def answer(self, probe: Probe) -> Answer:
        await super().answer(probe)
        request = probe.request(frames=[self.latest] if self.latest else [])
        return Answer(await ask(self.context.backbone, request, probe.instance), request)


class SceneWriter(RandomBaseline):
    """A writer that describes the frames it is shown from their pixels (the synthetic scene read back):
    real, deterministic text for event descriptions, without a model (configured like ``random``)."""

    async def generate(self, request: Request) -> Response:
        scenes = [read_scene(f.pixels()) for f in request.frames]
        words = [f"{s['action']}, tray with {s['count']} items, "
                 + ", ".join(f"{c} object on the {z}" for z, c in s["zones"].items() if c) for s in scenes]
        text = "; ".join(dict.fromkeys(words))
        return Response(text=text, ttft_s=0.0, total_s=0.0, finish_reason="stop")


class FuturePeeker(PixelSpy):
    """Broken on purpose: claims its answer drew on a frame two seconds after the probe."""

    async def answer(self, probe: Probe) -> Answer:
        answer = await super().answer(probe)
        inst, session = probe.instance, probe.trajectory.session(probe.instance.session)
        ahead = Frame(session.key, float(inst.probe_time - session.start + 2), inst.probe_time + 2, b"")
        return Answer(answer.response, frames=(ahead,))


class DiceSpy(PixelSpy):
    """Broken on purpose: unseeded randomness in every answer, so no rerun gives the same outputs."""

    async def answer(self, probe: Probe) -> Answer:
        answer = await super().answer(probe)
        return Answer(Response(text=f"{answer.response.text} {os.urandom(4).hex()}", ttft_s=0.0, total_s=0.0,
                               finish_reason="stop"))


class HoardingSpy(PixelSpy):
    """Broken on purpose: keeps the first frame of every session it is ever fed in a module global, and
    shows those of the trajectory's earlier sessions with each answer, hidden sessions of EA included."""

    HOARD: dict[tuple[str, str], Frame] = spy_log({})

    async def observe_frame(self, frame: Frame) -> None:
        await super().observe_frame(frame)
        HoardingSpy.HOARD.setdefault((self.context.trajectory.trajectory_id, frame.session), frame)

    async def answer(self, probe: Probe) -> Answer:
        answer = await super().answer(probe)
        earlier = {s.key for s in probe.trajectory.sessions[: probe.trajectory.session(probe.instance.session).index]}
        kept = tuple(f for (tid, key), f in sorted(HoardingSpy.HOARD.items())
                     if tid == probe.trajectory.trajectory_id and key in earlier)
        return Answer(answer.response, frames=kept)


class LitteringSpy(PixelSpy):
    """Broken on purpose: each export also leaves a scratch file under a fixed temporary name, never renamed."""

    async def export(self, state_dir: Path) -> dict:
        facts = await super().export(state_dir)
        (state_dir / f"{self.context.session.session_id}.scratch.tmp").write_bytes(b"x" * 1000)
        return facts


class MisreportingSpy(PixelSpy):
    """Broken on purpose: its export's facts overwrite the memory line's ``update_s`` with text."""

    async def export(self, state_dir: Path) -> dict:
        return {**await super().export(state_dir), "update_s": "instant"}


class CrashingSpy(PixelSpy):
    """Broken on purpose: every answer raises."""

    async def answer(self, probe: Probe) -> Answer:
        raise RuntimeError("no answer today")


class SerialSpy(BackboneSpy):
    """A spy that declares it must replay serially: the run drives one session at a time through it."""

    serial = True


class ChunkSpy(PixelSpy):
    """A spy that works like a chunked KV cache: every ``chunk_frames`` frames an update costs ``encode_s``,
    and an answer between chunk boundaries first encodes the frames still pending (``encode_s`` too).
    ``ALIGNED`` maps each instance key to whether its probe fell on a chunk boundary."""

    ALIGNED: dict[str, bool] = spy_log({})

    def __init__(self, chunk_frames: int = 4, encode_s: float = 0.1, delay_s: float = 0.0, name: str | None = None):
        super().__init__(delay_s, name)
        self.chunk_frames, self.encode_s = chunk_frames, encode_s

    async def begin(self, context: SessionContext) -> None:
        await super().begin(context)
        self.pending = 0

    async def observe_frame(self, frame: Frame) -> None:
        await super().observe_frame(frame)
        self.pending += 1
        if self.pending == self.chunk_frames:
            await asyncio.sleep(self.encode_s)
            self.pending = 0

    async def answer(self, probe: Probe) -> Answer:
        ChunkSpy.ALIGNED[probe.instance.key] = self.pending == 0
        if self.pending:
            await asyncio.sleep(self.encode_s)  # the partial chunk, encoded on a fork: the state stays as it was
        return await super().answer(probe)


class ClockWriter(SceneWriter):
    """A scene writer whose text opens with the seconds its frames show on their pixels (``seen A-B:``),
    and that keeps every request's id and instruction in ``ASKED`` (what a thought was written from)."""

    ASKED: list[tuple[str, str]] = spy_log([])

    async def generate(self, request: Request) -> Response:
        (message,) = request.messages
        ClockWriter.ASKED.append((request.request_id, message.parts[0].text))
        seconds = [read_code(f.pixels()) for f in request.frames]
        scene = await super().generate(request)
        return Response(text=f"seen {min(seconds)}-{max(seconds)}: {scene.text}", ttft_s=0.0, total_s=0.0,
                        finish_reason="stop")
