"""Which records the judge scores, and the digest that ties a judgement to the response it judged —
one rule for the judge stage that writes judgements and every reader that checks them."""

from __future__ import annotations

import hashlib
from typing import Any

from apm.data.tasks import ADAPTIVE


def needs_judge(rec: dict[str, Any]) -> bool:
    """Only gate-passing adaptive probes get a judge score; everything else is decided by the gate."""
    return rec.get("task") in ADAPTIVE and rec.get("error") is None and rec.get("gate_pass") is True


def response_digest(output: str) -> str:
    """SHA-256 of a response: a judgement of another digest judged an earlier response (stale)."""
    return hashlib.sha256(output.encode()).hexdigest()
