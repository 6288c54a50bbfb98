"""Short content digests of template folders, so a version string changes exactly when the text does.

Standard library only: the prompts and the judge's rubric import it at import time.
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources.abc import Traversable
from pathlib import Path

DIGEST_CHARS = 12
"""Hex characters kept of a SHA-256: short enough to read, long enough never to collide here."""


def files_digest(folder: Traversable | Path, extra: bytes = b"") -> str:
    """SHA-256 (short) of every file's name and bytes in ``folder``, in sorted name order, then ``extra``."""
    h = hashlib.sha256()
    for item in sorted((i for i in folder.iterdir() if i.is_file()), key=lambda i: i.name):
        data = item.read_bytes()
        h.update(json.dumps([item.name, len(data)]).encode())
        h.update(data)
    h.update(extra)
    return h.hexdigest()[:DIGEST_CHARS]
