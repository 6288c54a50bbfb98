"""Stop early when an endpoint keeps failing the same way: the runner and the judge stage both count
consecutive failures that every later request would repeat (``fail_fast``)."""

from __future__ import annotations

from collections.abc import Callable

from apm.backbones.base import Response

FAIL_FAST_KINDS = frozenset({"auth", "not_found", "connection"})
"""Failures that every later request would repeat: a refused key, an unknown model or path, no server."""


class RunStopped(RuntimeError):
    """The work stopped before it was done, or did nothing useful; the message is one line."""


class FailFast:
    """Counts consecutive :data:`FAIL_FAST_KINDS` failures; at ``limit`` (0: never) the work stops.

    An answer, or any other failure of a request that reached the engine, resets the count; a request
    that never got there (its preparation failed) says nothing about the endpoint and leaves it as it is.
    """

    def __init__(self, limit: int, advice: Callable[[Response], str] | None = None) -> None:
        self.limit = limit
        self.advice = advice or (lambda response: response.error or "")
        self.streak = 0
        self.stopped: RunStopped | None = None
        """The stop, once raised: work that starts after it (answers beside a replay) raises it too."""

    @property
    def tripped(self) -> bool:
        """Whether the limit was reached: work still queued should not start."""
        return bool(self.limit) and self.streak >= self.limit

    def check(self) -> None:
        """Raise the stop, if there was one: called before a request is sent."""
        if self.stopped is not None:
            raise self.stopped

    def observe(self, response: Response) -> None:
        """Count ``response``; raise :class:`RunStopped` when the streak reaches the limit."""
        if response.error_kind in FAIL_FAST_KINDS:
            self.streak += 1
            if self.limit and self.streak >= self.limit:
                self.stopped = self.stopped or RunStopped(
                    f"stopped after {self.streak} consecutive {response.error_kind} failures: {self.advice(response)}")
                raise self.stopped
        elif response.attempts > 0:
            self.streak = 0
