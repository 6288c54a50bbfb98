"""Which line wins (docs/records.md, "Which line of a key wins"): one rule, on integers, for every reader.

A key (an instance, a session, a judged probe) may have several lines. Of them the greatest ``revision``
wins, then the greatest ``written_ns``; on a full tie the line read later. Revisions and stamps are compared
as the integers they are on disk (a float64 holds a stamp of today only to ~256 ns, so two lines a
nanosecond apart would tie). The runner's resume, ``apm-judge``, ``apm-status``, ``apm-reduce``,
``apm-publish`` and ``apm-view`` all choose through this module, so they choose the same line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

STAMP = "written_ns"
"""The write stamp on every line: nanoseconds since the epoch, strictly increasing within a process."""
REVISION = "revision"
"""The per-key attempt order on every line: 1 for a key's first line, the superseded line's + 1 after."""

K = TypeVar("K", bound=Hashable)
Order = tuple[int, int]
"""Where a line stands among its key's lines: (revision, write stamp)."""
LineId = tuple[str, str, int, int]
"""(config hash, key, revision, write stamp): a line as the rule tells lines apart; the reducer's chosen row
and the line it came from have the same one."""


def position(value: int | None) -> int:
    """A revision or write stamp as the rule compares it: a line without one (written before it existed) as 0."""
    return 0 if value is None else int(value)


def order_of(line: Mapping[str, Any] | None) -> Order:
    """Where a line stands among its key's lines (:data:`Order`); no line at all stands before any."""
    line = line or {}
    return position(line.get(REVISION)), position(line.get(STAMP))


def revision_of(line: Mapping[str, Any] | None) -> int:
    """A line's revision; 0 for a line written before revisions (or no line at all)."""
    return order_of(line)[0]


def newest(keys: Iterable[K], orders: Iterable[Order]) -> dict[K, int]:
    """The index of the winning line of each key, given each line's key and its :data:`Order`; on a full tie
    the later line."""
    won: dict[K, int] = {}
    best: dict[K, Order] = {}
    for i, (key, order) in enumerate(zip(keys, orders, strict=True)):
        held = best.get(key)
        if held is None or order >= held:
            won[key], best[key] = i, order
    return won


def newest_rows(
    key_codes: np.ndarray, revisions: np.ndarray, stamps: np.ndarray, preferred: np.ndarray | None = None
) -> np.ndarray:
    """The rows (positions, ascending) that win, one per key, of a table's columns: each row's key as an
    integer code, its revision and stamp as integers (a missing one as :func:`position` reads it); with
    ``preferred`` (a judgement of the judge or rubric asked for), a preferred row wins over any other first.
    :func:`newest`'s rule on whole columns: sorted by key, then preference, revision, stamp and position
    (a full tie: the later row), the last row of each key wins."""
    position_of = np.arange(len(key_codes))
    columns = [position_of, stamps, revisions] + ([] if preferred is None else [preferred]) + [key_codes]
    order = np.lexsort(columns)
    ordered = key_codes[order]
    last = np.append(ordered[1:] != ordered[:-1], True) if len(order) else np.zeros(0, dtype=bool)
    return np.sort(order[last])


def latest_by(lines: Iterable[Mapping[str, Any]], key: Callable[[Any], K]) -> dict[K, Any]:
    """The newest line of each key (:func:`newest`)."""
    lines = list(lines)
    return {k: lines[i] for k, i in newest(map(key, lines), map(order_of, lines)).items()}


def line_id(line: Mapping[str, Any]) -> LineId:
    """A line's :data:`LineId` (a line whose run block names no config hash: ``"None"``, as the reducer's)."""
    return (str((line.get("run") or {}).get("config_hash")), str(line.get("key")), *order_of(line))


def row_id(config_hash: Any, key: Any, revision: int | None, stamp: int | None) -> LineId:
    """The :data:`LineId` of a row of a reducer's table: the line it was read from has this one."""
    return str(config_hash), str(key), position(revision), position(stamp)


def line_ids(
    config_hashes: Iterable[Any], keys: Iterable[Any], revisions: Iterable[int | None], stamps: Iterable[int | None]
) -> list[LineId]:
    """The :data:`LineId` of each row of a reducer's table, from its columns."""
    return list(map(row_id, config_hashes, keys, revisions, stamps))
