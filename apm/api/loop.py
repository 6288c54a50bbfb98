"""Coroutines run from synchronous code: the API's functions block, in a script and in a notebook alike."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end; where an event loop already runs (a notebook's kernel), on a thread of
    its own, since that loop cannot be entered again. (Not run inside an ``except`` block: the job would
    see that block's exception as its own in ``sys.exc_info()``.)"""
    if not _loop_running():
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _loop_running() -> bool:
    """Whether this thread runs an event loop now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
