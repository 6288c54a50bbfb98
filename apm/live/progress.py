"""A job's progress for whoever reads it: a tqdm bar on a terminal; plain lines every ``every_s`` seconds
(done / total, errors, rate, ETA) when the stream is a file or a pipe (a SLURM log), where a bar's ``\\r``
redraws would pile up as one unreadable line. Every long stage draws it (``apm-run``, ``apm-judge``,
``apm-data synth`` and ``cache``, the reducers' load, ``apm-view``, ``apm-publish``); the line period is
``logging.progress_every_s`` for ``apm-run``, ``$APM_PROGRESS_EVERY_S`` (default 30) for the others."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TextIO, TypeVar

from tqdm import tqdm

Errors = Callable[[], int]
"""How many of the job's items have failed so far (read when a line or the bar is drawn)."""
EVERY_S_ENV = "APM_PROGRESS_EVERY_S"
"""Seconds between two plain lines of a stage that has no setting of its own (default 30)."""
T = TypeVar("T")


@dataclass(frozen=True)
class Unit:
    """What a progress counts: its plural in a line (``12/40 videos``) and its short form in a rate."""

    plural: str
    short: str = ""

    @property
    def rate(self) -> str:
        return f"{self.short or self.plural}/s"


INSTANCES = Unit("instances", "inst")


class Progress(Protocol):
    """What a stage drives: ``reset`` once its item count is known (``grow`` as more is found), ``update``
    per item done (or skipped as already on record), ``close`` at the end."""

    def reset(self, total: float | None = None) -> None: ...

    def grow(self, n: int) -> None: ...

    def update(self, n: float | None = 1) -> bool | None: ...

    def close(self) -> None: ...


class LineProgress:
    """Progress as one plain line every ``every_s`` seconds and one at the end (without ``closing_line``:
    only after a periodic one, so a stage quicker than a period stays quiet); a line's rate (and so its
    ETA) is the one since the previous line, so a resume's burst of skipped instances skews only the
    first; the last line's is the whole job's."""

    def __init__(
        self,
        total: int,
        desc: str,
        errors: Errors | None,
        stream: TextIO,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        unit: Unit = INSTANCES,
        closing_line: bool = True,
    ) -> None:
        self.total, self.desc, self.errors, self.stream, self.every_s, self.clock, self.unit = (
            total,
            desc,
            errors,
            stream,
            every_s,
            clock,
            unit,
        )
        self.done = 0
        self.closed = False
        self.drawn = closing_line
        self._start = self._mark = (clock(), 0)

    def reset(self, total: float | None = None) -> None:
        self.total = int(total) if total is not None else self.total
        self.done = 0
        self._start = self._mark = (self.clock(), 0)

    def grow(self, n: int) -> None:
        self.total += n

    def update(self, n: float | None = 1) -> None:
        self.done += int(n or 0)
        if n and self.clock() - self._mark[0] >= self.every_s:
            self._line()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._mark = self._start  # the last line's rate is the whole job's
            if self.drawn:
                self._line()

    def _line(self) -> None:
        now = self.clock()
        since, done_then = self._mark
        rate = (self.done - done_then) / (now - since) if now > since else 0.0
        left = max(self.total - self.done, 0)
        eta = _clock_time(left / rate) if rate > 0 else ("0:00:00" if left == 0 else "unknown")
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        errors = "" if self.errors is None else f", {self.errors()} errors"
        print(
            f"{self.desc}: {self.done}/{self.total} {self.unit.plural}{share}{errors}, "
            f"{_rate(rate)} {self.unit.rate}, ETA {eta}",
            file=self.stream,
            flush=True,
        )
        self._mark = (now, self.done)
        self.drawn = True


class BarProgress:
    """tqdm's bar with the job's error count beside it; an ``inner`` bar (a step of an outer one) is
    drawn below it and cleared when done."""

    def __init__(
        self, total: int, desc: str, errors: Errors | None, stream: TextIO, unit: Unit = INSTANCES, inner: bool = False
    ) -> None:
        self.errors = errors
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit=unit.short or unit.plural,
            dynamic_ncols=True,
            file=stream,
            position=1 if inner else None,
            leave=not inner,
        )

    def reset(self, total: float | None = None) -> None:
        self.bar.reset(total=total)

    def grow(self, n: int) -> None:
        self.bar.total = (self.bar.total or 0) + n
        self.bar.refresh()

    def update(self, n: float | None = 1) -> None:
        if self.errors is not None:
            self.bar.set_postfix(errors=self.errors(), refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


class NoProgress:
    """Progress switched off (``logging.progress=false``): nothing drawn."""

    def reset(self, total: float | None = None) -> None:
        pass

    def grow(self, n: int) -> None:
        pass

    def update(self, n: float | None = 1) -> None:
        pass

    def close(self) -> None:
        pass


def job_progress(
    total: int,
    desc: str,
    errors: Errors | None = None,
    enabled: bool = True,
    every_s: float | None = None,
    stream: TextIO | None = None,
    unit: Unit = INSTANCES,
    inner: bool = False,
    closing_line: bool = True,
) -> Progress:
    """The progress a job draws on ``stream`` (default stderr): a bar on a terminal, plain lines every
    ``every_s`` seconds elsewhere (default :func:`default_every_s`; ``closing_line``: :class:`LineProgress`),
    nothing when not ``enabled``."""
    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return NoProgress()
    if stream.isatty():
        return BarProgress(total, desc, errors, stream, unit, inner)
    every_s = default_every_s() if every_s is None else every_s
    return LineProgress(total, desc, errors, stream, every_s, unit=unit, closing_line=closing_line)


def stage_progress(
    total: int, desc: str, unit: Unit, errors: Errors | None = None, enabled: bool = True, inner: bool = False
) -> Progress:
    """A command's progress through a stage of ``total`` ``unit`` on stderr (:func:`job_progress`), with
    no line at all for a stage quicker than one period (its command's summary says the rest, and a
    refusal stays one line); ``inner``: a step of an outer stage."""
    return job_progress(total, desc, errors, enabled, unit=unit, inner=inner, closing_line=False)


def default_every_s() -> float:
    """Seconds between plain lines: ``$APM_PROGRESS_EVERY_S``, else 30 (an unreadable value: 30)."""
    try:
        return max(0.0, float(os.environ.get(EVERY_S_ENV, "30")))
    except ValueError:
        return 30.0


def counted(items: Iterable[T], progress: Progress) -> Iterator[T]:
    """``items``, each counted done in ``progress`` as it is handed on (the work is making it: a file read)."""
    for item in items:
        progress.update(1)
        yield item


def _rate(per_s: float) -> str:
    """A rate with two decimals, or two significant digits below 0.1 (a trajectory every 220 s: 0.0045)."""
    return f"{per_s:.2f}" if per_s >= 0.1 or per_s == 0 else f"{per_s:.2g}"


def _clock_time(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
