"""Runtime instances: the unit every later stage counts (DESIGN.md, "Runtime instances").

Each MCQA / EA candidate is one instance at its query time. Each adaptive candidate expands into one
instance per heartbeat (ERA, RCR) or window (MPA, PRM, TPG); window instances are probed at the
window's end and carry the Appendix E.3 interval marker at its start. An instance carries the
conversation turns the paper's protocol injects before its probe (ERA's session-start question,
RCR/PRM registrations, the interval marker), each with its wall-clock time, and the sessions it may
see. Nothing here reads video: causality is enforced later on frames, using ``probe_time``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, replace
from typing import Any, Iterator, Literal, Mapping

from apm.data import clock
from apm.data.model import Candidate, Release, Trajectory
from apm.data.tasks import ADAPTIVE, EA, FAMILY_OF, MCQA_TASKS

Polarity = Literal["positive", "negative"]
TurnKind = Literal["question", "registration", "interval_marker"]

EA_HISTORY_SESSIONS = 2
"""The EA setting: only the two most recent completed sessions are visible (Section 3.1)."""


@dataclass(frozen=True)
class Turn:
    """A user turn the protocol injects before the probe, at wall-clock ``time`` (absolute s)."""

    kind: TurnKind
    time: int
    text: str = ""
    candidate_id: str = ""
    """The candidate whose conversation the turn belongs to: only its own instances are shown it."""


@dataclass(frozen=True)
class Instance:
    key: str
    trajectory_id: str
    candidate_id: str
    task: str
    family: str
    probe_id: str
    polarity: Polarity | None
    session: str
    """Key (``DAYn/Sxxx``) of the session the probe happens in."""
    probe_time: int
    """Absolute second of the probe: frames at or before it may be shown, never after."""
    window_start: int | None
    """Start of the probed half-open interval ``[window_start, probe_time)`` (MPA, PRM, TPG)."""
    turns: tuple[Turn, ...]
    visible_sessions: tuple[str, ...]
    """Sessions whose content the instance may see, oldest first, ending with ``session``."""
    correct_option: str | None
    evidence_available: bool | None
    candidate: Candidate

    @property
    def probe_label(self) -> str:
        return clock.label(self.probe_time)


SHOWN_FIELDS: Mapping[str, tuple[str, ...]] = {
    "question": (),
    "choices": ("option_id", "text"),
    "query": ("day_id", "session_id", "query_time"),
    "registration_event": ("day_id", "session_id", "registration_time", "registration_text"),
}
"""The candidate fields (and, for each object or list of objects, its keys) a method may be given: what
the prompts show (the question and its choices, when it is asked, what the user registered). The
correct option, evidence moments, evidence availability, heartbeats, windows and expected responses
are annotations: only the runner and reference baselines read them."""


def _shown(value: Any, keys: tuple[str, ...]) -> Any:
    """``value`` with only ``keys`` in it (in each item, for a list); as it is when ``keys`` is empty."""
    if not keys:
        return value
    if isinstance(value, list):
        return [_shown(item, keys) for item in value]
    return {k: value[k] for k in keys if k in value} if isinstance(value, Mapping) else value


OPAQUE_CHARS = 24
"""Hex characters of an opaque instance id (96 bits: no two instances of a release share one)."""


def release_seal(release: Release) -> str:
    """The key of a release's opaque instance ids (:func:`opaque_id`): a digest of every candidate's
    annotations, so only code that already holds the annotations can tell which instance an id stands
    for. The same for every run, shard and rerun on the release."""
    h = hashlib.sha256(b"apm opaque instance ids\0")
    for c in release.all_candidates:
        h.update(json.dumps([c.trajectory_id, c.candidate_id, c.task, c.fields], sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()


def opaque_id(seal: str, key: str) -> str:
    """What a method is told an instance is called: a keyed digest (HMAC-SHA-256 under the release's
    :func:`release_seal`) of its key, stable for the instance, naming neither its probe id nor its polarity."""
    return hmac.new(seal.encode(), key.encode(), hashlib.sha256).hexdigest()[:OPAQUE_CHARS]


def instance_view(instance: Instance, seal: str) -> Instance:
    """The instance as a method that is not a reference may see it (a streaming system's ``Probe``, a
    protocol's ``history``): its question side only (:data:`SHOWN_FIELDS`), no ``correct_option``,
    ``evidence_available`` or ``polarity``, no ``probe_id``, and for ``key`` its :func:`opaque_id` (the
    key names the probe id, so it stays in the record only)."""
    fields = instance.candidate.fields
    candidate = replace(instance.candidate, fields={k: _shown(fields[k], keys) for k, keys in SHOWN_FIELDS.items()
                                                    if k in fields})
    return replace(instance, key=opaque_id(seal, instance.key), probe_id="", candidate=candidate,
                   correct_option=None, evidence_available=None, polarity=None)


def make_key(trajectory_id: str, candidate_id: str, probe_id: str) -> str:
    """An instance's identity in the release, the same whichever shard or rerun produced it."""
    return f"{trajectory_id}/{candidate_id}/{probe_id}"


def _at(point: Mapping[str, Any], time_field: str) -> tuple[str, int]:
    return f"{point['day_id']}/{point['session_id']}", clock.absolute(point["day_id"], point[time_field])


def probe_points(c: Candidate) -> Iterator[tuple[str, Polarity | None, str, int, int | None]]:
    """(probe_id, polarity, session key, probe time, window start) for each probe of ``c``."""
    f = c.fields
    if c.task in MCQA_TASKS or c.task == EA:
        session, t = _at(f["query"], "query_time")
        yield ("ea" if c.task == EA else "query"), None, session, t, None
        return
    if c.task in ("ERA", "RCR"):
        session, t = _at(f["positive_heartbeat"], "query_time")
        yield "pos", "positive", session, t, None
        for i, hb in enumerate(f.get("negative_heartbeats") or []):
            session, t = _at(hb, "query_time")
            yield f"neg{i}", "negative", session, t, None
        return
    positives = f["ideal_response_windows"] if c.task == "TPG" else [f["ideal_response_window"]]
    groups: tuple[tuple[Polarity, str, Any], ...] = (
        ("positive", "pos", positives),
        ("negative", "neg", f.get("negative_or_silence_windows") or []),
    )
    for polarity, prefix, windows in groups:
        for i, w in enumerate(windows):
            session, end = _at(w, "end_time")
            _, start = _at(w, "start_time")
            probe_id = prefix if c.task != "TPG" and polarity == "positive" else f"{prefix}{i}"
            yield probe_id, polarity, session, end, start


def _turns(c: Candidate, session_start: int, window_start: int | None) -> tuple[Turn, ...]:
    f = c.fields
    turns: list[Turn] = []
    if c.task == "ERA":
        turns.append(Turn("question", session_start, f["question"], c.candidate_id))
    if c.task in ("RCR", "PRM"):
        reg = f["registration_event"]
        _, t = _at(reg, "registration_time")
        turns.append(Turn("registration", t, reg["registration_text"], c.candidate_id))
    if window_start is not None:
        turns.append(Turn("interval_marker", window_start, candidate_id=c.candidate_id))
    return tuple(turns)


def _visible(traj: Trajectory, session_key: str, task: str) -> tuple[str, ...]:
    keys = [s.key for s in traj.sessions]
    upto = keys[: keys.index(session_key) + 1]
    if task == EA:
        return tuple(upto[-(EA_HISTORY_SESSIONS + 1) :])
    return tuple(upto)


def candidate_instances(c: Candidate, traj: Trajectory) -> list[Instance]:
    """The runtime instances of one validated candidate."""
    out = []
    for probe_id, polarity, session_key, probe_time, window_start in probe_points(c):
        session = traj.session(session_key)
        out.append(
            Instance(
                key=make_key(c.trajectory_id, c.candidate_id, probe_id),
                trajectory_id=c.trajectory_id,
                candidate_id=c.candidate_id,
                task=c.task,
                family=FAMILY_OF[c.task],
                probe_id=probe_id,
                polarity=polarity,
                session=session_key,
                probe_time=probe_time,
                window_start=window_start,
                turns=_turns(c, session.start, window_start),
                visible_sessions=_visible(traj, session_key, c.task),
                correct_option=c.fields.get("correct_option_id") if c.task not in ADAPTIVE[1:] else None,
                evidence_available=c.fields.get("evidence_available") if c.task == EA else None,
                candidate=c,
            )
        )
    return out


def release_instances(release: Release) -> list[Instance]:
    """All runtime instances of a release, ordered by trajectory, then probe time, then key."""
    trajs = {t.trajectory_id: t for t in release.trajectories}
    order = {t.trajectory_id: i for i, t in enumerate(release.trajectories)}
    out = [i for c in release.all_candidates for i in candidate_instances(c, trajs[c.trajectory_id])]
    out.sort(key=lambda i: (order[i.trajectory_id], i.probe_time, i.key))
    return out
