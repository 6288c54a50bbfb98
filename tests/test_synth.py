"""The synthetic release: format, causality, determinism, and every answer proven from decoded pixels."""

from __future__ import annotations

import hashlib
import json
import random
import string
from collections import Counter
from pathlib import Path

import av
import numpy as np
import pytest

from apm.data import clock
from apm.data.instances import candidate_instances, release_instances
from apm.data.model import Candidate, Session, Trajectory
from apm.data.release import load_release
from apm.data.tasks import ADAPTIVE, CROSS_SESSION, EA, MCQA_TASKS, TASKS
from apm.records.atomic import OutputRefused
from apm.synth import generate, read_scene, read_sign, state_at, wording
from apm.synth import writer as synth_writer
from apm.synth.candidates import quota
from apm.synth.world import ACTIONS, SCALES, WORDS, ZONE_PLACES, ZONE_RELATIVE, ZONES

SEED = 7
MOMENT = ("day_id", "session_id", "start_time", "end_time", "evidence_content")
MCQA_KEYS = {"question", "choices", "correct_option_id", "query", "evidence_moments"}
TASK_KEYS = {
    **{t: MCQA_KEYS for t in MCQA_TASKS},
    "ERA": {"question", "choices", "correct_option_id", "answer_evidence_moments", "positive_heartbeat",
            "negative_heartbeats", "ideal_response_window"},
    "RCR": {"registration_event", "positive_heartbeat", "negative_heartbeats", "ideal_response_window"},
    "MPA": {"evidence_moments", "response_window_rationale", "reference_proactive_response",
            "ideal_response_window", "negative_or_silence_windows"},
    "PRM": {"registration_event", "trigger_match_reason", "reference_proactive_response",
            "ideal_response_window", "negative_or_silence_windows"},
    "TPG": {"evidence_moments", "memory_relevance", "ideal_response_windows", "negative_or_silence_windows"},
}
IDS = {"task_type", "trajectory_id", "candidate_id"}


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("synth") / "tiny", SEED, "tiny")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def release(root: Path) -> dict:
    return {
        "trajectories": json.loads((root / "trajectories.json").read_text()),
        "candidates": _jsonl(root / "candidates.jsonl"),
        "ea": _jsonl(root / "ea_candidates.jsonl"),
        "world": json.loads((root / "synth_world.json").read_text()),
    }


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


class Video:
    """All frames of a session video, decoded once, indexed by absolute wall-clock second."""

    def __init__(self, path: Path, start: int, fps: int):
        with av.open(str(path)) as container:
            frames = list(container.decode(video=0))
            self.duration = container.duration / av.time_base
        self.count = len(frames)
        self.start, self.fps = start, fps
        self._rgb = {
            round(f.time * fps): f.to_ndarray(format="rgb24") for f in frames if round(f.time * fps) % fps == 0
        }

    def at(self, abs_second: int) -> np.ndarray:
        """The first frame of the wall-clock second (its pixel code must say the same second)."""
        rgb = self._rgb[(abs_second - self.start) * self.fps]
        assert read_scene(rgb)["code"] == abs_second, clock.label(abs_second)
        return rgb


@pytest.fixture(scope="module")
def videos(root: Path, release: dict) -> dict[tuple[str, str, str], Video]:
    fps = release["world"]["fps"]
    return {
        (t["trajectory_id"], s["day_id"], s["session_id"]): Video(
            root / s["video"], clock.absolute(s["day_id"], s["start_time"]), fps
        )
        for t in release["trajectories"]
        for s in t["sessions"]
    }


def _abs(point: dict, field: str) -> int:
    return clock.absolute(point["day_id"], point[field])


def _frame(videos: dict, traj: str, point: dict, field: str) -> np.ndarray:
    return videos[(traj, point["day_id"], point["session_id"])].at(_abs(point, field))


def _span(videos: dict, traj: str, w: dict) -> list[np.ndarray]:
    """Frames of every second of an inclusive window ``[start_time, end_time]``."""
    video = videos[(traj, w["day_id"], w["session_id"])]
    return [video.at(t) for t in range(_abs(w, "start_time"), _abs(w, "end_time") + 1)]


def _correct(c: dict) -> str:
    return next(o["text"] for o in c["choices"] if o["option_id"] == c["correct_option_id"])


def _session_order(release: dict, traj: str) -> list[tuple[str, str]]:
    t = next(t for t in release["trajectories"] if t["trajectory_id"] == traj)
    return [(s["day_id"], s["session_id"]) for s in t["sessions"]]


def _index(release: dict, traj: str, point: dict) -> int:
    return _session_order(release, traj).index((point["day_id"], point["session_id"]))


# ---- generation ---------------------------------------------------------------------------------


def test_same_seed_is_byte_identical_and_seeds_differ(root: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", SEED, "tiny")
    other = generate(tmp_path / "other", SEED + 1, "tiny")
    first = _digest(root)
    assert any(k.endswith(".mp4") for k in first)
    assert _digest(again) == first
    assert _digest(other) != first
    assert {k: v for k, v in _digest(other).items() if k.endswith(".mp4")}.items().isdisjoint(first.items())


def test_limit_trajectories_gives_a_prefix(root: Path, tmp_path: Path) -> None:
    one = generate(tmp_path / "one", SEED, "tiny", limit_trajectories=1)
    assert len(json.loads((one / "trajectories.json").read_text())) == 1
    digest = _digest(one)
    assert all(_digest(root)[k] == v for k, v in digest.items() if k.startswith("videos/"))


def test_refuses_non_empty_out_and_leaves_nothing_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    with pytest.raises(OutputRefused, match="did not write it"):
        generate(busy, SEED, "tiny")
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]

    def boom(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(synth_writer, "write_session_video", boom)
    with pytest.raises(KeyboardInterrupt):
        generate(tmp_path / "cut", SEED, "tiny")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
    with pytest.raises(ValueError):
        generate(tmp_path / "bad", SEED, "huge")


# ---- format -------------------------------------------------------------------------------------


def test_trajectories_are_multi_day_ordered_and_match_their_videos(release: dict, videos: dict) -> None:
    world = release["world"]
    assert 1 <= len(release["trajectories"]) <= 3
    for t in release["trajectories"]:
        assert t["source"] == "synthetic" and t["title"]
        sessions = t["sessions"]
        assert 2 <= len(sessions) <= 4
        assert len({s["session_id"] for s in sessions}) == len(sessions)
        assert len({s["day_id"] for s in sessions}) >= 2
        spans = [(_abs(s, "start_time"), _abs(s, "end_time")) for s in sessions]
        assert all(a < b <= 60 + a for a, b in spans)
        assert all(b1 + 3600 <= a2 for (_, b1), (a2, _) in zip(spans, spans[1:]))  # hours apart
        for s, (a, b) in zip(sessions, spans):
            assert s["video"] == f"videos/{t['trajectory_id']}/{s['day_id']}_{s['session_id']}.mp4"
            video = videos[(t["trajectory_id"], s["day_id"], s["session_id"])]
            assert video.count == (b - a) * world["fps"] and video.duration >= b - a
            assert video.at(a).shape == (world["height"], world["width"], 3)
    assert world["width"] <= 160 and world["height"] <= 120


def test_every_task_and_both_ea_splits_with_exact_fields(release: dict) -> None:
    cands, ea = release["candidates"], release["ea"]
    assert {c["task_type"] for c in cands} == set(TASKS)
    ids = [c["candidate_id"] for c in cands]
    assert len(set(ids)) == len(ids)
    for c in cands:
        assert set(c) == IDS | TASK_KEYS[c["task_type"]], c["candidate_id"]
        if "choices" in c:
            assert [o["option_id"] for o in c["choices"]] == list("ABCD")
            assert len({o["text"] for o in c["choices"]}) == 4
            assert c["correct_option_id"] in "ABCD"
        for m in c.get("evidence_moments", []) + c.get("answer_evidence_moments", []):
            assert tuple(m) == MOMENT
    assert {e["evidence_available"] for e in ea} == {True, False}
    by_id = {c["candidate_id"]: c for c in cands}
    assert len({e["candidate_id"] for e in ea}) == len(ea)
    for e in ea:
        original = by_id[e["original_candidate_id"]]
        assert e["task_type"] == original["task_type"] in ("ER", "EST", "TR")
        assert set(e) == IDS | MCQA_KEYS | {"evidence_available", "original_candidate_id"}
        assert [o["option_id"] for o in e["choices"]] == list("ABCDE")
        assert e["choices"][:4] == original["choices"]
        query = _index(release, e["trajectory_id"], e["query"])
        recent = {query - 1, query - 2}
        assert e["evidence_available"] == all(
            _index(release, e["trajectory_id"], m) in recent for m in e["evidence_moments"]
        )
        assert e["correct_option_id"] == (original["correct_option_id"] if e["evidence_available"] else "E")


def _trajectory_model(t: dict) -> Trajectory:
    sessions = tuple(
        Session(
            t["trajectory_id"],
            s["day_id"],
            s["session_id"],
            i,
            _abs(s, "start_time"),
            _abs(s, "end_time"),
            Path(s["video"]),
        )
        for i, s in enumerate(t["sessions"])
    )
    return Trajectory(t["trajectory_id"], t["source"], t["title"], sessions)


def test_instances_expand_with_positive_and_negative_probes(release: dict) -> None:
    trajs = {t["trajectory_id"]: _trajectory_model(t) for t in release["trajectories"]}
    for c in release["candidates"] + release["ea"]:
        task = "EA" if "evidence_available" in c else c["task_type"]
        instances = candidate_instances(
            Candidate(task, c["trajectory_id"], c["candidate_id"], c), trajs[c["trajectory_id"]]
        )
        if task in ADAPTIVE:
            assert {i.polarity for i in instances} == {"positive", "negative"}, c["candidate_id"]
            for i in instances:
                assert all(turn.time <= i.probe_time for turn in i.turns)
                assert i.window_start is None or i.window_start < i.probe_time
        else:
            assert len(instances) == 1


# ---- causality ----------------------------------------------------------------------------------


def _points(c: dict) -> list[tuple[dict, str]]:
    """Every (point, time field) of a candidate."""
    out: list[tuple[dict, str]] = []
    for key, value in c.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and "day_id" in item:
                out += [(item, f) for f in ("query_time", "registration_time", "start_time", "end_time") if f in item]
    return out


def test_causality(release: dict) -> None:
    spans = {
        (t["trajectory_id"], s["day_id"], s["session_id"]): (_abs(s, "start_time"), _abs(s, "end_time"))
        for t in release["trajectories"]
        for s in t["sessions"]
    }
    for c in release["candidates"] + release["ea"]:
        traj, task = c["trajectory_id"], c["task_type"]
        for point, field in _points(c):
            lo, hi = spans[(traj, point["day_id"], point["session_id"])]
            assert lo <= _abs(point, field) <= hi, (c["candidate_id"], field)
        idx = lambda p: _index(release, traj, p)  # noqa: E731
        if task in MCQA_TASKS:
            q = _abs(c["query"], "query_time")
            for m in c["evidence_moments"]:
                assert _abs(m, "start_time") <= _abs(m, "end_time") <= q
                assert (idx(m) < idx(c["query"])) if task in ("ER", "EST", "TR") else idx(m) == idx(c["query"])
        if task == "ERA":
            pos = c["positive_heartbeat"]
            negs = [_abs(n, "query_time") for n in c["negative_heartbeats"]]
            assert {idx(p) for p in [pos, *c["negative_heartbeats"], *c["answer_evidence_moments"]]} == {idx(pos)}
            for m in c["answer_evidence_moments"]:
                assert max(negs) < _abs(m, "end_time") <= _abs(pos, "query_time")
        if task == "RCR":
            reg = _abs(c["registration_event"], "registration_time")
            assert idx(c["registration_event"]) == idx(c["positive_heartbeat"])
            assert all(reg < _abs(h, "query_time") for h in [c["positive_heartbeat"], *c["negative_heartbeats"]])
        windows = [
            *([c["ideal_response_window"]] if "ideal_response_window" in c else c.get("ideal_response_windows", [])),
            *c.get("negative_or_silence_windows", []),
        ]
        assert all(_abs(w, "start_time") < _abs(w, "end_time") for w in windows)
        if task in ("MPA", "TPG"):
            for m in c["evidence_moments"]:
                assert all(idx(m) < idx(w) for w in windows)
        if task == "PRM":
            assert all(idx(c["registration_event"]) < idx(w) for w in windows)


# ---- answers proven from pixels -----------------------------------------------------------------


def _colour_of(release: dict, traj: str, obj: str) -> str:
    world = next(t for t in release["world"]["trajectories"] if t["trajectory_id"] == traj)
    return world["objects"][obj]


def test_world_script_matches_pixels(release: dict, videos: dict) -> None:
    world = release["world"]
    rng = random.Random(0)
    for t in world["trajectories"]:
        for s in t["sessions"]:
            video = videos[(t["trajectory_id"], s["day_id"], s["session_id"])]
            for second in rng.sample(range(s["start"], s["end"]), 12):
                state, rgb = state_at(world, t["trajectory_id"], second), video.at(second)
                scene = read_scene(rgb)
                assert scene["action"] == state["action"] and scene["count"] == state["count"]
                assert scene["zones"] == {z: t["objects"][o] if o else None for z, o in state["zones"].items()}
                assert read_sign(rgb, list(WORDS)) == state["sign"]
    assert state_at(world, world["trajectories"][0]["trajectory_id"], 0) is None


def _check_mcqa(c: dict, proof: dict, release: dict, videos: dict) -> None:
    traj, task, answer = c["trajectory_id"], c["task_type"], _correct(c)
    texts = [o["text"] for o in c["choices"]]
    at_query = _frame(videos, traj, c["query"], "query_time")
    if task in ("ACR", "CT", "OCR", "STU"):
        evidence = _span(videos, traj, c["evidence_moments"][0]) + [at_query]
        for rgb in evidence:  # the answer holds from the evidence start through the query
            scene = read_scene(rgb)
            if task == "ACR":
                assert scene["action"] == answer
            elif task == "CT":
                assert scene["count"] == int(answer)
            elif task == "OCR":
                assert read_sign(rgb, texts) == answer
            else:
                zone = next(z for z in ZONES if ZONE_RELATIVE[z] == answer)
                assert scene["zones"][zone] == proof["object_colour"]
    elif task == "ER":
        for rgb in _span(videos, traj, c["evidence_moments"][0]):
            assert read_scene(rgb)["action"] == answer
            assert read_sign(rgb, list(WORDS)) == proof["word"] and f"'{proof['word']}'" in c["question"]
    elif task == "EST":
        zone = next(z for z in ZONES if ZONE_PLACES[z].lower() == answer.lower())
        moment = c["evidence_moments"][0]
        rgb = _frame(videos, traj, moment, "end_time")
        assert read_scene(rgb)["zones"][zone] == proof["object_colour"]
        last = _session_order(release, traj)[_index(release, traj, moment)]
        session = next(
            s
            for t in release["trajectories"]
            if t["trajectory_id"] == traj
            for s in t["sessions"]
            if (s["day_id"], s["session_id"]) == last
        )
        assert _abs(moment, "end_time") == _abs(session, "end_time") - 1  # the session's last second
    else:  # TR: each sign at its evidence, in the order of the correct option
        words = [read_sign(_frame(videos, traj, m, "start_time"), list(WORDS)) for m in c["evidence_moments"]]
        starts = [_abs(m, "start_time") for m in c["evidence_moments"]]
        assert starts == sorted(starts) and answer == ", then ".join(str(w) for w in words)


def _met(rgb: np.ndarray, proof: dict) -> bool:
    return read_scene(rgb)["zones"][proof["zone"]] == proof["object_colour"]


def _between(videos: dict, traj: str, first: int, last: int) -> list[np.ndarray]:
    """Frames of every recorded second from ``first`` to ``last`` (absolute, inclusive), across sessions."""
    return [
        v.at(t)
        for (tid, _, _), v in videos.items()
        if tid == traj
        for t in range(max(first, v.start), min(last + 1, v.start + v.count // v.fps))
    ]


def _check_adaptive(c: dict, proof: dict, release: dict, videos: dict) -> None:
    traj, task = c["trajectory_id"], c["task_type"]
    if task == "ERA":
        words = [o["text"] for o in c["choices"]]
        pos = c["positive_heartbeat"]
        video = videos[(traj, pos["day_id"], pos["session_id"])]
        last_negative = max(_abs(n, "query_time") for n in c["negative_heartbeats"])
        assert all(read_sign(video.at(t), words) is None for t in range(video.start, last_negative + 1))
        assert read_sign(_frame(videos, traj, pos, "query_time"), words) == _correct(c)
        for m in c["answer_evidence_moments"]:
            assert all(read_sign(rgb, words) == _correct(c) for rgb in _span(videos, traj, m))
        return
    if task in ("RCR", "PRM"):  # unmet from the registration until the reminder is due
        window = c["ideal_response_window"]
        registered = _abs(c["registration_event"], "registration_time")
        assert not any(_met(rgb, proof) for rgb in _between(videos, traj, registered, _abs(window, "start_time") - 1))
    if task == "RCR":
        assert all(not _met(_frame(videos, traj, n, "query_time"), proof) for n in c["negative_heartbeats"])
        assert _met(_frame(videos, traj, c["positive_heartbeat"], "query_time"), proof)
        assert all(_met(rgb, proof) for rgb in _span(videos, traj, c["ideal_response_window"]))
        return
    negatives = [rgb for w in c["negative_or_silence_windows"] for rgb in _span(videos, traj, w)]
    positives = [
        rgb
        for w in ([c["ideal_response_window"]] if task != "TPG" else c["ideal_response_windows"])
        for rgb in _span(videos, traj, w)
    ]
    if task == "PRM":
        assert not any(_met(rgb, proof) for rgb in negatives) and all(_met(rgb, proof) for rgb in positives)
        return
    action = proof["action"]
    assert all(read_scene(rgb)["action"] != action for rgb in negatives)
    assert all(read_scene(rgb)["action"] == action for rgb in positives)
    for m, moment in enumerate(c["evidence_moments"]):
        for rgb in _span(videos, traj, moment):
            scene = read_scene(rgb)
            assert scene["action"] == action
            if task == "MPA":
                assert scene["zones"][proof["zone"]] == proof["object_colour"]
            else:
                assert (
                    scene["count"] == proof["counts"][m] and f"{proof['counts'][m]} items" in moment["evidence_content"]
                )


def test_answers_are_proven_from_pixels(release: dict, videos: dict) -> None:
    proofs = release["world"]["proofs"]
    assert set(proofs) == {c["candidate_id"] for c in release["candidates"]}
    checked: set[str] = set()
    for c in release["candidates"]:
        check = _check_mcqa if c["task_type"] in MCQA_TASKS else _check_adaptive
        check(c, proofs[c["candidate_id"]], release, videos)
        checked.add(c["task_type"])
    assert checked == set(TASKS)


def test_texts_name_what_the_pixels_show(release: dict) -> None:
    """The facts proven from pixels are the ones the questions and references talk about."""
    proofs = release["world"]["proofs"]
    for c in release["candidates"]:
        proof, text = proofs[c["candidate_id"]], json.dumps(c)
        if "object_colour" in proof:
            assert f"{proof['object_colour']} " in text and ZONE_PLACES[proof["zone"]].split()[-1] in text
        if "action" in proof and c["task_type"] != "TPG":
            assert proof["action"] in text and proof["action"] in ACTIONS


def test_scene_reads_back_after_resizing() -> None:
    """What the frame cache may do to a paper-scale frame (640x360 to 448 or 160 max side) keeps it legible."""
    from PIL import Image

    from apm.synth.render import render_state
    from apm.synth.world import State

    objects = {"red mug": "red", "blue box": "blue", "cyan jar": "cyan"}
    for i, (action, zones) in enumerate(zip(ACTIONS, [("red mug", None, "blue box"), (None, "cyan jar", None)] * 4)):
        state = State(action, i % 9, WORDS[i * 7] if i % 2 else None, zones)
        second = 86_400 + 14 * 3600 + i * 61
        scale = SCALES["paper"]
        rgb = render_state(state, second, objects, scale.width, scale.height)
        for size in [(640, 360), (448, 252), (160, 90)]:
            small = np.asarray(Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR))
            scene = read_scene(small)
            assert scene["code"] == second and scene["action"] == action and scene["count"] == i % 9
            assert scene["zones"] == {z: objects[o] if o else None for z, o in zip(ZONES, zones)}
            words = sorted({*WORDS[::10], *([state.sign] if state.sign else [])})  # distractors + the word
            assert read_sign(small, words) == state.sign


PAPER_CANDIDATES = {"ER": 327, "EST": 298, "TR": 262, "ACR": 202, "CT": 195, "OCR": 166, "STU": 153,
                    "ERA": 210, "RCR": 210, "MPA": 232, "PRM": 232, "TPG": 232}
"""The paper's candidates per task: MCQA from Table 4 (each accuracy is a count over these, e.g.
SimpleStream's ER 27.52 = 90/327), 887 cross-session + 716 perception (Section 3.3)."""


def test_paper_plan_splits_the_papers_candidates_per_task() -> None:
    """The paper scale's plan (before any world is drawn or video rendered) has Table 4's per-task MCQA
    populations, 887 cross-session / 716 perception, 3,768 adaptive probes and 130 + 130 EA, and the
    trajectories' quotas add up to exactly those totals."""
    scale = SCALES["paper"]
    plan = scale.plan
    assert plan is not None and dict(plan.candidates) == PAPER_CANDIDATES
    assert sum(plan.candidates[t] for t in CROSS_SESSION) == 887
    assert sum(plan.candidates[t] for t in MCQA_TASKS if t not in CROSS_SESSION) == 716
    assert sum(plan.candidates[t] * plan.probes[t] for t in ADAPTIVE) == 3768 and plan.ea == (130, 130)
    quotas = [quota(scale, i) for i in range(scale.trajectories)]
    assert {t: sum(q.per_task[t] for q in quotas) for t in TASKS} == PAPER_CANDIDATES
    assert tuple(sum(q.ea[i] for q in quotas if q.ea) for i in (0, 1)) == (130, 130)


@pytest.mark.slow
def test_paper_scale_has_the_papers_populations(tmp_path: Path) -> None:
    """Seed 0's paper scale mines the paper's populations exactly (videos not written): 104 trajectories,
    549 sessions, 2,719 candidates (1,603 MCQA + 1,116 adaptive), 5,371 probes of the 12 tasks (3,768 adaptive)
    and 130 + 130 EA questions, and the release validates."""
    scale = SCALES["paper"]
    mined = list(synth_writer.mined_release(0, scale, scale.trajectories))
    synth_writer.write_manifests(tmp_path, 0, scale, mined)
    release = load_release(tmp_path, check_videos=False)
    assert len(release.trajectories) == 104 and sum(len(t.sessions) for t in release.trajectories) == 549
    candidates = Counter(c.task for c in release.candidates)
    assert candidates == PAPER_CANDIDATES
    assert sum(candidates[t] for t in MCQA_TASKS) == 1603 and sum(candidates[t] for t in ADAPTIVE) == 1116
    probes = Counter(i.task for i in release_instances(release))
    assert sum(probes[t] for t in ADAPTIVE) == 3768 and sum(probes[t] for t in TASKS) == 5371 and probes[EA] == 260
    assert Counter(c.fields["evidence_available"] for c in release.ea_candidates) == {True: 130, False: 130}
    originals = {c.fields["original_candidate_id"] for c in release.ea_candidates}
    assert originals <= {c.candidate_id for c in release.candidates if c.task in CROSS_SESSION}


@pytest.mark.parametrize("name", [n for n in vars(wording) if n.isupper()])
def test_each_question_and_reminder_reads_back_what_it_was_filled_with(name):
    """The perceiver reads the generator's wording through wording.pattern: a filled template gives back
    its fields, so rewording a template in apm/synth/wording.py rewords what the perceiver reads too."""
    template = getattr(wording, name)
    fields = {f: f"the odd {f} value" for _, f, _, _ in string.Formatter().parse(template) if f}
    m = wording.pattern(template, at_end=True, **{f: ".+" for f in fields}).search(
        "user said: " + template.format(**fields))
    assert m is not None and m.groupdict() == fields

