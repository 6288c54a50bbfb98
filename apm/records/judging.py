"""Which records the judge scores, the digest that ties a judgement to the response it judged, and
the content digest that makes a judgement line verifiable — one rule for the judge stage that writes
judgements and every reader that checks them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from apm.data.tasks import ADAPTIVE
from apm.records.redact import may_redact_json, redact_data
from apm.records.select import REVISION, STAMP

CONTENT = "content_sha256"
"""The judgement line's own digest (:func:`content_digest`)."""
UNSIGNED = frozenset({CONTENT, REVISION, STAMP})
"""Fields a judgement's content digest does not cover: the digest itself and what the writer adds to order
lines (the revision and the write stamp)."""


def needs_judge(rec: Mapping[str, Any]) -> bool:
    """Only gate-passing adaptive probes get a judge score; everything else is decided by the gate."""
    return judged(rec.get("task"), rec.get("error"), rec.get("gate_pass"))


def judged(task: Any, error: Any, gate_pass: Any) -> bool:
    """:func:`needs_judge` of a record with these fields (a typed line's, without building a dict)."""
    return task in ADAPTIVE and error is None and gate_pass is True


def response_digest(output: str) -> str:
    """SHA-256 of a response: a judgement of another digest judged an earlier response (stale)."""
    return hashlib.sha256(output.encode()).hexdigest()


_SORTED = json.JSONEncoder(sort_keys=True, ensure_ascii=False)
"""``json.dumps(..., sort_keys=True, ensure_ascii=False)``, built once (``dumps`` builds its encoder per call)."""
_RUN = "run"
_RUN_MARK = "\x00apm: the run block's text\x00"
_RUN_MARK_TEXT = _SORTED.encode(_RUN_MARK)


def sorted_json(value: Any) -> str:
    """``value`` as :func:`content_digest` serialises it (keys sorted, each character as itself)."""
    return _SORTED.encode(value)


def content_digest(judgement: Mapping[str, Any], run_text: str | None = None) -> str:
    """SHA-256 of a judgement's fields (all but :data:`UNSIGNED`) as written: secrets masked, keys sorted,
    so the digest computed before the line is written equals the one computed from the line read back.
    ``run_text``, where the caller has it, is :func:`sorted_json` of the judgement's ``run`` block (a file's
    lines share a few blocks: a reader serialises each once, :func:`_sorted_text`); the digest is the same."""
    body = {k: v for k, v in judgement.items() if k not in UNSIGNED}
    text = _sorted_text(body, run_text)
    if may_redact_json(text):  # else masking changes no string: skip re-building the line (most of a read)
        text = _SORTED.encode(redact_data(body))
    return hashlib.sha256(text.encode()).hexdigest()


def _sorted_text(body: dict[str, Any], run_text: str | None) -> str:
    """:func:`sorted_json` of ``body``: with ``run_text`` spliced in where a mark in place of the run block
    serialises to the only place its text appears, else (no text given, no run block, the mark's text also
    elsewhere) serialised whole."""
    if run_text is None or _RUN not in body:
        return _SORTED.encode(body)
    marked = _SORTED.encode({**body, _RUN: _RUN_MARK})
    if marked.count(_RUN_MARK_TEXT) != 1:
        return _SORTED.encode(body)
    return marked.replace(_RUN_MARK_TEXT, run_text)


def signed(judgement: Mapping[str, Any]) -> dict[str, Any]:
    """``judgement`` with its :data:`CONTENT` digest."""
    return {**judgement, CONTENT: content_digest(judgement)}


def verifies(judgement: Mapping[str, Any], run_text: str | None = None) -> bool:
    """Whether a judgement line is as the judge wrote it: its content digest matches its fields (an edited
    score, digest or status, or a line without a digest, does not verify and is never used); ``run_text``
    as :func:`content_digest` takes it."""
    claimed = judgement.get(CONTENT)
    return claimed is not None and claimed == content_digest(judgement, run_text)
