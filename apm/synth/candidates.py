"""Annotations mined from a scripted world: every answer, probe and window follows from the video.

Each miner scans a :class:`~apm.synth.world.TrajectoryWorld` for moments where its task is
unambiguous (the relevant state holds long enough, conditions are unmet before and met after) and
writes the paper's Appendix D fields. Alongside each candidate it returns a *proof*: the world facts
its answer rests on (an action, a count, a word, an object's colour and zone), which tests check
against pixels read from the decoded videos.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Hashable, Iterator, Mapping

from apm.data import clock
from apm.data.instances import probe_points
from apm.data.model import Candidate
from apm.data.tasks import CROSS_SESSION, EA_UNAVAILABLE_OPTION, MCQA_OPTIONS, TASKS
from apm.synth import wording
from apm.synth.world import (
    ACTIONS,
    PACKING,
    TRAY_SLOTS,
    WORDS,
    ZONE_PLACES,
    ZONE_RELATIVE,
    ZONES,
    Scale,
    SessionWorld,
    State,
    TrajectoryWorld,
)

EA_UNAVAILABLE_TEXT = "Not enough evidence in the recent sessions to answer yet"
EVIDENCE_SPAN = 10
"""Longest evidence moment, in seconds."""
PURPOSES = ("fill it", "clean it", "check its label", "take a photo of it")


@dataclass
class Mined:
    """One candidate's Appendix D fields (without ids), the facts it rests on, and its EA split."""

    task: str
    fields: dict
    proof: dict
    evidence_available: bool | None = None
    """For ER/EST/TR: whether all evidence lies in the two sessions before the query session."""


@dataclass
class MinedTrajectory:
    """What a trajectory contributes: ``candidates.jsonl`` and ``ea_candidates.jsonl`` rows, proofs by id."""

    candidates: list[dict] = field(default_factory=list)
    ea_candidates: list[dict] = field(default_factory=list)
    proofs: dict[str, dict] = field(default_factory=dict)


def _hms(abs_second: int) -> str:
    """``HH:MM:SS`` of an absolute second."""
    return clock.split(abs_second)[1]


def _where(s: SessionWorld) -> dict:
    """The ``day_id``/``session_id`` pair that names a session."""
    return {"day_id": s.day_id, "session_id": s.session_id}


def _moment(s: SessionWorld, lo: int, hi: int, content: str) -> dict:
    """An evidence moment over session indices ``lo..hi`` (inclusive seconds)."""
    return {**_where(s), "start_time": _hms(s.start + lo), "end_time": _hms(s.start + hi), "evidence_content": content}


def _window(s: SessionWorld, lo: int, hi: int, **extra: str) -> dict:
    """A window over session indices ``lo..hi``, with any extra annotation fields."""
    return {**_where(s), "start_time": _hms(s.start + lo), "end_time": _hms(s.start + hi), **extra}


def _at(s: SessionWorld, i: int, time_field: str = "query_time", **extra: str) -> dict:
    """A point (query, heartbeat, registration) at session index ``i``."""
    return {**_where(s), time_field: _hms(s.start + i), **extra}


def _choices(rng: random.Random, correct: str, pool: list[str]) -> tuple[list[dict], str]:
    """Four options, the correct one among three distractors from ``pool``, in random order."""
    options = rng.sample([p for p in pool if p != correct], 3) + [correct]
    rng.shuffle(options)
    return [{"option_id": o, "text": t} for o, t in zip(MCQA_OPTIONS, options)], MCQA_OPTIONS[options.index(correct)]


def _run(states: tuple[State, ...], i: int, key: Callable[[State], Hashable]) -> tuple[int, int]:
    """The maximal index range ``lo..hi`` (inclusive) around ``i`` where ``key`` keeps its value."""
    value, lo, hi = key(states[i]), i, i
    while lo > 0 and key(states[lo - 1]) == value:
        lo -= 1
    while hi + 1 < len(states) and key(states[hi + 1]) == value:
        hi += 1
    return lo, hi


def _runs(states: tuple[State, ...], key: Callable[[State], Hashable]) -> Iterator[tuple[int, int, Hashable]]:
    """All maximal runs ``(lo, hi, value)`` of ``key`` over a session."""
    i = 0
    while i < len(states):
        lo, hi = _run(states, i, key)
        yield lo, hi, key(states[i])
        i = hi + 1


def _mcqa(question: str, choices: list[dict], correct: str, s: SessionWorld, q: int, evidence: list[dict]) -> dict:
    """The Appendix D.3 fields of an MCQA candidate."""
    return {"question": question, "choices": choices, "correct_option_id": correct,
            "query": _at(s, q), "evidence_moments": evidence}


# ---- Real-time perception: the answer is on screen at the query time ---------------------------


def _perception(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """ACR, CT, OCR and STU candidates: one per task and session where the state is steady."""
    for s in tw.sessions:
        n = len(s.states)
        for task in ("ACR", "CT", "OCR", "STU"):
            for q in rng.sample(range(3, n - 1), n - 4):
                state, obj = s.states[q], ""
                if task == "STU":
                    visible = [o for o in state.zones if o is not None]
                    if not visible:
                        continue
                    obj = rng.choice(visible)
                    lo, _ = _run(s.states, q, lambda st: st.zone_of(obj))
                else:
                    key = {"ACR": lambda st: st.action, "CT": lambda st: st.count, "OCR": lambda st: st.sign}[task]
                    lo, _ = _run(s.states, q, key)
                if lo > q - 2 or (task == "OCR" and state.sign is None):
                    continue
                lo = max(lo, q - EVIDENCE_SPAN)
                yield _perception_candidate(task, tw, s, q, lo, state, obj, rng)
                break


def _perception_candidate(task: str, tw: TrajectoryWorld, s: SessionWorld, q: int, lo: int, state: State,
                          obj: str, rng: random.Random) -> Mined:
    """One perception candidate about ``state``, steady over session indices ``lo..q``."""
    if task == "ACR":
        choices, correct = _choices(rng, state.action, list(ACTIONS))
        content = f"I am {state.action}."
        return Mined(task, _mcqa(wording.DOING_NOW, choices, correct, s, q, [_moment(s, lo, q, content)]),
                     {"action": state.action})
    if task == "CT":
        choices, correct = _choices(rng, str(state.count), [str(k) for k in range(TRAY_SLOTS + 1)])
        content = f"The tray holds {state.count} items."
        return Mined(task, _mcqa(wording.COUNT_NOW, choices, correct, s, q,
                                 [_moment(s, lo, q, content)]), {"count": state.count})
    if task == "OCR":
        word = state.sign or ""
        choices, correct = _choices(rng, word, list(WORDS))
        content = f"The sign reads '{word}'."
        return Mined(task, _mcqa(wording.SIGN_NOW, choices, correct, s, q,
                                 [_moment(s, lo, q, content)]), {"word": word})
    zone = state.zone_of(obj) or ""
    choices, correct = _choices(rng, ZONE_RELATIVE[zone], [*ZONE_RELATIVE.values(), "Behind me"])
    content = f"The {obj} is on {ZONE_PLACES[zone]}."
    return Mined(task, _mcqa(wording.WHERE_NOW.format(obj=obj), choices, correct, s, q,
                             [_moment(s, lo, q, content)]), {"object_colour": tw.objects[obj], "zone": zone})


# ---- Cross-session understanding: the answer is in an earlier session ---------------------------


def _available(query_index: int, evidence_sessions: set[int]) -> bool:
    """EA: whether all evidence lies in the two most recent completed sessions before the query."""
    return evidence_sessions <= {query_index - 1, query_index - 2}


def _query_point(s: SessionWorld, rng: random.Random) -> int:
    """A query index for a cross-session question (any time: the answer is in earlier sessions)."""
    return rng.randint(2, len(s.states) - 2)


def _cross_session(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """ER, EST and TR candidates: per later session, one whose evidence is recent and one that is not."""
    for m in tw.sessions[1:]:
        for task, miner in (("ER", _er), ("EST", _est), ("TR", _tr)):
            options = list(miner(tw, m, rng))
            for available in (True, False):
                pool = [c for c in options if c.evidence_available is available]
                if pool:
                    yield rng.choice(pool)


def _er(tw: TrajectoryWorld, m: SessionWorld, rng: random.Random) -> Iterator[Mined]:
    """What was I doing while the sign showed a word, in an earlier session."""
    for e in tw.sessions[: m.index]:
        for lo, hi, word in _runs(e.states, lambda st: st.sign):
            actions = {st.action for st in e.states[lo : hi + 1]}
            if word is None or len(actions) != 1:
                continue
            action = actions.pop()
            choices, correct = _choices(rng, action, list(ACTIONS))
            question = wording.DOING_WHILE.format(word=word)
            evidence = [_moment(e, lo, hi, f"The sign reads '{word}' while I am {action}.")]
            yield Mined("ER", _mcqa(question, choices, correct, m, _query_point(m, rng), evidence),
                        {"action": action, "word": word}, _available(m.index, {e.index}))


def _est(tw: TrajectoryWorld, m: SessionWorld, rng: random.Random) -> Iterator[Mined]:
    """Where an object was left at the end of an earlier session."""
    for e in tw.sessions[: m.index]:
        last = len(e.states) - 1
        for obj in tw.objects:
            zone = e.states[last].zone_of(obj)
            if zone is None:
                continue
            lo, _ = _run(e.states, last, lambda st: st.zone_of(obj))
            places = [p[0].upper() + p[1:] for p in (*ZONE_PLACES.values(), "the cupboard")]
            choices, correct = _choices(rng, places[ZONES.index(zone)], places)
            question = wording.LEFT_AT_END.format(obj=obj, day=e.day_id, hms=_hms(e.start))
            evidence = [_moment(e, max(lo, last - EVIDENCE_SPAN), last, f"The {obj} is on {ZONE_PLACES[zone]}.")]
            yield Mined("EST", _mcqa(question, choices, correct, m, _query_point(m, rng), evidence),
                        {"object_colour": tw.objects[obj], "zone": zone}, _available(m.index, {e.index}))


def _tr(tw: TrajectoryWorld, m: SessionWorld, rng: random.Random) -> Iterator[Mined]:
    """The order in which three signs appeared in earlier sessions."""
    runs = [(e, lo, hi, w) for e in tw.sessions[: m.index] for lo, hi, w in _runs(e.states, lambda st: st.sign) if w]
    recent = [r for r in runs if _available(m.index, {r[0].index})]
    old = [r for r in runs if not _available(m.index, {r[0].index})]
    draws = []
    if len(recent) >= 3:
        draws.append(rng.sample(recent, 3))
    if old and len(runs) >= 3:
        first = rng.choice(old)
        draws.append([first, *rng.sample([r for r in runs if r is not first], 2)])
    for draw in draws:
        picked = sorted(draw, key=lambda r: r[0].start + r[1])
        order = [str(r[3]) for r in picked]
        texts = [", then ".join(p) for p in itertools.permutations(order)]
        choices, correct = _choices(rng, texts[0], texts)
        shown = rng.sample(order, 3)
        question = wording.SIGN_ORDER.format(words=", ".join(shown))
        evidence = [_moment(e, lo, min(hi, lo + EVIDENCE_SPAN), f"The sign reads '{w}'.") for e, lo, hi, w in picked]
        yield Mined("TR", _mcqa(question, choices, correct, m, _query_point(m, rng), evidence),
                    {"order": order}, _available(m.index, {r[0].index for r in picked}))


# ---- Adaptive response: when to speak and when to stay silent -----------------------------------


def _era(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """The first sign of a session answers a question asked at session start."""
    for s in tw.sessions:
        a = next((i for i, st in enumerate(s.states) if st.sign is not None), None)
        if a is None or a < 4 or a + 3 >= len(s.states) or s.states[a + 3].sign != s.states[a].sign:
            continue
        word = s.states[a].sign or ""
        choices, correct = _choices(rng, word, list(WORDS))
        negatives = sorted(rng.sample(range(1, a), min(3, a - 1)))
        fields = {
            "question": "What word is on the first sign I put up in this session?",
            "choices": choices,
            "correct_option_id": correct,
            "answer_evidence_moments": [
                _moment(s, a, a + 1, f"The first sign of the session is put up; it reads '{word}'.")
            ],
            "positive_heartbeat": _at(s, a + 1, response_reason=f"The first sign is now up and reads '{word}'."),
            "negative_heartbeats": [
                _at(s, i, silence_reason="No sign has been put up in this session yet, so the answer is not visible.")
                for i in negatives
            ],
            "ideal_response_window": _window(s, a + 1, a + 3),
        }
        yield Mined("ERA", fields, {"word": word})


def _arrivals(tw: TrajectoryWorld, s: SessionWorld, earliest: int) -> Iterator[tuple[str, str, int]]:
    """``(object, zone, c)``: the object first enters the zone at index ``c`` >= ``earliest``, staying 3 s."""
    for obj in tw.objects:
        for zone in ZONES:
            c = next((i for i, st in enumerate(s.states) if st.zone_of(obj) == zone), None)
            if (
                c is not None
                and earliest <= c
                and c + 2 < len(s.states)
                and all(s.states[i].zone_of(obj) == zone for i in range(c, c + 3))
            ):
                yield obj, zone, c


def _rcr(tw: TrajectoryWorld, rng: random.Random, negatives: int = 2) -> Iterator[Mined]:
    """A reminder registered in a session fires when an object reaches a zone later in it, with
    ``negatives`` silent heartbeats (at most 3: registration is at least 4 s before the arrival)."""
    for s in tw.sessions:
        for obj, zone, c in _arrivals(tw, s, 6):
            r = rng.randint(1, c - 4)
            purpose, place = rng.choice(PURPOSES), ZONE_PLACES[zone]
            silent = sorted(rng.sample(range(r + 1, c), negatives))
            fields = {
                "registration_event": _at(
                    s,
                    r,
                    "registration_time",
                    registration_text=wording.REMIND_WHEN.format(obj=obj, place=place, purpose=purpose),
                ),
                "positive_heartbeat": _at(
                    s,
                    c + 1,
                    proactive_response=f"The {obj} is on {place} now: remember to {purpose}.",
                    reason=f"The {obj} has just been put on {place}, the condition registered earlier in this session.",
                ),
                "negative_heartbeats": [
                    _at(s, i, silence_reason=f"The {obj} is not on {place} yet.") for i in silent
                ],
                "ideal_response_window": _window(s, c, c + 2),
            }
            yield Mined("RCR", fields, {"object_colour": tw.objects[obj], "zone": zone})


def _silence_windows(s: SessionWorld, before: int, reason: str) -> list[dict]:
    """Up to two windows ``[lo, hi]`` with ``hi < before``, where the trigger has not happened."""
    w = max(2, min(30, len(s.states) // 12))
    spans = [(1, 1 + w), (before - 1 - w, before - 1)]
    if spans[1][0] <= spans[0][1]:
        spans = [(1, min(1 + w, before - 1))]
    return [_window(s, lo, hi, silence_reason=reason) for lo, hi in spans]


def _prm(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """A reminder registered in an earlier session fires when its condition first shows up later."""
    for m in tw.sessions[1:]:
        for obj, zone, c in _arrivals(tw, m, 6):
            if m.states[c + 1].zone_of(obj) != zone:
                continue
            slots = []
            for e in reversed(tw.sessions[: m.index]):
                met = [i for i, st in enumerate(e.states) if st.zone_of(obj) == zone]
                first = met[-1] + 1 if met else 1
                if first <= len(e.states) - 2:
                    slots.append((e, first))
                if met:
                    break
            if not slots:
                continue
            e, first = rng.choice(slots)
            r = rng.randint(first, len(e.states) - 2)
            purpose, place = rng.choice(PURPOSES), ZONE_PLACES[zone]
            fields = {
                "registration_event": _at(
                    e,
                    r,
                    "registration_time",
                    registration_text=wording.REMIND_NEXT.format(obj=obj, place=place, purpose=purpose),
                ),
                "trigger_match_reason": (
                    f"The {obj} is on {place} again, the condition registered on {e.day_id} at {_hms(e.start + r)}."
                ),
                "reference_proactive_response": f"The {obj} is on {place}: you asked me to remind you to {purpose}.",
                "ideal_response_window": _window(m, c, c + 1),
                "negative_or_silence_windows": _silence_windows(m, c, f"The {obj} is not on {place}."),
            }
            yield Mined("PRM", fields, {"object_colour": tw.objects[obj], "zone": zone})


def _onsets(s: SessionWorld, action: str | None = None) -> Iterator[tuple[str, int]]:
    """``(action, lo)``: the action's first segment in the session starts at ``lo`` >= 6 and lasts 4 s."""
    seen: set[str] = set()
    for lo, hi, a in _runs(s.states, lambda st: st.action):
        if a not in seen and lo >= 6 and hi >= lo + 3 and action in (None, a):
            yield str(a), lo
        seen.add(str(a))


def _mpa(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """Starting an action again recalls where an object was the last time it was done."""
    for m in tw.sessions[1:]:
        for action, lo in _onsets(m):
            earlier = [
                (e, a, b)
                for e in tw.sessions[: m.index]
                for a, b, x in _runs(e.states, lambda st: st.action)
                if x == action
            ]
            if not earlier:
                continue
            e, a, b = earlier[-1]
            found = next(
                (
                    (obj, p)
                    for p in range(a, b)
                    for obj in e.states[p].zones
                    if obj is not None and e.states[p + 1].zone_of(obj) == e.states[p].zone_of(obj)
                ),
                None,
            )
            if found is None:
                continue
            obj, p = found
            zone = e.states[p].zone_of(obj) or ""
            place = ZONE_PLACES[zone]
            fields = {
                "evidence_moments": [_moment(e, p, p + 1, f"I am {action}; the {obj} is on {place}.")],
                "response_window_rationale": f"I have just started {action} again; the last time I did it, "
                f"on {e.day_id}, the {obj} was on {place}.",
                "reference_proactive_response": (
                    f"You're {action} again. Last time you did this, the {obj} was on {place}."
                ),
                "ideal_response_window": _window(m, lo, lo + 3),
                "negative_or_silence_windows": _silence_windows(
                    m, lo, f"I am not {action} yet, so the earlier experience does not apply."
                ),
            }
            yield Mined("MPA", fields, {"action": action, "object_colour": tw.objects[obj], "zone": zone})


def _tpg(tw: TrajectoryWorld, rng: random.Random) -> Iterator[Mined]:
    """Resuming packing the tray recalls how far it got in earlier sessions."""
    for m in tw.sessions[1:]:
        for _, lo in _onsets(m, PACKING):
            ends = [
                (e, b)
                for e in tw.sessions[: m.index]
                for _, b, x in _runs(e.states, lambda st: st.action)
                if x == PACKING
            ][-2:]
            if not ends or any(b < 2 or len({st.count for st in e.states[b - 2 : b + 1]}) != 1 for e, b in ends):
                continue
            counts = [e.states[b].count for e, b in ends]
            history = " and ".join(f"{k} items on {e.day_id} ({e.session_id})" for k, (e, _) in zip(counts, ends))
            fields = {
                "evidence_moments": [
                    _moment(e, b - 2, b, f"I stop packing the tray; it holds {k} items.")
                    for k, (e, b) in zip(counts, ends)
                ],
                "memory_relevance": (
                    f"Packing the tray continues across sessions: it held {history} when packing stopped."
                ),
                "ideal_response_windows": [
                    _window(
                        m,
                        lo,
                        lo + 3,
                        response_window_rationale="I have just resumed packing the tray.",
                        reference_proactive_response=f"You're packing the tray again. Last time you stopped with "
                        f"{counts[-1]} of {TRAY_SLOTS} slots filled.",
                    )
                ],
                "negative_or_silence_windows": _silence_windows(
                    m, lo, "I am not packing the tray yet, so the progress reminder is not useful."
                ),
            }
            yield Mined("TPG", fields, {"action": PACKING, "counts": counts})


Miner = Callable[[TrajectoryWorld, random.Random], Iterator[Mined]]


@dataclass(frozen=True)
class Quota:
    """What one trajectory's candidates must be: how many per task (at most, or exactly), EA twins, probes."""

    per_task: Mapping[str, int]
    exact: bool = False
    """True: exactly ``per_task`` of every task (and ``ea``) or the world is rejected; False: at least one."""
    ea: tuple[int, int] | None = None
    """EA twins to make, exactly (evidence available, unavailable); None: one per ER/EST/TR candidate."""
    probes: Mapping[str, int] = field(default_factory=dict)
    """Probes every candidate of these adaptive tasks must have."""

    def miners(self) -> tuple[Miner, ...]:
        """The miners, RCR's negative heartbeats sized to its probe count (2 by default)."""
        rcr = partial(_rcr, negatives=self.probes.get("RCR", 3) - 1)
        return (_perception, _cross_session, _era, rcr, _prm, _mpa, _tpg)


def quota(scale: Scale, index: int) -> Quota:
    """Trajectory ``index``'s quota: ``per_task`` of each task, or its exact share of the scale's plan."""
    plan = scale.plan
    if plan is None:
        return Quota({task: scale.per_task for task in TASKS})
    per_task = {task: plan.share(n, index, 13 * k) for k, (task, n) in enumerate(plan.candidates.items())}
    ea = (plan.share(plan.ea[0], index, 0), plan.share(plan.ea[1], index, len(plan.sessions) // 2))
    return Quota(per_task, True, ea, plan.probes)


def _probes(c: Mined) -> int:
    """How many runtime instances (probes) the candidate expands to."""
    return len(list(probe_points(Candidate(c.task, "", "", c.fields))))


def _distinct(mined: list[Mined]) -> list[Mined]:
    """Drop candidates that repeat an earlier one's question and evidence with only a new query time."""
    seen: set[str] = set()
    out = []
    for c in mined:
        key = json.dumps(
            [c.task, {k: v for k, v in c.fields.items() if k not in ("query", "choices", "correct_option_id")}]
        )
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _select(mined: list[Mined], quota: Quota, rng: random.Random) -> list[Mined]:
    """Up to the quota of distinct candidates per task (of the quota's probe count), with both EA splits
    of a cross-session task if it has them."""
    out = []
    for task in TASKS:
        pool = _distinct([c for c in mined if c.task == task])
        if task in quota.probes:
            pool = [c for c in pool if _probes(c) == quota.probes[task]]
        firsts = (
            [
                next(c for c in pool if c.evidence_available is v)
                for v in (True, False)
                if any(c.evidence_available is v for c in pool)
            ]
            if task in CROSS_SESSION
            else []
        )
        rest = [c for c in pool if all(c is not f for f in firsts)]
        out += (firsts + rng.sample(rest, len(rest)))[: quota.per_task[task]]
    return out


def _twinned(mined: list[Mined], ea: tuple[int, int] | None) -> list[Mined]:
    """The cross-session candidates that get an EA twin: all, or the first ``ea`` of each split, taking
    each task's first before any task's second (so the splits spread over ER, EST and TR)."""
    pool = [c for c in mined if c.evidence_available is not None]
    if ea is None:
        return pool
    rank = {id(c): [d for d in pool if d.task == c.task].index(c) for c in pool}
    ordered = sorted(pool, key=lambda c: rank[id(c)])
    chosen = {id(c) for v, n in zip((True, False), ea) for c in [d for d in ordered if d.evidence_available is v][:n]}
    return [c for c in pool if id(c) in chosen]


def _meets(mined: list[Mined], twins: list[Mined], quota: Quota) -> bool:
    """Whether the selection has every task and both EA splits (exactly the quota's, when exact)."""
    if not quota.exact:
        return {c.task for c in mined} == set(TASKS) and {c.evidence_available for c in mined} == {True, False, None}
    counts = {task: sum(c.task == task for c in mined) for task in TASKS}
    split = tuple(sum(c.evidence_available is v for c in twins) for v in (True, False))
    return counts == dict(quota.per_task) and split == quota.ea


def _ea(candidate: dict, available: bool) -> dict:
    """The Evidence Availability-Aware twin of an ER/EST/TR candidate: five options, E when unavailable."""
    out = {k: v for k, v in candidate.items() if k != "candidate_id"}
    out["candidate_id"] = f"{candidate['candidate_id']}-EA"
    out["original_candidate_id"] = candidate["candidate_id"]
    out["choices"] = [*candidate["choices"], {"option_id": EA_UNAVAILABLE_OPTION, "text": EA_UNAVAILABLE_TEXT}]
    out["correct_option_id"] = candidate["correct_option_id"] if available else EA_UNAVAILABLE_OPTION
    out["evidence_available"] = available
    return out


def mine(tw: TrajectoryWorld, quota: Quota, rng: random.Random) -> MinedTrajectory | None:
    """The trajectory's candidates, EA candidates and proofs; None when the selection misses the quota."""
    mined = _select([c for miner in quota.miners() for c in miner(tw, rng)], quota, rng)
    twins = _twinned(mined, quota.ea)
    if not _meets(mined, twins, quota):
        return None
    out = MinedTrajectory()
    counters: dict[str, int] = {}
    for c in mined:
        counters[c.task] = counters.get(c.task, 0) + 1
        cid = f"{tw.trajectory_id}-{c.task}-{counters[c.task]:02d}"
        record = {"task_type": c.task, "trajectory_id": tw.trajectory_id, "candidate_id": cid, **c.fields}
        out.candidates.append(record)
        out.proofs[cid] = c.proof
        if c.evidence_available is not None and any(c is t for t in twins):
            out.ea_candidates.append(_ea(record, c.evidence_available))
    return out
