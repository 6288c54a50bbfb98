"""Crash-safe JSONL output: records are appended and flushed as instances finish.

Each writer owns one file (``records/shard-<i>-of-<n>.jsonl``, ``memory/…``). On open, a torn last
line (a crash mid-write) is cut off, so it is redone rather than read. ``done_keys`` reads every
file of the folder, so a rerun skips what is on record whatever shard count produced it.

Every line carries a revision (``revision``: one more than the line of its key it supersedes) and a
write stamp (``written_ns``); where a key has several lines, the greatest revision wins, the stamp
only breaks ties (:mod:`apm.records.select`), whichever file holds it — file names say nothing about order, and
no machine's clock can outvote a line written after another was read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apm.records.lines import CHECKS, Kind, Skipped, read_lines
from apm.records.model import Written, line_of
from apm.records.redact import may_redact_json, redact_data
from apm.records.select import REVISION, STAMP, latest_by, revision_of

log = logging.getLogger(__name__)

_stamp_lock = threading.Lock()
_last_stamp = 0


def write_stamp() -> int:
    """A fresh stamp: ``time.time_ns()``, or one more than the last if the clock has not moved on."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(_last_stamp + 1, time.time_ns())
        return _last_stamp


def read_jsonl(path: Path, kind: Kind = "any", as_written: bool = False) -> Iterator[dict[str, Any]]:
    """The usable ``kind`` lines of ``path`` (:func:`apm.records.lines.read_lines`, ``as_written`` as there):
    a torn last line is a write in progress and passes silently; any other unusable line is logged, never
    raised."""
    skipped: list[Skipped] = []
    yield from read_lines(path, kind, skipped, as_written)
    bad = [s for s in skipped if not s.reason.startswith("unterminated")]
    if bad:
        log.warning("%s: skipped %d unusable line(s); first: %s", path, len(bad), bad[0])


def read_folder(folder: Path, kind: Kind | None = None, as_written: bool = False) -> Iterator[dict[str, Any]]:
    """Every usable line of every ``*.jsonl`` in ``folder``, file by file in name order; ``kind``
    defaults to the folder's name (``records``, ``memory``, ``judgements``); ``as_written`` as
    :func:`apm.records.lines.read_lines` takes it."""
    if folder.is_dir():
        checked: Kind = kind or (folder.name if folder.name in CHECKS else "any")
        for path in sorted(folder.glob("*.jsonl")):
            yield from read_jsonl(path, checked, as_written)


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
        return self._write({**obj, REVISION: revision_of(supersedes) + 1, STAMP: write_stamp()})

    def _write(self, line: dict[str, Any]) -> dict[str, Any]:
        """Write one line, secrets masked (apm.records.redact: they never reach a line), and flush it."""
        text = json.dumps(line, ensure_ascii=False)
        if may_redact_json(text):  # else masking changes no string: no walk (~10 ms for a 1,024-frame record)
            line = redact_data(line)
            text = json.dumps(line, ensure_ascii=False)
        self._fh.write(text.encode() + b"\n")
        self._fh.flush()
        return line

    def append_line(self, model: type[Written], fields: dict[str, Any], supersedes: dict[str, Any] | None = None,
                    ) -> dict[str, Any]:
        """:meth:`append` for a line of a line model: built as the ``model`` object with its revision and
        stamp and written from it (:func:`apm.records.model.line_of`: what the model refuses is never written)."""
        order = {REVISION: revision_of(supersedes) + 1, STAMP: write_stamp()}
        return self._write(line_of(model, {**fields, **order}))

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
