"""Read a run's JSONL lines (records, memory lines, judgements) so that no line can crash a reader.

A line is used only if it is a JSON object with the fields its kind needs, of the right types and
in range (a judge score is an integer 1–5, a task is one of the benchmark's, …). Any other line — a
torn tail left by a crash, ``null``, a non-UTF-8 byte, an object without ``key``, a field of the
wrong type — is skipped and reported as ``file:line: reason``, never raised. Unknown fields are
kept: older and newer lines stay readable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from apm.records.model import InstanceRecord, JudgementLine, values

Kind = Literal["records", "memory", "judgements", "any"]
Line = dict[str, Any]
Check = Callable[[Line], "str | None"]


@dataclass(frozen=True)
class Skipped:
    """A line a reader left out, and why."""

    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _field(name: str, ok: Callable[[Any], bool], what: str, optional: bool = True) -> Check:
    """A check that ``name`` is ``what`` (absent or null allowed when ``optional``)."""

    def check(line: Line) -> str | None:
        value = line.get(name)
        if value is None:
            return None if optional else f"{name}: missing"
        return None if ok(value) else f"{name}: not {what} ({str(value)[:40]!r})"

    return check


def _one_of(name: str, allowed: tuple[Any, ...], optional: bool = True) -> Check:
    return _field(name, lambda v: isinstance(v, str | bool) and v in allowed, f"one of {allowed}", optional)


def _text(name: str, optional: bool = True) -> Check:
    return _field(name, lambda v: isinstance(v, str) and (optional or v != ""), "a string", optional)


def _run(line: Line) -> str | None:
    """The ``run`` block names the method: its names are strings, its config parts objects."""
    run = line.get("run")
    if not isinstance(run, dict):
        return "run: missing (no method to count it under)"
    names = ("dataset", "memory", "backbone", "config_hash")
    parts = ("choices", "overrides", "capabilities", "declarations")
    bad = [k for k in names if not isinstance(run.get(k), str) or not run[k]]
    bad += [k for k in parts if run.get(k) is not None and not isinstance(run[k], dict)]
    choices = run.get("choices") or {}
    bad += [f"choices.{k}" for k, v in choices.items() if v is not None and not isinstance(v, str)]
    return f"run.{bad[0]}: missing or of the wrong type" if bad else None


def _latency(line: Line) -> str | None:
    latency = line.get("latency")
    if latency is None:
        return None
    if not isinstance(latency, dict):
        return "latency: not an object"
    bad = [k for k in ("ttft_s", "total_s", "rtf") if latency.get(k) is not None and not _is_number(latency[k])]
    return f"latency.{bad[0]}: not a finite number" if bad else None


def _judge_score(line: Line) -> str | None:
    score, status = line.get("score"), line.get("status")
    if status == "ok" and not (isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 5):
        return f"score: not an integer 1–5 ({str(score)[:20]!r})"
    return None if status == "ok" or score is None else "score: set on a failed judgement"


_BOOLEAN = (True, False)
_STAMP = _field("written_ns", _is_count, "a non-negative integer")
_REVISION = _field("revision", _is_count, "a non-negative integer")

CHECKS: dict[Kind, tuple[Check, ...]] = {
    "records": (
        _text("key", optional=False), _run, _one_of("task", values(InstanceRecord, "task"), optional=False),
        _text("trajectory_id", optional=False), _text("candidate_id", optional=False), _text("family"),
        *(_one_of(name, values(InstanceRecord, name)) for name in ("polarity", "parse_status", "decision")),
        _text("answer"), _text("output"), _text("error"),
        _one_of("correct", _BOOLEAN), _one_of("gate_pass", _BOOLEAN), _one_of("evidence_available", _BOOLEAN),
        _text("original_candidate_id"), _latency, _STAMP, _REVISION,
    ),
    "judgements": (
        _text("key", optional=False), _run, _text("judge", optional=False),
        _one_of("status", values(JudgementLine, "status"), optional=False), _judge_score, _text("response_sha256"),
        _text("rubric_version"), _text("judge_model"), _text("failure"), _STAMP, _REVISION,
    ),
    "memory": (
        _run, _text("trajectory_id", optional=False), _text("day_id", optional=False),
        _text("session_id", optional=False), _field("session_index", _is_count, "an index", False),
        _field("bytes", _is_count, "a byte count", False),
        _field("prior_hours", lambda v: _is_number(v) and v >= 0, "hours ≥ 0", False), _text("error"), _STAMP,
        _REVISION,
    ),
    "any": (),
}
"""What each kind of line must satisfy to be read (docs/records.md, "Reading lines")."""


def problem(line: Any, kind: Kind) -> str | None:
    """Why ``line`` (a decoded JSON value) cannot be read as a ``kind`` line, or None if it can."""
    if not isinstance(line, dict):
        return f"not a JSON object ({type(line).__name__})"
    return next((reason for check in CHECKS[kind] if (reason := check(line))), None)


def read_lines(path: Path, kind: Kind, skipped: list[Skipped] | None = None) -> Iterator[Line]:
    """The usable lines of one JSONL file; each other line is appended to ``skipped`` (if given).

    An unterminated last line is a write in progress or a crash mid-write: skipped like the rest.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        if skipped is not None:
            skipped.append(Skipped(path, 0, f"unreadable: {e.strerror or e}"))
        return
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if number == len(lines):
            reason: str | None = "unterminated last line (a crash mid-write)"
        else:
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                reason = "not valid JSON (or not UTF-8)"
            else:
                reason = problem(value, kind)
        if reason is None:
            yield value
        elif skipped is not None:
            skipped.append(Skipped(path, number, reason))
