"""Crash-safe JSONL output: records are appended and flushed as instances finish.

Each writer owns one file (``records/shard-<i>-of-<n>.jsonl``, ``memory/…``). On open, a torn last
line (a crash mid-write) is cut off, so it is redone rather than read. ``done_keys`` reads every
file of the folder, so a rerun skips what is on record whatever shard count produced it.

Every line carries a revision (``revision``: one more than the line of its key it supersedes) and a
write stamp (``written_ns``); where a key has several lines, the greatest revision wins, the stamp
only breaks ties (``latest_by``), whichever file holds it — file names say nothing about order, and
no machine's clock can outvote a line written after another was read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from apm.records.lines import CHECKS, Kind, Skipped, read_lines
from apm.records.redact import redact_data

log = logging.getLogger(__name__)

STAMP = "written_ns"
"""The write stamp on every line: nanoseconds since the epoch, strictly increasing within a process."""
REVISION = "revision"
"""The per-key attempt order on every line: 1 for a key's first line, the superseded line's + 1 after."""

K = TypeVar("K", bound=Hashable)
_stamp_lock = threading.Lock()
_last_stamp = 0


def write_stamp() -> int:
    """A fresh stamp: ``time.time_ns()``, or one more than the last if the clock has not moved on."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(_last_stamp + 1, time.time_ns())
        return _last_stamp


def stamp_of(line: dict[str, Any]) -> int:
    """A line's write stamp; -1 for a line written before stamps (older than any stamped line)."""
    stamp = line.get(STAMP)
    return -1 if stamp is None else int(stamp)


def revision_of(line: dict[str, Any] | None) -> int:
    """A line's revision; 0 for a line written before revisions (or no line at all)."""
    revision = (line or {}).get(REVISION)
    return 0 if revision is None else int(revision)


def order_of(line: dict[str, Any]) -> tuple[int, int]:
    """Where a line stands among its key's lines: its revision first, its write stamp only on a tie."""
    return revision_of(line), stamp_of(line)


def latest_by(lines: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], K]) -> dict[K, dict[str, Any]]:
    """The newest line of each key: greatest revision, then greatest stamp; on a full tie the later line read."""
    latest: dict[K, dict[str, Any]] = {}
    for line in lines:
        k = key(line)
        held = latest.get(k)
        if held is None or order_of(line) >= order_of(held):
            latest[k] = line
    return latest


def read_jsonl(path: Path, kind: Kind = "any") -> Iterator[dict[str, Any]]:
    """The usable ``kind`` lines of ``path`` (:func:`apm.records.lines.read_lines`): a torn last line
    is a write in progress and passes silently; any other unusable line is logged, never raised."""
    skipped: list[Skipped] = []
    yield from read_lines(path, kind, skipped)
    bad = [s for s in skipped if not s.reason.startswith("unterminated")]
    if bad:
        log.warning("%s: skipped %d unusable line(s); first: %s", path, len(bad), bad[0])


def read_folder(folder: Path, kind: Kind | None = None) -> Iterator[dict[str, Any]]:
    """Every usable line of every ``*.jsonl`` in ``folder``, file by file in name order; ``kind``
    defaults to the folder's name (``records``, ``memory``, ``judgements``)."""
    if folder.is_dir():
        checked: Kind = kind or (folder.name if folder.name in CHECKS else "any")
        for path in sorted(folder.glob("*.jsonl")):
            yield from read_jsonl(path, checked)


class JsonlAppender:
    """Append objects to one JSONL file, one flushed line each."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._cut_torn_tail()
        self._fh = path.open("ab")

    def _cut_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            with self.path.open("r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def append(self, obj: dict[str, Any], supersedes: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write ``obj`` as one line, with the revision after ``supersedes`` (the newest line of its key
        this writer read; ``None``: the key's first) and a fresh write stamp, and hand it to the OS (it
        survives the process being killed); returns the line written, secrets masked (``obj`` is left
        as it was)."""
        order = {REVISION: revision_of(supersedes) + 1, STAMP: write_stamp()}
        line = redact_data({**obj, **order})  # secrets never reach a line (apm.records.redact)
        self._fh.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")
        self._fh.flush()
        return line

    def close(self) -> None:
        """Flush to the disk itself (a machine crash before this may lose lines; they are redone)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


def latest_records(records_dir: Path) -> dict[str, dict[str, Any]]:
    """The record of each key on record: its newest line wins (``latest_by``: a rerun supersedes)."""
    return latest_by(read_folder(records_dir), lambda rec: rec["key"])


def done_keys(records_dir: Path, rerun_errors: bool = False) -> set[str]:
    """Keys already on record; with ``rerun_errors``, keys whose last record is an error are not done."""
    return {k for k, rec in latest_records(records_dir).items() if not (rerun_errors and rec.get("error"))}
