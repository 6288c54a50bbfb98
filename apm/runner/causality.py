"""The causality check on everything a request shows (docs/memory.md, "Causality").

Every item a protocol's ``History`` or a streaming system's request shows carries the time it was
formed: a frame span its ``end``, a note its ``formed_at``, a turn its ``time``, a frame its wall
clock. An instance may be shown an item only if it was formed at or before the probe time, within
one of the instance's visible sessions (and, for a span, a note or a frame, *of* a visible session);
a turn, only if it is of the instance's own conversation (its ``candidate_id``).
The runner refuses an instance shown anything else: the record carries a ``causality:`` error and
the run exits non-zero (``apm.runner.stops.check_causal_run``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from apm.data import clock
from apm.data.frames import Frame
from apm.data.instances import Instance
from apm.data.model import Trajectory
from apm.memory.base import History, Note
from apm.video.select import CausalityError

REFUSED = "causality: "
"""How a refused instance's record error begins (a rerun redoes such records, so it refuses again)."""


def refused(record: dict) -> bool:
    """Whether a record is an instance the runner refused for showing what it may not see."""
    return str(record.get("error") or "").startswith(REFUSED)


def _formed(trajectory: Trajectory, instance: Instance, name: str, what: str, session: str | None,
            at: float) -> Iterator[str]:
    """Why an item of ``session`` formed at ``at`` may not be shown (nothing when it may)."""
    visible = instance.visible_sessions
    if session is not None and session not in visible:
        yield f"{name}: {what} of {session}, not among the visible sessions {list(visible)}"
    elif at > instance.probe_time:
        yield f"{name}: {what} formed at {clock.label(int(at))}, after the probe time {instance.probe_label}"
    elif not any(trajectory.session(k).start <= at <= trajectory.session(k).end for k in visible):
        yield f"{name}: {what} formed at {clock.label(int(at))}, outside the visible sessions {list(visible)}"


def violations(trajectory: Trajectory, instance: Instance, history: History,
               frames: Iterable[Frame] = (), name: str | None = None) -> list[str]:
    """Every reason ``history`` and ``frames`` may not be shown to ``instance``, in item order, each naming
    the instance ``name`` (default: its key)."""
    name = instance.key if name is None else name
    found: list[str] = []
    for span in history.spans:
        found += _formed(trajectory, instance, name, f"a frame span {span.session} [{span.start}, {span.end}]",
                         span.session, span.end)
    for note in history.notes:
        if not isinstance(note, Note):
            found.append(f"{name}: a note {note!r:.60} without the time it was formed "
                         "(History.notes holds apm.memory.base.Note items)")
            continue
        found += _formed(trajectory, instance, name, f"a note of {note.session.key}", note.session.key,
                         note.formed_at)
    for turn in history.turns:
        if turn.candidate_id != instance.candidate_id:
            whose = f"candidate {turn.candidate_id!r}" if turn.candidate_id else "no candidate"
            found.append(f"{name}: a {turn.kind} turn of {whose}, not the instance's own ({instance.candidate_id!r})")
            continue
        found += _formed(trajectory, instance, name, f"a {turn.kind} turn", None, turn.time)
    for frame in frames:
        visible = frame.session in instance.visible_sessions  # a hidden one is refused before its time counts
        at = trajectory.session(frame.session).start + frame.offset if visible else 0.0
        found += _formed(trajectory, instance, name, f"a frame at {frame.label}", frame.session, at)
    return found


def refusal(found: list[str]) -> CausalityError:
    """The refusal for ``found`` (:func:`violations`, not empty): its first reason, and how many more."""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return CausalityError(found[0] + more)


def check_shown(trajectory: Trajectory, instance: Instance, history: History, frames: Iterable[Frame] = ()) -> None:
    """Raise ``CausalityError`` (the first reason) unless everything shown may be (:func:`violations`)."""
    found = violations(trajectory, instance, history, frames)
    if found:
        raise refusal(found)
