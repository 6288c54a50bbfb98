"""The run's request slots (``concurrency``), handed out by priority: while requests wait, the one of the
trajectory with the most work left goes first (docs/streaming-systems.md, "What the runner does per
session"), so the longest replays are never held up behind the short ones and a run ends without a tail.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

from apm.backbones.base import Backbone, Request, Response
from apm.data.instances import Instance

SLOT_WAIT: ContextVar[list[float] | None] = ContextVar("SLOT_WAIT", default=None)
"""Where the requests of one answer note how long each waited for its slot (a probe's latency leaves the
queue out, as a memory protocol's instance does, whose timer starts once it holds its slot)."""


class Slots:
    """``size`` slots; a waiter with a lower ``priority`` is served first, equal priorities in arrival order.
    ``async with slots`` takes one at priority 0."""

    def __init__(self, size: int) -> None:
        self.free = size
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, priority: int = 0) -> None:
        """Take a slot, waiting behind every waiter of a lower ``priority`` (or an equal one that came first)."""
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # granted, then cancelled before it resumed
                self.release()
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter still waiting, else to the pool."""
        while self._waiting:
            granted = heapq.heappop(self._waiting)[2]
            if not granted.done():
                granted.set_result(None)
                return
        self.free += 1

    @asynccontextmanager
    async def taking(self, priority: int) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class SlottedBackbone(Backbone):
    """A backbone as a streaming system's replay hands it out: every request takes one of the run's slots
    at the trajectory's priority while it is sent, so the replay itself holds none between requests."""

    def __init__(self, backbone: Backbone, slots: Slots, priority: int) -> None:
        self.backbone, self.slots, self.priority = backbone, slots, priority
        self.name, self.declaration, self.max_frames = backbone.name, backbone.declaration, backbone.max_frames
        self.guard, self.answers_from_annotations = backbone.guard, backbone.answers_from_annotations

    async def generate(self, request: Request) -> Response:
        async with self._slot():
            return await self.backbone.generate(request)

    async def answer_instance(self, request: Request, view: Instance) -> Response:
        async with self._slot():
            return await self.backbone.answer_instance(request, view)

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """Hold a slot while a request is sent, adding the wait for it to the caller's :data:`SLOT_WAIT`."""
        began = time.perf_counter()
        async with self.slots.taking(self.priority):
            waited = SLOT_WAIT.get()
            if waited is not None:
                waited.append(time.perf_counter() - began)
            yield
