"""The lines' format version, and the one step that brings a line written before it up to date.

Every line the runner and the judge write says ``format_version`` (:data:`FORMAT_VERSION`) and has every
field of its model (:mod:`apm.records.model`). A line without one was written before versions, when some
fields came later and older lines lack them: :func:`migrate` fills each with the value its absence meant
(:data:`BEFORE_VERSION_1`). A line of a later version is refused (:class:`FormatError`): its fields may
mean what this code cannot know, and reading it as it is would mislead.
"""

from __future__ import annotations

import copy
from typing import Any, Literal, get_args

from apm.records.select import REVISION, STAMP

Version = Literal[1]
"""The format versions this code writes and reads as they are."""
FORMAT_VERSION: int = get_args(Version)[-1]
"""The version every line is written in."""
FIELD = "format_version"

_DECLARED = {"ceiling": False, "representation": "", "deviations": []}
"""What a class's declaration (``run.declarations.<part>``) written before these fields meant: not a ceiling,
no representation, no deviation."""
_RUN = {
    "release_fingerprint": None,
    "code": None,
    "model": None,
    "choices": None,
    "overrides": None,
    "capabilities": None,
    "declarations": {"memory": _DECLARED, "backbone": _DECLARED, "writer": _DECLARED},
}
"""The run block's fields that older lines lack (null: not recorded; a reader falls back as docs/records.md
says), and inside a declarations block that is there, the parts' fields (``writer``: null when absent)."""
_ORDER = {REVISION: 0, STAMP: 0}
"""A line written before revisions and stamps: revision 0 and stamp 0, before every line that has them."""

BEFORE_VERSION_1: dict[str, dict[str, Any]] = {
    "records": {
        "run": _RUN,
        "prompt": None,
        "memory_sha256": None,
        **_ORDER,
        "latency": {"encode_s": None, "ttft_from": None, "update_s": None, "observe_s": None},
    },
    "memory": {"run": _RUN, "fast_weight_bytes": 0, "writer_parse_status": None, "writer_total_s": None, **_ORDER},
    "judgements": {
        "run": _RUN,
        "judge_snapshot": None,
        "inputs_sha256": None,
        "failure": None,
        "content_sha256": None,
        **_ORDER,
    },
}
"""Per kind of line, the fields a line without ``format_version`` may lack and the value each absence meant;
a nested table fills a block that is there (an object), field by field, and stands for null where it is not.
(A judgement line without ``content_sha256`` does not verify, so is never used.)"""


class FormatError(ValueError):
    """A line of a format version this code does not read; the message is one line naming the file."""


def is_current(version: Any) -> bool:
    """Whether a line's ``format_version`` is one this code reads as it is."""
    return version in get_args(Version) and not isinstance(version, bool)


def refusal(version: Any, where: str) -> str | None:
    """Why a line of ``format_version`` ``version`` is refused (at ``where``: ``file:line``): a later version
    than this code's; None when it is read: as it is (a current version), after :func:`migrate` (none) or
    skipped as damaged (not an integer, or not a version ever written: below 1)."""
    if not isinstance(version, int) or isinstance(version, bool) or version <= FORMAT_VERSION:
        return None
    return (
        f"{where}: format_version {version} is not one this apm reads (it reads {FORMAT_VERSION} and lines "
        "without one); read the run with the apm that wrote it"
    )


def migrate(line: dict[str, Any], kind: str) -> dict[str, Any]:
    """``line`` as its current version says it: a line with ``format_version`` as it is; one without it,
    with each field it lacks filled as :data:`BEFORE_VERSION_1` says (``kind``: ``records``, ``memory``,
    ``judgements``; any other kind of line is left as it is). A reader first refuses a line of a later
    version (:func:`refusal`)."""
    if line.get(FIELD) is not None or kind not in BEFORE_VERSION_1:
        return line
    return _filled(line, BEFORE_VERSION_1[kind])


def migrate_run(run: dict[str, Any]) -> dict[str, Any]:
    """A ``run`` block as :func:`migrate` leaves it (a typed reader decodes each distinct block once)."""
    return _filled(run, _RUN)


def _filled(block: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``block`` with each field of ``defaults`` it lacks (or holds as null) set (to null for a nested table),
    each that a nested table describes filled in turn where it is an object."""
    out = dict(block)
    for name, default in defaults.items():
        if isinstance(out.get(name), dict) and isinstance(default, dict):
            out[name] = _filled(out[name], default)
        elif out.get(name) is None:
            out[name] = None if isinstance(default, dict) else copy.copy(default)
    return out


def typed_defaults(kind: str, names: tuple[str, ...]) -> dict[str, Any]:
    """Of the top-level fields ``names`` a typed reader decodes (absent ones as null), those whose absence on
    a line without ``format_version`` meant something other than null, and what (:data:`BEFORE_VERSION_1`)."""
    table = BEFORE_VERSION_1.get(kind, {})
    return {n: table[n] for n in names if n in table and table[n] is not None and not isinstance(table[n], dict)}
