"""A pixel-perceiver reference for the synthetic release: it answers only from its request.

It reads every frame as the synthetic release's own tests do (:mod:`apm.synth.render`: the pixel code
of the wall-clock second, the action patch, the tray, the sign, the objects' colours) and reads the
question, the options, what the user said and the text memories from the request's text parts. It
never sees the annotations (it declares no ground-truth channel) nor the release files, so its score
under a memory protocol is that protocol's information ceiling on the synthetic world: right wherever
the request shows the evidence. Where it does not, an MCQA answer is a guess (its reason ends with
:data:`GUESS`) and an EA answer is option E.

As a summary writer (``+backbone@writer=perceiver``) it writes what it perceived, in time order — each
change of the scene, each reminder the user registered — for as many lines as the writer's ``max_tokens``
allow (:data:`CHARS_PER_TOKEN`), then ``session ends`` if that fits too. A summary therefore keeps the
start of a busy session and loses its end: between SimpleStream and raw video, by its budget.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from apm.backbones.base import Backbone, Request, Response, TextPart
from apm.backbones.baselines import Answer, intervene, silent
from apm.data import clock
from apm.data.frames import Frame
from apm.prompts import layout, read_fields, read_probe, template
from apm.records.declaration import Declaration
from apm.synth import wording
from apm.synth.render import read_scene, read_sign
from apm.synth.world import ACTIONS, PACKING, TRAY_SLOTS, WORDS, ZONE_PLACES, ZONE_RELATIVE, ZONES

GUESS = "(a guess)"
"""Ends the reason of an MCQA answer the request held no evidence for."""
CHARS_PER_TOKEN = 4
"""The writer's budget: ``max_tokens`` × this many characters of memory (the context guard's estimate)."""
SESSION_ENDS = "session ends"

_NOTE = re.compile(rf"^({layout.LABEL}): (.*)$")
"""A line of a note as :func:`note_lines` writes it (the perceiver's own memory, not a template)."""
_USER = "user said: "
_HEADER = layout.HEADER.pattern(line=True)
_SAID = layout.SAID.pattern(line=True)
_NOW = layout.CURRENT_TIME.pattern()
_REMINDERS = {kind: wording.pattern(template, at_end=True)
              for kind, template in (("When", wording.REMIND_WHEN), ("Next time", wording.REMIND_NEXT))}
"""RCR's and PRM's registrations, by the word they open with (the ``kind`` of :func:`_reminders`)."""
_PLACE_ZONE = {place: zone for zone, place in ZONE_PLACES.items()}


@dataclass(frozen=True)
class Seen:
    """What the stream showed at one wall-clock second (read from a frame, or from a note)."""

    second: int
    action: str
    count: int
    sign: str | None
    zones: tuple[str | None, ...]
    """The colour of the object in each of ``ZONES`` (None: empty)."""

    def zone_of(self, colour: str) -> str | None:
        """The zone an object of ``colour`` is in, or None when none is in view."""
        return ZONES[self.zones.index(colour)] if colour in self.zones else None


@lru_cache(maxsize=16384)
def perceive(frame: Frame) -> Seen | None:
    """A frame's scene read from its pixels (the second from its pixel code); None when the code is unreadable."""
    rgb = frame.pixels()
    scene = read_scene(rgb)
    if scene["code"] is None:
        return None
    sign = read_sign(rgb, list(WORDS)) if scene["sign"] else None
    return Seen(scene["code"], scene["action"], scene["count"], sign, tuple(scene["zones"][z] for z in ZONES))


def _abs(label: str) -> int:
    """``DAY1 08:00:41`` → its absolute second."""
    day, hms = label.split(" ")
    return clock.absolute(day, hms)


# ---- the summary it writes, and reads back ---------------------------------------------------------


def _changes(seen: Seen, before: Seen | None) -> str:
    """What a note line says of ``seen``: every field at the first line, then only what changed."""
    parts = []
    if before is None or seen.action != before.action:
        parts.append(seen.action)
    if before is None or seen.count != before.count:
        parts.append(f"tray {seen.count}")
    if before is None or seen.sign != before.sign:
        parts.append(f"sign {seen.sign}" if seen.sign else "no sign")
    for i, zone in enumerate(ZONES):
        if before is None or seen.zones[i] != before.zones[i]:
            parts.append(f"{zone} {seen.zones[i] or 'empty'}")
    return "; ".join(parts)


def note_lines(seen: list[Seen], said: list[tuple[int, str]], end: int) -> list[str]:
    """The whole session as note lines, in time order: each scene change, each reminder the user
    registered (``said``), and its end."""
    timed: list[tuple[int, int, str]] = []
    before = None
    for s in seen:
        if change := _changes(s, before):
            timed.append((s.second, 0, change))
        before = s
    timed += [(t, 1, _USER + text) for t, text in said]
    timed.append((end, 2, SESSION_ENDS))
    return [f"{clock.label(t)}: {body}" for t, _, body in sorted(timed)]


def within_budget(lines: list[str], max_chars: int) -> str:
    """The longest run of leading ``lines`` whose text fits ``max_chars``."""
    kept: list[str] = []
    for line in lines:
        if len("\n".join([*kept, line])) > max_chars:
            break
        kept.append(line)
    return "\n".join(kept)


def _apply(state: dict[str, Any], body: str) -> None:
    """Update ``state`` (field → value) with the changes a note line lists."""
    for part in body.split("; "):
        key, _, value = part.partition(" ")
        if part in ACTIONS:
            state["action"] = part
        elif key == "tray" and value.isdigit():
            state["count"] = int(value)
        elif part == "no sign" or key == "sign":
            state["sign"] = value if key == "sign" else None
        elif key in ZONES:
            state[key] = None if value == "empty" else value


def read_note(note: str) -> tuple[list[Seen], list[tuple[int, str]]]:
    """The seconds a note (as :func:`note_lines` writes them) covers, and the user turns it kept.

    A scene holds from its line to the next change; the last one up to the note's last line (to the
    session's end, exclusive, when the note reached ``session ends``). Lines of any other form are skipped.
    """
    state: dict[str, Any] = {}
    changes: list[tuple[int, Seen]] = []
    said: list[tuple[int, str]] = []
    last, ended = 0, False
    for line in note.splitlines():
        m = _NOTE.match(line.strip())
        if not m:
            continue
        t, body = _abs(m.group(1)), m.group(2)
        last, ended = t, body == SESSION_ENDS
        if body.startswith(_USER):
            said.append((t, body.removeprefix(_USER)))
        elif not ended:
            _apply(state, body)
            if {"action", "count", "sign", *ZONES} <= state.keys():
                changes.append((t, Seen(t, state["action"], state["count"], state["sign"],
                                        tuple(state[z] for z in ZONES))))
    seen = []
    for i, (t, s) in enumerate(changes):
        until = changes[i + 1][0] if i + 1 < len(changes) else (last if ended else last + 1)
        seen += [replace(s, second=u) for u in range(t, max(until, t + 1))]
    return seen, said


# ---- what a request shows ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """Everything a request shows, as the perceiver read it."""

    seen: dict[int, Seen]
    """Per second, the scene a frame (or else a note) showed."""
    said: tuple[tuple[int, str], ...]
    """What the user said (turns, and those a note kept), by time."""
    sessions: dict[int, int]
    """Start → end (exclusive) of every session the request names in a header."""
    current_start: int
    now: int | None
    text: str
    """The request's last text part: what the user said, the current time and the probe."""
    probe: str | None
    """The probe's template (:data:`apm.prompts.render.PROBE_TEMPLATES`), None when the text ends with none."""
    fields: dict[str, str]
    """The probe's template fields (``QUESTION``, ``OPTION A``, ``START_TIME`` …)."""

    def at(self, second: int | None) -> Seen | None:
        """The scene shown at ``second``, if one was."""
        return None if second is None else self.seen.get(second)

    def earlier(self) -> list[Seen]:
        """The scenes of earlier sessions, in time order."""
        return [s for t, s in sorted(self.seen.items()) if t < self.current_start]


def _texts(request: Request) -> list[str]:
    return [p.text for m in request.messages for p in m.parts if isinstance(p, TextPart)]


def _notes(text: str) -> list[str]:
    """The text under each memory header, up to the next one."""
    starts = [m for m in _HEADER.finditer(text) if m["kind"] == layout.MEMORY]
    return [text[m.end():n.start() if n else None] for m, n in zip(starts, [*starts[1:], None])]


def shown(request: Request) -> Shown:
    """Read a request: its frames' scenes, its notes, its user turns, session headers and current time."""
    texts = _texts(request)
    whole = "\n".join(texts)
    seen: dict[int, Seen] = {}
    said = [(_abs(t), text) for t, text in _SAID.findall(whole)]
    for note in _notes(whole):
        from_note, kept = read_note(note)
        seen.update({s.second: s for s in from_note})
        said += kept
    seen.update({s.second: s for s in map(perceive, request.frames) if s is not None})
    stated = _NOW.search(whole)
    now = _abs(stated["now"]) if stated else None
    sessions, current = {}, 0
    for header in _HEADER.finditer(whole):
        first, end = _abs(header["start"]), header["end"]
        if end != layout.CURRENT_END:
            sessions[first] = first - first % clock.SECONDS_PER_DAY + clock.parse_hms(end)
        elif now is not None:
            sessions[first] = now
        current = first if header["kind"] == layout.CURRENT else current
    text = texts[-1] if texts else ""
    probe, fields = read_probe(text) or (None, {})
    return Shown(seen, tuple(sorted(said)), sessions, current, now, text, probe, fields)


# ---- multiple choice -------------------------------------------------------------------------------


Read = Callable[[re.Match, Shown], str | None]
"""What answers a question (its regex match) from what a request shows: an option's text, or None."""


def _now(field: Callable[[Seen], str | None]) -> Read:
    """A question about the current second, answered by ``field`` of its scene."""
    def read(m: re.Match, s: Shown) -> str | None:
        now = s.at(s.now)
        return field(now) if now else None
    return read


def _colour(obj: str) -> str:
    """An object's colour: the first word of its name (``red mug``)."""
    return obj.split(" ")[0]


def _where_now(m: re.Match, s: Shown) -> str | None:
    """STU: where the named object is now, relative to me."""
    now = s.at(s.now)
    zone = now.zone_of(_colour(m["obj"])) if now else None
    return ZONE_RELATIVE[zone] if zone else None


def _doing_while(m: re.Match, s: Shown) -> str | None:
    """ER: the one action seen while the sign showed the word, in an earlier session."""
    actions = {x.action for x in s.earlier() if x.sign == m["word"]}
    return actions.pop() if len(actions) == 1 else None


def _left_at_end(m: re.Match, s: Shown) -> str | None:
    """EST: where the object was at the last second of the session the question names."""
    end = s.sessions.get(clock.absolute(m["day"], m["hms"]))
    last = s.at(end - 1) if end is not None else None
    zone = last.zone_of(_colour(m["obj"])) if last else None
    return ZONE_PLACES[zone] if zone else None


def _sign_order(m: re.Match, s: Shown) -> str | None:
    """TR: the words in the order they were first seen in earlier sessions, when all three were."""
    words = m["words"].split(", ")
    first: dict[str, int] = {}
    for x in s.earlier():
        if x.sign is not None and x.sign in words:
            first.setdefault(x.sign, x.second)
    return ", then ".join(sorted(words, key=first.__getitem__)) if len(first) == len(words) else None


QUESTIONS: tuple[tuple[re.Pattern[str], Read], ...] = (
    (wording.pattern(wording.DOING_NOW), _now(lambda x: x.action)),
    (wording.pattern(wording.COUNT_NOW), _now(lambda x: str(x.count))),
    (wording.pattern(wording.SIGN_NOW), _now(lambda x: x.sign)),
    (wording.pattern(wording.WHERE_NOW, obj=".+"), _where_now),
    (wording.pattern(wording.DOING_WHILE, word=r"\w+"), _doing_while),
    (wording.pattern(wording.LEFT_AT_END, obj=".+", day=r"DAY\d+", hms=r"\d\d:\d\d:\d\d"), _left_at_end),
    (wording.pattern(wording.SIGN_ORDER, words=".+"), _sign_order),
)
"""The synthetic release's questions, each with what answers it from what a request shows."""


def _letter(options: dict[str, str], text: str | None) -> str | None:
    """The option whose text is ``text`` (case aside)."""
    return next((k for k, v in options.items() if text is not None and v.lower() == text.lower()), None)


def _choice(question: str, options: dict[str, str], s: Shown) -> str | None:
    """The option the request's evidence supports, or None when it shows none."""
    for pattern, read in QUESTIONS:
        if m := pattern.search(question):
            return _letter(options, read(m, s))
    return None


def _options(fields: dict[str, str] | None) -> dict[str, str]:
    """Letter → text of a template's ``OPTION <letter>`` fields."""
    return {k.removeprefix("OPTION "): v for k, v in (fields or {}).items() if k.startswith("OPTION ")}


def _multiple_choice(s: Shown) -> Answer:
    """An MCQA or EA answer: the supported option, else a guess (MCQA) or E (EA)."""
    question, options = s.fields.get("QUESTION", ""), _options(s.fields)
    letter = _choice(question, options, s)
    if letter is not None:
        return {"answer": letter, "reason": f"shown: {options[letter]}"}
    if s.probe == "ea":
        return {"answer": "E", "reason": "the evidence is not in what I was shown"}
    digest = hashlib.sha256(question.encode()).digest()
    return {"answer": "ABCD"[digest[0] % 4], "reason": f"the evidence is not in what I was shown {GUESS}"}


# ---- adaptive probes ------------------------------------------------------------------------------


def _window(s: Shown) -> tuple[int, int]:
    """The probed interval ``[start, end]`` (the probe text's, else just the current second)."""
    now = s.now or 0
    if "START_TIME" not in s.fields:
        return now, now
    return _abs(s.fields["START_TIME"]), _abs(s.fields["END_TIME"])


def _first_sign(s: Shown) -> Answer:
    """ERA: the word of the first sign of this session, once one is up."""
    options = _options(read_fields("era_question", s.text))  # asked at the session start, among the turns
    up = [x for t, x in sorted(s.seen.items()) if t >= s.current_start and x.sign]
    letter = _letter(options, up[0].sign) if up else None
    if letter is None:
        return silent("no sign has been put up in this session yet")
    return intervene("ERA", f"the first sign reads {options[letter]}", answer=letter)


Reminder = tuple[str, str, str, str]
"""``(object, place, zone, purpose)`` of a reminder the user registered."""


def _reminders(said: tuple[tuple[int, str], ...], kind: str, since: int, until: int) -> list[Reminder]:
    """Each ``When …`` / ``Next time …`` (``kind``) reminder said in ``[since, until)``."""
    out: list[Reminder] = []
    for t, text in said:
        m = _REMINDERS[kind].search(text)
        if m and since <= t < until and m["place"] in _PLACE_ZONE:
            out.append((m["obj"], m["place"], _PLACE_ZONE[m["place"]], m["purpose"]))
    return out


def _remind(s: Shown, task: str, reminders: list[Reminder], first: int, last: int) -> Answer:
    """RCR / PRM: remind when a registered condition shows in ``[first, last]``."""
    for obj, place, zone, purpose in reminders:
        if any(x.zone_of(_colour(obj)) == zone for t, x in s.seen.items() if first <= t <= last):
            return intervene(task, f"the {obj} is on {place}, as registered",
                             proactive_response=f"The {obj} is on {place} now: remember to {purpose}.")
    return silent("no registered condition is met")


def _rcr(s: Shown) -> Answer:
    """RCR: a reminder registered earlier in this session, due when its condition shows now."""
    now = s.now or 0
    return _remind(s, "RCR", _reminders(s.said, "When", s.current_start, now + 1), now, now)


def _prm(s: Shown) -> Answer:
    """PRM: a reminder registered in an earlier session, due when its condition shows in the interval."""
    return _remind(s, "PRM", _reminders(s.said, "Next time", 0, s.current_start), *_window(s))


def _started_in(s: Shown, action: str, first: int) -> bool:
    """Whether ``action`` first shows in the current session at or after ``first``."""
    seconds = [t for t, x in s.seen.items() if t >= s.current_start and x.action == action]
    return bool(seconds) and min(seconds) >= first


def _mpa(s: Shown) -> Answer:
    """MPA: an action just started again recalls where an object was the last time it was done."""
    first, _ = _window(s)
    now = s.at(s.now)
    if now is None or not _started_in(s, now.action, first):
        return silent("what I am doing now has not just started")
    done = [x for x in s.earlier() if x.action == now.action and any(x.zones)]
    if not done:
        return silent(f"I have not seen {now.action} before")
    zone, colour = next((z, c) for z, c in zip(ZONES, done[-1].zones) if c)
    return intervene("MPA", f"{now.action} again, as on {clock.label(done[-1].second)}",
                     proactive_response=f"You're {now.action} again. Last time you did this, the {colour} object "
                                        f"was on {ZONE_PLACES[zone]}.")


def _tpg(s: Shown) -> Answer:
    """TPG: packing the tray now is its resumption (the synthetic world poses TPG only where the tray
    was packed before), so the current frames decide, as any reader of them could; an earlier
    session, when shown, adds how far it got the last time."""
    now = s.at(s.now)
    if now is None or now.action != PACKING:
        return silent("not packing the tray")
    packed = [x for x in s.earlier() if x.action == PACKING]
    last = (f" Last time you stopped with {packed[-1].count} of {TRAY_SLOTS} slots filled." if packed
            else " I was not shown how far it got the last time.")
    return intervene("TPG", "packing the tray again", proactive_response=f"You're packing the tray again.{last}")


PROBES: dict[str, Callable[[Shown], Answer]] = {
    "era_probe": _first_sign, "prm_interval": _prm, "rcr_probe": _rcr, "tpg_interval": _tpg, "mpa_interval": _mpa,
}
"""Each adaptive probe (Appendix E.3), by its template, with how it is answered."""


def answer(s: Shown) -> Answer:
    """The Appendix E answer object to a probe, from what the request shows (any other probe is
    multiple choice)."""
    return PROBES.get(s.probe or "", _multiple_choice)(s)


def summary(request: Request) -> dict[str, str]:
    """The E.5 memory of a session: its note lines, within the writer's token budget."""
    s = shown(request)
    session = read_fields("summary_request", s.text)
    end = clock.absolute(session["DAY_ID"], session["END_TIME"]) if session else max(s.seen, default=0) + 1
    reminders = [(t, text) for t, text in s.said if any(p.search(text) for p in _REMINDERS.values())]
    lines = note_lines([x for _, x in sorted(s.seen.items())], reminders, end)
    return {"memory": within_budget(lines, request.settings.max_tokens * CHARS_PER_TOKEN)}


class PixelPerceiver(Backbone):
    """The pixel-perceiver reference (module docstring): the information ceiling of what a request shows."""

    declaration = Declaration("reference", tag="pixel-perceiver reference", ceiling=True)

    def __init__(self, name: str = "Perceiver (pixel-perceiver reference)", max_frames: int | None = 1024) -> None:
        self.name, self.max_frames = name, max_frames

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    async def generate(self, request: Request) -> Response:
        began = time.perf_counter()
        writing = template("summary_writer") in _texts(request)
        reply = summary(request) if writing else answer(shown(request))
        took = time.perf_counter() - began
        text = json.dumps(reply, ensure_ascii=False, separators=(",", ":"))
        return Response(text=text, ttft_s=took, total_s=took, elapsed_s=took, finish_reason="stop")

