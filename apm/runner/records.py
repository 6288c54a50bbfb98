"""Crash-safe JSONL output: records are appended and flushed as instances finish.

Each writer owns one file (``records/shard-<i>-of-<n>.jsonl``, ``memory/…``). On open, a torn last
line (a crash mid-write) is cut off, so it is redone rather than read. ``done_keys`` reads every
file of the folder, so a rerun skips what is on record whatever shard count produced it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The complete lines of ``path`` as objects; an unterminated or undecodable last line is skipped."""
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            try:
                yield json.loads(raw)
            except json.JSONDecodeError:
                continue


def read_folder(folder: Path) -> Iterator[dict[str, Any]]:
    """Every record of every ``*.jsonl`` in ``folder``, file by file in name order."""
    if folder.is_dir():
        for path in sorted(folder.glob("*.jsonl")):
            yield from read_jsonl(path)


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

    def append(self, obj: dict[str, Any]) -> None:
        """Write one line and hand it to the OS: it survives the process being killed."""
        self._fh.write(json.dumps(obj, ensure_ascii=False).encode() + b"\n")
        self._fh.flush()

    def close(self) -> None:
        """Flush to the disk itself (a machine crash before this may lose lines; they are redone)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()


def latest_records(records_dir: Path) -> dict[str, dict[str, Any]]:
    """The record of each key on record: the last line of a key wins (a rerun supersedes)."""
    return {rec["key"]: rec for rec in read_folder(records_dir)}


def done_keys(records_dir: Path, rerun_errors: bool = False) -> set[str]:
    """Keys already on record; with ``rerun_errors``, keys whose last record is an error are not done."""
    return {k for k, rec in latest_records(records_dir).items() if not (rerun_errors and rec.get("error"))}
