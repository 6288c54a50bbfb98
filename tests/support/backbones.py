"""Backbones for tests: deterministic baselines slowed down, held or failing on cue (so a kill test can
stop a run in the middle), and variants of the pixel perceiver that read a subset of what a request
shows: only the current frames. Where one beats the perceiver, the perceiver is no ceiling (its tag
says so)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import ClassVar

from apm.backbones import perceiver
from apm.backbones.base import Request, Response
from apm.backbones.baselines import Answer, RandomBaseline, intervene
from apm.backbones.perceiver import PixelPerceiver, Shown
from apm.synth.world import PACKING
from support.spies import spy_log


class SlowRandom(RandomBaseline):
    """The random baseline at 30 ms an answer."""

    async def answer_instance(self, request, instance):
        await asyncio.sleep(0.03)
        return await super().answer_instance(request, instance)


class Overlapping(RandomBaseline):
    """The random baseline at ``delay_s`` (50 ms) an answer, noting whose requests are in flight at once: ``PEAK`` holds
    the most trajectories seen with a request in flight together (``"trajectories"``), the most requests
    of one trajectory (``"of_one"``) and the most sessions of one trajectory (``"sessions_of_one"``)."""

    IN_FLIGHT: ClassVar[Counter[str]] = spy_log(Counter())
    PEAK: ClassVar[dict[str, int]] = spy_log({})
    SESSIONS: ClassVar[Counter[tuple[str, str]]] = spy_log(Counter())
    ORDER: ClassVar[list[str]] = spy_log([])
    """The trajectory of each request, in the order they were sent."""

    def __init__(self, *args, delay_s: float = 0.05, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_s = delay_s
        """How long each answer takes."""

    async def answer_instance(self, request, instance):
        flying = Overlapping.IN_FLIGHT
        flying[instance.trajectory_id] += 1
        Overlapping.ORDER.append(instance.trajectory_id)
        Overlapping.PEAK["trajectories"] = max(Overlapping.PEAK.get("trajectories", 0), len(+flying))
        Overlapping.PEAK["of_one"] = max(Overlapping.PEAK.get("of_one", 0), flying[instance.trajectory_id])
        sessions = Overlapping.SESSIONS
        sessions[(instance.trajectory_id, instance.session)] += 1
        of_one = sum(1 for (t, _), n in sessions.items() if t == instance.trajectory_id and n)
        Overlapping.PEAK["sessions_of_one"] = max(Overlapping.PEAK.get("sessions_of_one", 0), of_one)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            flying[instance.trajectory_id] -= 1
            sessions[(instance.trajectory_id, instance.session)] -= 1
        return await super().answer_instance(request, instance)


class FlakyWriter(RandomBaseline):
    """A summary writer that fails while ``$APM_TEST_WRITER_DOWN`` names an existing file."""

    async def generate(self, request):
        if Path(os.environ.get("APM_TEST_WRITER_DOWN", "/nonexistent")).exists():
            return Response(error="HTTP 503: writer unavailable")
        return Response(text='{"memory": "the mug went to the shelf"}', ttft_s=0.0, total_s=0.0)


class HeldWhileFlagged(RandomBaseline):
    """The random baseline, holding each answer while ``$APM_TEST_HOLD`` names an existing file (60 s at
    most): a job that keeps its locks until the test lets it go."""

    async def answer_instance(self, request, instance):
        flag = Path(os.environ.get("APM_TEST_HOLD", "/nonexistent"))
        for _ in range(1200):
            if not flag.exists():
                break
            await asyncio.sleep(0.05)
        return await super().answer_instance(request, instance)


def _tpg_now(s: Shown) -> Answer:
    """TPG from the current frames only: packing the tray now is taken as packing it again."""
    now = s.at(s.now)
    if now is not None and now.action == PACKING:
        return intervene("TPG", "packing the tray", proactive_response="You're packing the tray again.")
    return perceiver.silent("not packing the tray")


def _mpa_now(s: Shown) -> Answer:
    """MPA from the current frames only: an action that has just started is taken as done before."""
    first, _ = perceiver._window(s)
    now = s.at(s.now)
    if now is not None and perceiver._started_in(s, now.action, first):
        return intervene("MPA", f"{now.action} again", proactive_response=f"You're {now.action} again.")
    return perceiver.silent("what I am doing now has not just started")


CURRENT_ONLY = {perceiver._tpg: _tpg_now, perceiver._mpa: _mpa_now}


class CurrentFramesOnly(PixelPerceiver):
    """Answers the inter-session adaptive probes from the current frames alone (a subset of its inputs)."""

    async def generate(self, request: Request) -> Response:
        saved = perceiver.PROBES
        perceiver.PROBES = {name: CURRENT_ONLY.get(probe, probe) for name, probe in saved.items()}
        try:
            return await super().generate(request)
        finally:
            perceiver.PROBES = saved
