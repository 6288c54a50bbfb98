"""A deterministic baseline slowed down, so a kill test can stop a run in the middle."""

from __future__ import annotations

import asyncio

from apm.backbones.baselines import RandomBaseline


class SlowRandom(RandomBaseline):
    async def generate(self, request):
        await asyncio.sleep(0.03)
        return await super().generate(request)
