"""A local model named by its content (docs/records.md, "Identity"): the SHA-256 of every file of its
folder, so a folder rebuilt at the same path with other weights is another model, and a copy elsewhere
is the same one. Each file's digest is cached by (path, size, mtime) in ``$XDG_CACHE_HOME/apm/weights.json``,
so naming an unchanged 16 GB checkpoint again (a resume) reads no weights."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from apm.records.atomic import write_json_atomically

CHUNK = 16 << 20
"""Bytes read at a time while digesting a weights file."""


def cache_file() -> Path:
    """Where file digests are cached: ``$XDG_CACHE_HOME/apm/weights.json`` (default ``~/.cache``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "apm" / "weights.json"


def _read_cache(path: Path) -> dict[str, list[Any]]:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    """Every file of a model folder (symbolic links followed, as a hub snapshot's are), hidden ones (a
    ``.git`` or ``.cache`` folder, ``.gitattributes``) left out, in a fixed order."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def content_digests(paths: list[Path]) -> list[str]:
    """Each file's SHA-256, read only where the cache has no entry for its (path, size, mtime)."""
    where = cache_file()
    cached = _read_cache(where)
    digests, changed = [], False
    for path in paths:
        stat = path.stat()
        key, stamp = str(path.resolve()), [stat.st_size, stat.st_mtime_ns]
        entry = cached.get(key)
        if not (isinstance(entry, list) and entry[:2] == stamp and len(entry) == 3):
            cached[key], changed = [*stamp, _sha256(path)], True
        digests.append(cached[key][2])
    if changed:
        try:
            write_json_atomically(where, cached)
        except OSError:
            pass  # a cache that cannot be written costs time, never the identity
    return digests


def local_model(source: str) -> dict[str, Any]:
    """What names the model at ``source``: a folder's ``folder_sha256`` (over each file's path in it and
    SHA-256), a single file's ``file_sha256``; else ``source`` is taken as a hub id, named by that alone."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = _files(path)
        pairs = zip((p.relative_to(path).as_posix() for p in files), content_digests(files))
        return {"folder_sha256": hashlib.sha256(json.dumps(list(pairs)).encode()).hexdigest()}
    if path.is_file():
        return {"file_sha256": content_digests([path])[0]}
    return {"hub_id": source}
