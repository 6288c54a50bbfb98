"""What made a line, as its ``run`` block names it (docs/records.md, "Identity"): the code (``run.code``)
and the model (``run.model``). The one comparison the runner (a resume) and the reducer (a row) make."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

PARTS = ("code", "model")
"""The fields of a ``run`` block that name what produced a line (a line written before one existed lacks it)."""


def short_digest(parts: Any) -> str:
    """The 12-hex digest a line carries for the JSON-able ``parts`` it names (keys sorted)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def identity_of(run: Mapping[str, Any]) -> str:
    """A line's identity in words: ``code=<run.code> model=<run.model>`` (``none`` for a part it lacks)."""
    return " ".join(f"{part}={run.get(part) or 'none'}" for part in PARTS)


def differing(run: Mapping[str, Any], mine: Mapping[str, Any]) -> tuple[str, ...]:
    """The parts (``code``, ``model``) in which a line's ``run`` block differs from ``mine``."""
    return tuple(part for part in PARTS if run.get(part) != mine.get(part))
