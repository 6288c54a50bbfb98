"""Wall-clock time as APM-Bench writes it: ``HH:MM:SS`` within a day ``DAYn``.

Every time in the package is an integer *absolute second*: ``(n - 1) * 86400 + HH*3600 + MM*60 + SS``
for ``DAYn``. Absolute seconds order moments across days and keep the real-world gaps between
sessions, which is what the online protocol and Storage/hr need.
"""

from __future__ import annotations

import re
from functools import lru_cache

SECONDS_PER_DAY = 86_400
_HMS = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})")
_DAY = re.compile(r"DAY([1-9][0-9]*)")


class ClockError(ValueError):
    """A day id or a time of day that is not in the release's format."""


def parse_day(day_id: str) -> int:
    """``"DAY3"`` → 3."""
    m = _DAY.fullmatch(day_id) if isinstance(day_id, str) else None
    if not m:
        raise ClockError(f"not DAYn: {day_id!r}")
    return int(m.group(1))


def parse_hms(text: str) -> int:
    """``"11:02:10"`` → seconds since midnight."""
    m = _HMS.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ClockError(f"not HH:MM:SS: {text!r}")
    h, mi, s = (int(g) for g in m.groups())
    if h > 23 or mi > 59 or s > 59:
        raise ClockError(f"not a time of day: {text!r}")
    return h * 3600 + mi * 60 + s


def absolute(day_id: str, hms: str) -> int:
    """The absolute second of ``hms`` on ``day_id``."""
    return (parse_day(day_id) - 1) * SECONDS_PER_DAY + parse_hms(hms)


def format_hms(seconds_of_day: int) -> str:
    """Seconds since midnight → ``HH:MM:SS``."""
    s = int(seconds_of_day) % SECONDS_PER_DAY
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def split(abs_second: int) -> tuple[str, str]:
    """An absolute second → (``DAYn``, ``HH:MM:SS``)."""
    day, sod = divmod(int(abs_second), SECONDS_PER_DAY)
    return f"DAY{day + 1}", format_hms(sod)


@lru_cache(maxsize=2**16)
def label(abs_second: int) -> str:
    """An absolute second as people read it: ``DAY2 14:03:05`` (remembered: a 1,024-frame record labels each
    frame, and its probes' neighbours label the same seconds again)."""
    return " ".join(split(abs_second))
