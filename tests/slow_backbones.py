"""A deterministic baseline slowed down, so a kill test can stop a run in the middle."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path
from typing import ClassVar

from apm.backbones.baselines import RandomBaseline


class SlowRandom(RandomBaseline):
    """The random baseline at 30 ms an answer."""

    async def answer_instance(self, request, instance):
        await asyncio.sleep(0.03)
        return await super().answer_instance(request, instance)


class Overlapping(RandomBaseline):
    """The random baseline at 50 ms an answer, noting whose requests are in flight at once: ``PEAK`` holds
    the most trajectories seen with a request in flight together (``"trajectories"``)."""

    IN_FLIGHT: ClassVar[Counter[str]] = Counter()
    PEAK: ClassVar[dict[str, int]] = {}

    async def answer_instance(self, request, instance):
        flying = Overlapping.IN_FLIGHT
        flying[instance.trajectory_id] += 1
        Overlapping.PEAK["trajectories"] = max(Overlapping.PEAK.get("trajectories", 0), len(+flying))
        try:
            await asyncio.sleep(0.05)
        finally:
            flying[instance.trajectory_id] -= 1
        return await super().answer_instance(request, instance)


class FlakyWriter(RandomBaseline):
    """A summary writer that fails while ``$APM_TEST_WRITER_DOWN`` names an existing file."""

    async def generate(self, request):
        import os
        from pathlib import Path

        from apm.backbones.base import Response

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
