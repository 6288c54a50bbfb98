"""Files and folders written so that a reader — or the next run after a kill — sees the old content
or the new one, never a torn mix. Permissions follow the umask (a group-shared folder stays
group-readable), unlike ``tempfile.mkstemp``'s fixed 0600."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def temp_name(path: Path) -> Path:
    """A temporary name beside ``path`` that is this writer's alone (pid and a random suffix) and ends
    ``.tmp``, so two writers of one file never rename or delete each other's."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def write_atomically(path: Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` through a :func:`temp_name` (flushed to disk before the rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json_atomically(path: Path, value: Any) -> Path:
    """:func:`write_atomically` of ``value`` as indented JSON (non-JSON values as their ``str``)."""
    return write_atomically(path, json.dumps(value, indent=2, default=str).encode())


@contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A fresh folder beside ``target`` to write a whole output into; on success it replaces
    ``target`` (the old one is removed), on any failure it is removed and ``target`` is untouched.

    Between the two renames of the swap ``target`` briefly does not exist: a kill there leaves no
    output, never a mix of two.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = temp_name(target)
    staging.mkdir()
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = temp_name(target) if target.exists() else None
    if old is not None:
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
