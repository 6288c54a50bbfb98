"""The scripted world of a synthetic trajectory: what is visible at every second of every session.

A trajectory has a few objects (one colour each), three zones seen from the wearer (left counter,
front table, right shelf), a tray holding 0–8 items, a sign that shows one word at a time, and the
wearer's current action. All of it changes at scripted seconds and carries over between sessions
(objects stay where they were left, the tray keeps its items), across several days.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Mapping

from apm.data import clock

ZONES = ("left", "front", "right")
ZONE_PLACES = {"left": "the left counter", "front": "the front table", "right": "the right shelf"}
ZONE_RELATIVE = {"left": "On my left", "front": "In front of me", "right": "On my right"}
OBJECT_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 50, 50),
    "green": (50, 180, 70),
    "blue": (50, 90, 230),
    "yellow": (235, 215, 50),
    "magenta": (210, 60, 210),
    "cyan": (50, 205, 215),
}
OBJECT_KINDS = ("mug", "box", "bottle", "bowl", "jar", "kettle")
ACTIONS: dict[str, tuple[int, int, int]] = {
    "chopping vegetables": (240, 140, 20),
    "washing dishes": (30, 110, 240),
    "stirring a pot": (200, 30, 30),
    "packing the tray": (40, 190, 70),
    "unpacking the tray": (120, 80, 40),
    "reading a note": (235, 225, 60),
    "wiping the table": (170, 60, 210),
    "pouring water": (40, 215, 220),
}
PACKING, UNPACKING = "packing the tray", "unpacking the tray"
TRAY_SLOTS = 8
WORDS = (
    "SALT", "MILK", "RICE", "BREAD", "HONEY", "LEMON", "BASIL", "FLOUR", "SUGAR", "OLIVE",
    "CHILI", "MANGO", "PEACH", "GRAPE", "CREAM", "BACON", "TOAST", "PASTA", "SAUCE", "WATER",
    "JUICE", "TEA", "COCOA", "MINT", "SAGE", "DILL", "OATS", "CORN", "BEANS", "PEAS",
    "KALE", "LEEK", "TUNA", "CRAB", "EGGS", "NUTS", "PLUM", "PEAR", "LIME", "FIGS",
    "DATES", "MELON", "APPLE", "CAKE", "PIE", "SOUP", "STEW", "WOK", "PAN", "POT",
    "LID", "CUP", "FORK", "KNIFE", "SPOON", "PLATE", "BOWL", "TOWEL", "SOAP", "JAM",
    "YEAST", "THYME", "CLOVE", "ONION", "GARLIC", "BUTTER", "CHEESE", "PEPPER", "CARROT", "POTATO",
    "CELERY", "TOFU", "SALAD", "PIZZA", "SUSHI", "NOODLE", "CURRY", "WAFFLE", "MUFFIN", "COOKIE",
)


@dataclass(frozen=True)
class Scale:
    """Size of a synthetic release: how many trajectories, sessions, seconds, pixels, frames."""

    name: str
    trajectories: int
    sessions: tuple[int, ...]
    """Session counts a trajectory draws from (uniformly)."""
    duration: tuple[int, int]
    """Inclusive range of a session's length in seconds."""
    width: int
    height: int
    fps: int
    per_task: int
    """At most this many candidates per task per trajectory (without a ``plan``)."""
    plan: Plan | None = None
    """Exact populations the release must have; None: whatever the miners find, up to ``per_task``."""

    def session_count(self, index: int, rng: random.Random) -> int:
        """How many sessions trajectory ``index`` has: the plan's, or drawn from ``sessions``."""
        return self.plan.sessions[index] if self.plan else rng.choice(self.sessions)


@dataclass(frozen=True)
class Plan:
    """A release's exact populations: sessions per trajectory, candidates per task, EA splits, probes."""

    sessions: tuple[int, ...]
    """Session count of each trajectory (one per trajectory)."""
    candidates: Mapping[str, int]
    """Candidates of each task over the release."""
    ea: tuple[int, int]
    """EA questions over the release: (evidence available, unavailable)."""
    probes: Mapping[str, int] = field(default_factory=dict)
    """Probes (runtime instances) every candidate of an adaptive task has."""

    def share(self, total: int, index: int, offset: int) -> int:
        """Trajectory ``index``'s part of ``total``: an even split, the remainder spread from ``offset``."""
        n = len(self.sessions)
        return total // n + ((index - offset) % n < total % n)


def _paper_plan() -> Plan:
    """The paper's populations (Section 3): 104 trajectories, 549 sessions, 2,719 candidates (887
    cross-session + 716 perception MCQA, each task's count fixed by Table 4's accuracies; 1,116 adaptive
    with 3,768 probes: 5,371 probes of the 12 tasks), 130 + 130 EA."""
    cycle = (4, 4, 5, 5, 6, 6, 7)
    sessions = [cycle[i % len(cycle)] for i in range(104)]
    sessions[-1] += 1  # the cycle gives 548
    mcqa = {"ER": 327, "EST": 298, "TR": 262, "ACR": 202, "CT": 195, "OCR": 166, "STU": 153}  # Table 4's denominators
    adaptive = {"ERA": 210, "RCR": 210, "MPA": 232, "PRM": 232, "TPG": 232}
    probes = {"ERA": 4, "RCR": 4, "MPA": 3, "PRM": 3, "TPG": 3}
    return Plan(tuple(sessions), {**mcqa, **adaptive}, (130, 130), probes)


SCALES: dict[str, Scale] = {
    "tiny": Scale("tiny", 3, (4,), (40, 48), 160, 120, 5, 2),
    "small": Scale("small", 3, (4,), (30, 40), 320, 240, 10, 3),
    "paper": Scale("paper", 104, (4, 4, 5, 5, 6, 6, 7), (660, 900), 640, 360, 30, 3, _paper_plan()),
}


@dataclass(frozen=True)
class State:
    """What the wearer sees during one second."""

    action: str
    count: int
    sign: str | None
    zones: tuple[str | None, str | None, str | None]
    """Object name in each of ``ZONES`` (or None when the zone is empty)."""

    def zone_of(self, obj: str) -> str | None:
        """The zone ``obj`` is in, or None when it is out of view."""
        return ZONES[self.zones.index(obj)] if obj in self.zones else None

    def to_json(self) -> dict:
        """The ``synth_world.json`` form of the state."""
        return {"action": self.action, "count": self.count, "sign": self.sign,
                "zones": dict(zip(ZONES, self.zones))}


@dataclass(frozen=True)
class SessionWorld:
    """One session: where it lies in wall-clock time and its state at each second."""

    index: int
    day_id: str
    session_id: str
    start: int
    """Absolute second of video offset 0."""
    states: tuple[State, ...]

    @property
    def end(self) -> int:
        """Absolute end second: ``start`` + duration (exclusive of frames)."""
        return self.start + len(self.states)

    def at(self, abs_second: int) -> State:
        """State at an absolute second inside the session."""
        return self.states[abs_second - self.start]

    def video_name(self) -> str:
        """File name of the session video: ``DAYn_Sxxx.mp4``."""
        return f"{self.day_id}_{self.session_id}.mp4"


@dataclass(frozen=True)
class TrajectoryWorld:
    """A trajectory's objects and sessions, oldest session first."""

    trajectory_id: str
    objects: dict[str, str]
    """Object name → colour name."""
    sessions: tuple[SessionWorld, ...]


def _segments(rng: random.Random, length: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Split ``[0, length)`` into consecutive ``(start, end)`` pieces of ``lo``..``hi`` seconds."""
    out, t = [], 0
    while t < length:
        end = min(length, t + rng.randint(lo, hi))
        if length - end < lo:
            end = length
        out.append((t, end))
        t = end
    return out


def _actions(rng: random.Random, n: int) -> list[tuple[int, int, str]]:
    """Action segments ``(start, end, action)`` for a session of ``n`` seconds."""
    pieces = _segments(rng, n, max(5, n // 9), max(8, n // 4))
    names = list(ACTIONS)
    out: list[tuple[int, int, str]] = []
    for start, end in pieces:
        previous = out[-1][2] if out else None
        choices = [a for a in names if a != previous]
        weights = [3 if a == PACKING else 1 for a in choices]
        out.append((start, end, rng.choices(choices, weights)[0]))
    return out


def _counts(n: int, actions: list[tuple[int, int, str]], count: int) -> list[int]:
    """Tray count per second: +1 steps while packing, -1 while unpacking, none in a segment's last 3 s."""
    out = []
    steps: set[int] = set()
    for start, end, action in actions:
        if action in (PACKING, UNPACKING):
            step = max(2, (end - start) // 3)
            steps.update(range(start + step, end - 3, step))
    for t in range(n):
        action = next(a for s, e, a in actions if s <= t < e)
        if t in steps and action == PACKING and count < TRAY_SLOTS:
            count += 1
        elif t in steps and action == UNPACKING and count > 0:
            count -= 1
        out.append(count)
    return out


def _signs(rng: random.Random, n: int, words: list[str]) -> list[str | None]:
    """Sign per second: none for the first part of the session, then words shown one at a time."""
    out: list[str | None] = [None] * n
    t = rng.randint(max(6, n // 6), max(8, n // 4))
    while t < n - 4 and words:
        on = rng.randint(max(4, n // 10), max(6, n // 6))
        word = words.pop()
        for i in range(t, min(n, t + on)):
            out[i] = word
        t += on + rng.randint(max(2, n // 20), max(4, n // 10))
    return out


def _zones(rng: random.Random, n: int, objects: list[str], zones: list[str | None]) -> list[tuple]:
    """Object placement per second: every few seconds one object moves, leaves or comes back.

    ``zones`` is updated in place, so the next session starts where this one left its objects.
    """
    out = []
    lo, hi = max(4, n // 8), max(8, n // 4)
    next_move = rng.randint(max(3, n // 15), hi)
    for t in range(n):
        if t == next_move:
            visible = [o for o in zones if o is not None]
            hidden = [o for o in objects if o not in zones]
            free = [i for i, o in enumerate(zones) if o is None]
            kinds = (["move", "move", "leave"] if visible else []) + (["come"] if hidden and len(visible) < 2 else [])
            kind = rng.choice(kinds)
            if kind == "come":
                zones[rng.choice(free)] = rng.choice(hidden)
            else:
                i = rng.choice([i for i, o in enumerate(zones) if o is not None])
                obj, zones[i] = zones[i], None
                if kind == "move":
                    zones[rng.choice(free)] = obj
            next_move = t + rng.randint(lo, hi)
        out.append(tuple(zones))
    return out


def _session_starts(rng: random.Random, durations: list[int]) -> list[int]:
    """Absolute start seconds: at most two sessions a day, hours apart, days sometimes skipped."""
    starts: list[int] = []
    day, per_day, t = 1, 0, 0
    for d in durations:
        if starts:
            t = starts[-1] + durations[len(starts) - 1] + rng.randint(2 * 3600, 6 * 3600)
        if not starts or per_day == 2 or t + d > (day - 1) * clock.SECONDS_PER_DAY + 22 * 3600:
            day += 0 if not starts else rng.choice([1, 1, 2])
            t = (day - 1) * clock.SECONDS_PER_DAY + 8 * 3600 + rng.randint(0, 3 * 3600)
            per_day = 0
        starts.append(t)
        per_day += 1
    return starts


def make_trajectory(trajectory_id: str, scale: Scale, rng: random.Random, index: int = 0) -> TrajectoryWorld:
    """Script the world of trajectory ``index`` of ``scale`` from ``rng``."""
    colours = rng.sample(list(OBJECT_COLOURS), 3)
    kinds = rng.sample(OBJECT_KINDS, 3)
    objects = {f"{c} {k}": c for c, k in zip(colours, kinds)}
    names = list(objects)
    words = rng.sample(WORDS, len(WORDS))
    n_sessions = scale.session_count(index, rng)
    durations = [rng.randint(*scale.duration) for _ in range(n_sessions)]
    zones: list[str | None] = [None, None, None]
    for i, obj in zip(rng.sample(range(3), 2), names):
        zones[i] = obj
    count = rng.randint(0, 2)
    sessions = []
    for index, (start, n) in enumerate(zip(_session_starts(rng, durations), durations)):
        actions = _actions(rng, n)
        counts = _counts(n, actions, count)
        count = counts[-1]
        signs = _signs(rng, n, words)
        placed = _zones(rng, n, names, zones)
        states = tuple(
            State(next(a for s, e, a in actions if s <= t < e), counts[t], signs[t], placed[t]) for t in range(n)
        )
        sessions.append(SessionWorld(index, clock.split(start)[0], f"S{index + 1:03d}", start, states))
    return TrajectoryWorld(trajectory_id, objects, tuple(sessions))


def session_json(s: SessionWorld) -> dict:
    """A session's timeline as runs of constant state: ``[start, end)`` in absolute seconds."""
    runs: list[dict] = []
    for t, state in enumerate(s.states):
        if runs and runs[-1]["state"] == state:
            runs[-1]["end"] = s.start + t + 1
        else:
            runs.append({"start": s.start + t, "end": s.start + t + 1, "state": state})
    return {
        "day_id": s.day_id,
        "session_id": s.session_id,
        "start": s.start,
        "end": s.end,
        "timeline": [{"start": r["start"], "end": r["end"], **r["state"].to_json()} for r in runs],
    }


def state_at(world: dict, trajectory_id: str, abs_second: int) -> dict | None:
    """The scripted state (``synth_world.json`` form) at an absolute second, or None between sessions."""
    traj = next(t for t in world["trajectories"] if t["trajectory_id"] == trajectory_id)
    for session in traj["sessions"]:
        for run in session["timeline"]:
            if run["start"] <= abs_second < run["end"]:
                return run
    return None
