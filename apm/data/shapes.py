"""The shape of every annotation in the release, declared once (paper Appendix D field names).

A shape is checked structurally by :mod:`apm.data.validate`; the semantic rules (sessions exist,
times inside sessions, causality) are applied there on top of the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apm.data.tasks import ADAPTIVE, CROSS_SESSION, EA, EA_OPTIONS, MCQA_OPTIONS, MCQA_TASKS


@dataclass(frozen=True)
class Str:
    optional: bool = False


@dataclass(frozen=True)
class Id:
    """A string that names files in a run, so it obeys :func:`apm.data.ids.id_problem`."""

    optional: bool = False


@dataclass(frozen=True)
class Bool:
    optional: bool = False


@dataclass(frozen=True)
class OneOf:
    values: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class Choices:
    """``[{"option_id": "A", "text": …}, …]`` with exactly the option ids given."""

    options: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class Obj:
    """An object; a ``session`` object also carries ``day_id``/``session_id`` and times in it."""

    fields: dict[str, Any]
    session: bool = False
    window: bool = False
    """A window must have ``start_time`` < ``end_time`` (a moment may have them equal)."""
    optional: bool = False


@dataclass(frozen=True)
class List:
    item: Any
    nonempty: bool = False
    optional: bool = False


Shape = Str | Id | Bool | OneOf | Choices | Obj | List


def _session_obj(window: bool = False, **fields: Any) -> Obj:
    return Obj({"day_id": Str(), "session_id": Str(), **fields}, session=True, window=window)


def _moment(**extra: Any) -> Obj:
    return _session_obj(start_time=Str(), end_time=Str(), **extra)


def _window(**extra: Any) -> Obj:
    return _session_obj(window=True, start_time=Str(), end_time=Str(), **extra)


def _heartbeat(**extra: Any) -> Obj:
    return _session_obj(query_time=Str(), **extra)


EVIDENCE = List(_moment(evidence_content=Str()))
REGISTRATION = _session_obj(registration_time=Str(), registration_text=Str())
SILENCE_WINDOWS = List(_window(silence_reason=Str()))
SILENCE_HEARTBEATS = List(_heartbeat(silence_reason=Str()))

_MCQA: dict[str, Shape] = {
    "question": Str(),
    "choices": Choices(MCQA_OPTIONS),
    "correct_option_id": Str(),
    "query": _heartbeat(),
    "evidence_moments": EVIDENCE,
}

TASK_SHAPES: dict[str, dict[str, Shape]] = {
    **{task: _MCQA for task in MCQA_TASKS},
    "ERA": {
        "question": Str(),
        "choices": Choices(MCQA_OPTIONS),
        "correct_option_id": Str(),
        "answer_evidence_moments": EVIDENCE,
        "positive_heartbeat": _heartbeat(response_reason=Str()),
        "negative_heartbeats": SILENCE_HEARTBEATS,
        "ideal_response_window": _window(),
    },
    "RCR": {
        "registration_event": REGISTRATION,
        "positive_heartbeat": _heartbeat(proactive_response=Str(), reason=Str()),
        "negative_heartbeats": SILENCE_HEARTBEATS,
        "ideal_response_window": _window(),
    },
    "MPA": {
        "evidence_moments": EVIDENCE,
        "response_window_rationale": Str(),
        "reference_proactive_response": Str(),
        "ideal_response_window": _window(),
        "negative_or_silence_windows": SILENCE_WINDOWS,
    },
    "PRM": {
        "registration_event": REGISTRATION,
        "trigger_match_reason": Str(),
        "reference_proactive_response": Str(),
        "ideal_response_window": _window(),
        "negative_or_silence_windows": SILENCE_WINDOWS,
    },
    "TPG": {
        "evidence_moments": EVIDENCE,
        "memory_relevance": Str(),
        "ideal_response_windows": List(
            _window(response_window_rationale=Str(), reference_proactive_response=Str()), nonempty=True
        ),
        "negative_or_silence_windows": SILENCE_WINDOWS,
    },
    EA: {
        **_MCQA,
        "choices": Choices(EA_OPTIONS),
        "evidence_available": Bool(),
        "original_candidate_id": Str(optional=True),
        "task_type": OneOf((EA, *CROSS_SESSION), optional=True),
    },
}

CANDIDATE_IDS = {"trajectory_id": Str(), "candidate_id": Id()}
"""A candidate's own id is an id; its ``trajectory_id`` is a reference, checked by lookup."""

TRAJECTORY = Obj(
    {
        "trajectory_id": Id(),
        "source": Str(),
        "title": Str(),
        "sessions": List(
            # day_id: validate.day_problem, stricter than any id rule (DAY1 … DAY9999); video: a relative path
            Obj({"day_id": Str(), "session_id": Id(), "start_time": Str(), "end_time": Str(), "video": Str()}),
            nonempty=True,
        ),
    }
)

assert set(TASK_SHAPES) == {*MCQA_TASKS, *ADAPTIVE, EA}
