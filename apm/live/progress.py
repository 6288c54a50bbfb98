"""A job's progress for whoever reads it: a tqdm bar on a terminal; plain lines every ``every_s`` seconds
(done / total, errors, rate, ETA) when the stream is a file or a pipe (a SLURM log), where a bar's ``\\r``
redraws would pile up as one unreadable line."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO

from tqdm import tqdm

Errors = Callable[[], int]
"""How many of the job's instances have failed so far (read when a line or the bar is drawn)."""


class Progress(Protocol):
    """What the runner drives: ``reset`` once the job's instance count is known, ``update`` per instance
    done (or skipped as already on record), ``close`` at the end."""

    def reset(self, total: float | None = None) -> None: ...

    def update(self, n: float | None = 1) -> bool | None: ...

    def close(self) -> None: ...


class LineProgress:
    """Progress as one plain line every ``every_s`` seconds and one at the end; a line's rate (and so its
    ETA) is the one since the previous line, so a resume's burst of skipped instances skews only the
    first; the last line's is the whole job's."""

    def __init__(self, total: int, desc: str, errors: Errors, stream: TextIO, every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.desc, self.errors, self.stream, self.every_s, self.clock = (
            total, desc, errors, stream, every_s, clock)
        self.done = 0
        self.closed = False
        self._start = self._mark = (clock(), 0)

    def reset(self, total: float | None = None) -> None:
        self.total = int(total) if total is not None else self.total
        self.done = 0
        self._start = self._mark = (self.clock(), 0)

    def update(self, n: float | None = 1) -> None:
        self.done += int(n or 0)
        if n and self.clock() - self._mark[0] >= self.every_s:
            self._line()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._mark = self._start  # the last line's rate is the whole job's
            self._line()

    def _line(self) -> None:
        now = self.clock()
        since, done_then = self._mark
        rate = (self.done - done_then) / (now - since) if now > since else 0.0
        left = max(self.total - self.done, 0)
        eta = _clock_time(left / rate) if rate > 0 else ("0:00:00" if left == 0 else "unknown")
        share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        print(f"{self.desc}: {self.done}/{self.total} instances{share}, {self.errors()} errors, "
              f"{rate:.2f} inst/s, ETA {eta}", file=self.stream, flush=True)
        self._mark = (now, self.done)


class BarProgress:
    """tqdm's bar with the job's error count beside it."""

    def __init__(self, total: int, desc: str, errors: Errors, stream: TextIO) -> None:
        self.errors = errors
        self.bar = tqdm(total=total, desc=desc, unit="inst", dynamic_ncols=True, file=stream)

    def reset(self, total: float | None = None) -> None:
        self.bar.reset(total=total)

    def update(self, n: float | None = 1) -> None:
        self.bar.set_postfix(errors=self.errors(), refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


class NoProgress:
    """``logging.progress=false``: nothing drawn."""

    def reset(self, total: float | None = None) -> None:
        pass

    def update(self, n: float | None = 1) -> None:
        pass

    def close(self) -> None:
        pass


def job_progress(total: int, desc: str, errors: Errors, enabled: bool = True, every_s: float = 30.0,
                 stream: TextIO | None = None) -> Progress:
    """The progress a job draws on ``stream`` (default stderr): a bar on a terminal, plain lines every
    ``every_s`` seconds elsewhere, nothing when not ``enabled``."""
    stream = stream if stream is not None else sys.stderr
    if not enabled:
        return NoProgress()
    if stream.isatty():
        return BarProgress(total, desc, errors, stream)
    return LineProgress(total, desc, errors, stream, every_s)


def _clock_time(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
