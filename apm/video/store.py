"""The on-disk format of one frame-cache entry: each frame's JPEG and preview, a fixed-width index, a
checked footer.

Layout (all integers little-endian; exact rules in ``docs/video.md``)::

    "APMFRAME" | u32 header length | header (UTF-8 JSON, holds the key) | JPEG, preview, JPEG, preview ...
    | index: count x (u64 JPEG offset, u32 length, u64 preview offset, u32 length)
    | footer: u64 index offset, u64 count, u32 crc32, "APMFEND1"

The crc32 covers every byte before the footer. A file is written under a temporary name in the
same folder and renamed over the final name, so a reader sees a complete entry or none.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any, Iterable, Sequence

from apm.records.atomic import temp_name

MAGIC = b"APMFRAME"
END_MAGIC = b"APMFEND1"
_HEADER_LEN = struct.Struct("<I")
_INDEX_ROW = struct.Struct("<QIQI")
_FOOTER = struct.Struct("<QQI8s")


class CorruptEntryError(ValueError):
    """A cache file that is truncated, altered or written for another key: never read, rebuild it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: invalid frame-cache entry: {reason}")
        self.path = path
        self.reason = reason


Sample = tuple[bytes, bytes]
"""One frame as an entry stores it: its JPEG and its preview's bytes (:meth:`apm.data.frames.Preview.to_bytes`;
empty when it has none)."""


def write_entry(path: Path, header: dict[str, Any], samples: Iterable[Sample]) -> int:
    """Write an entry atomically (temp file + fsync + rename); returns the number of frames.

    A sample that is the very same object as the previous one (a repeated frame) is stored once.
    If ``samples`` raises, no file is left behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)  # not mkstemp: its 0600 would hide a shared cache from the group
    try:
        with tmp.open("xb") as f:
            crc = _Crc(f)
            head = json.dumps(header, sort_keys=True).encode()
            crc.write(MAGIC + _HEADER_LEN.pack(len(head)) + head)
            index = bytearray()
            previous: Sample | None = None
            for sample in samples:
                if sample is not previous:
                    jpeg, preview = sample
                    row = _INDEX_ROW.pack(crc.written, len(jpeg), crc.written + len(jpeg), len(preview))
                    crc.write(jpeg)
                    crc.write(preview)
                    previous = sample
                index += row
            index_pos = crc.written
            crc.write(bytes(index))
            count = len(index) // _INDEX_ROW.size
            f.write(_FOOTER.pack(index_pos, count, crc.value, END_MAGIC))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


class _Crc:
    """A file writer that keeps a running crc32 and byte count of what it wrote."""

    def __init__(self, f: Any) -> None:
        self.f, self.value, self.written = f, 0, 0

    def write(self, data: bytes) -> None:
        self.f.write(data)
        self.value = zlib.crc32(data, self.value)
        self.written += len(data)


class EntryFile:
    """A validated entry: its header and index in memory; JPEGs and previews read from disk on demand, O(1) each."""

    def __init__(self, path: Path, header: dict[str, Any], rows: Sequence[tuple[int, int, int, int]],
                 stat: os.stat_result):
        self.path = path
        self.header = header
        self._rows = rows
        self._identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    @classmethod
    def open(cls, path: Path, key: str) -> EntryFile:
        """Read and validate ``path`` (size, magics, crc32, index bounds, key); CorruptEntryError if not valid."""
        with open(path, "rb") as f:
            data = f.read()
            stat = os.fstat(f.fileno())
        if len(data) < len(MAGIC) + _HEADER_LEN.size + _FOOTER.size:
            raise CorruptEntryError(path, f"{len(data)} bytes: too short")
        index_pos, count, crc, end = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
        body = memoryview(data)[: len(data) - _FOOTER.size]
        if data[: len(MAGIC)] != MAGIC or end != END_MAGIC:
            raise CorruptEntryError(path, "bad magic (not an entry, or truncated)")
        if index_pos + count * _INDEX_ROW.size != len(body):
            raise CorruptEntryError(path, "index does not end at the footer (truncated?)")
        if zlib.crc32(body) != crc:
            raise CorruptEntryError(path, "checksum mismatch")
        (head_len,) = _HEADER_LEN.unpack_from(data, len(MAGIC))
        data_start = len(MAGIC) + _HEADER_LEN.size + head_len
        header = json.loads(bytes(body[len(MAGIC) + _HEADER_LEN.size : data_start]))
        if header.get("key") != key:
            raise CorruptEntryError(path, f"written for key {header.get('key')!r}, expected {key!r}")
        rows = list(_INDEX_ROW.iter_unpack(body[index_pos:]))
        if any(off < data_start or off + n > index_pos for row in rows for off, n in (row[:2], row[2:])):
            raise CorruptEntryError(path, "index points outside the frame data")
        if any(jpeg_at + n != preview_at for jpeg_at, n, preview_at, _ in rows):
            raise CorruptEntryError(path, "a preview does not follow its JPEG")
        return cls(path, header, rows, stat)

    def __len__(self) -> int:
        return len(self._rows)

    def read(self, indices: Iterable[int]) -> list[bytes]:
        """The JPEGs at ``indices`` (one open + one positioned read each); a replaced file is re-validated."""
        return [jpeg for jpeg, _ in self._read(indices, previews=False)]

    def read_with_previews(self, indices: Iterable[int]) -> list[Sample]:
        """The (JPEG, preview bytes) at ``indices``: one positioned read each (they lie side by side)."""
        return self._read(indices, previews=True)

    def _read(self, indices: Iterable[int], previews: bool) -> list[Sample]:
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self._identity:
                fresh = EntryFile.open(self.path, self.header["key"])
                self.header, self._rows, self._identity = fresh.header, fresh._rows, fresh._identity
            read = []
            for off, n, _, extra in (self._rows[i] for i in indices):
                both = os.pread(f.fileno(), n + extra if previews else n, off)
                read.append((both[:n], both[n:]) if previews else (both, b""))
            return read
