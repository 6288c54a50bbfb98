"""In-process engines run on one worker thread, so ``generate`` never blocks the event loop."""

from __future__ import annotations

import abc
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from apm.backbones.base import Backbone, Request, Response


class WorkerThreadBackbone(Backbone):
    """Loads an engine on a private worker thread and answers requests there, one at a time.

    Subclasses implement ``_load`` (build the engine), ``_unload`` (release it) and ``_generate``
    (answer one request; ``started`` is when the call was made). Exceptions become error responses.
    """

    _executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        """Build the engine on the worker thread."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"apm-{self.name}")
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load)

    async def close(self) -> None:
        """Release the engine and the worker thread."""
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._unload)
            self._executor.shutdown(wait=True)
        self._executor = None

    async def generate(self, request: Request) -> Response:
        """Answer on the worker thread; failures come back in ``Response.error``."""
        if self._executor is None:
            raise RuntimeError(f"backbone {self.name!r} used before start()")
        started = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, self._generate, request, started)
        except Exception as exc:  # recorded, not raised: the run goes on
            return Response(error=f"{type(exc).__name__}: {exc}", elapsed_s=time.perf_counter() - started)

    @abc.abstractmethod
    def _load(self) -> None:
        """Build the engine (runs on the worker thread)."""

    @abc.abstractmethod
    def _unload(self) -> None:
        """Release the engine (runs on the worker thread)."""

    @abc.abstractmethod
    def _generate(self, request: Request, started: float) -> Response:
        """Answer one request (runs on the worker thread)."""
