"""A deterministic baseline slowed down, so a kill test can stop a run in the middle."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from apm.backbones.baselines import RandomBaseline


class SlowRandom(RandomBaseline):
    """The random baseline at 30 ms an answer."""

    async def answer_instance(self, request, instance):
        await asyncio.sleep(0.03)
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
