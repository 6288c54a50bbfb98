"""When a run stops early: consecutive endpoint failures (``fail_fast``), or a job whose every instance
failed. Each stop is one line saying why and what to change, and a non-zero exit of ``apm-run``."""

from __future__ import annotations

from collections.abc import Callable

from apm.backbones.base import Response

FAIL_FAST_KINDS = frozenset({"auth", "not_found", "connection"})
"""Failures that every later request would repeat: a refused key, an unknown model or path, no server."""


class RunStopped(RuntimeError):
    """The run stopped before it was done, or did nothing useful; the message is one line."""


class FailFast:
    """Counts consecutive :data:`FAIL_FAST_KINDS` failures; at ``limit`` (0: never) the run stops.

    An answer, or any other failure of a request that reached the engine, resets the count; a request
    that never got there (its preparation failed) says nothing about the endpoint and leaves it as it is.
    """

    def __init__(self, limit: int, advice: Callable[[Response], str] | None = None) -> None:
        self.limit = limit
        self.advice = advice or (lambda response: response.error or "")
        self.streak = 0

    def observe(self, response: Response) -> None:
        """Count ``response``; raise :class:`RunStopped` when the streak reaches the limit."""
        if response.error_kind in FAIL_FAST_KINDS:
            self.streak += 1
            if self.limit and self.streak >= self.limit:
                raise RunStopped(f"stopped after {self.streak} consecutive {response.error_kind} failures: "
                                 f"{self.advice(response)}")
        elif response.attempts > 0:
            self.streak = 0


def check_answered(new: int, errors: int, first_error: str | None) -> None:
    """A job whose every new instance failed stops with :class:`RunStopped` (its records stay on record)."""
    if new and errors == new:
        raise RunStopped(f"every one of the {new} instances run failed; the first: {first_error}")


def check_causal_run(refused: list[str]) -> None:
    """A run that refused instances for causality stops with :class:`RunStopped` after it ends (their
    records carry the error; a rerun redoes them, so it refuses again until the method is fixed)."""
    if refused:
        raise RunStopped(f"{len(refused)} instances were shown what they may not see (causality), "
                         f"their records refused; the first: {refused[0]}")
