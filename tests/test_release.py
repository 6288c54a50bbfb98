"""The loader accepts a valid release and rejects each kind of bad input with its exact place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.release import base_release, mutated, write_release, write_video

from apm.cli.data import main as apm_data
from apm.data import clock
from apm.data.instances import release_instances
from apm.data.problems import ReleaseError
from apm.data.release import load_release


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    root = write_release(tmp_path_factory.mktemp("template"), base_release())
    return root / "videos"


def make(tmp_path: Path, videos: Path, data: dict) -> Path:
    root = write_release(tmp_path / "release", data, videos=False)
    shutil.copytree(videos, root / "videos")
    return root


def test_valid_release_loads_in_session_order(tmp_path, videos):
    data = base_release()
    data["trajectories"][0]["sessions"].reverse()  # order comes from (day, start), not the file
    release = load_release(make(tmp_path, videos, data))
    sessions = release.trajectories[0].sessions
    assert [s.key for s in sessions] == ["DAY1/S001", "DAY1/S002", "DAY2/S003", "DAY2/S004"]
    assert [s.index for s in sessions] == [0, 1, 2, 3]
    # the real-world gap between sessions is kept: DAY1 15:00:20 -> DAY2 09:00:00
    assert sessions[2].start - sessions[1].end == 18 * 3600 - 20
    assert sessions[1].offset(clock.absolute("DAY1", "15:00:12")) == 12
    assert len(release.candidates) == 7 and len(release.ea_candidates) == 2


def test_instances_expand_as_design_says(tmp_path, videos):
    release = load_release(make(tmp_path, videos, base_release()))
    by_key = {i.key: i for i in release_instances(release)}
    assert set(by_key) == {
        "T1/c-er/query", "T1/c-acr/query",
        "T1/c-era/pos", "T1/c-era/neg0", "T1/c-rcr/pos", "T1/c-rcr/neg0",
        "T1/c-mpa/pos", "T1/c-mpa/neg0", "T1/c-prm/pos", "T1/c-prm/neg0",
        "T1/c-tpg/pos0", "T1/c-tpg/neg0", "T1/ea-1/ea", "T1/ea-2/ea",
    }
    era = by_key["T1/c-era/neg0"]
    assert [t.kind for t in era.turns] == ["question"]
    assert era.turns[0].time == clock.absolute("DAY1", "15:00:00")  # released at session start
    assert era.polarity == "negative" and era.correct_option == "B"
    prm = by_key["T1/c-prm/pos"]
    assert [(t.kind, clock.label(t.time)) for t in prm.turns] == [
        ("registration", "DAY1 10:00:04"), ("interval_marker", "DAY1 15:00:15")]
    assert prm.probe_time == clock.absolute("DAY1", "15:00:17") and prm.window_start == clock.absolute(
        "DAY1", "15:00:15"
    )
    assert by_key["T1/c-rcr/pos"].turns[0].kind == "registration"
    assert by_key["T1/c-er/query"].visible_sessions == ("DAY1/S001", "DAY1/S002", "DAY2/S003", "DAY2/S004")
    ea = by_key["T1/ea-1/ea"]
    assert ea.visible_sessions == ("DAY1/S002", "DAY2/S003", "DAY2/S004") and ea.evidence_available is True
    assert ea.family == "ea" and by_key["T1/c-tpg/pos0"].family == "adaptive"


def _set(path, value):
    def change(data):
        *head, last = path
        node = data
        for p in head:
            node = node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value

    return change


C = "candidates"
BAD_INPUTS = {
    "unknown task": (_set((C, 0, "task_type"), "XYZ"), "candidates.jsonl:1: task_type: unknown task type 'XYZ'"),
    "missing field": (_set((C, 2, "positive_heartbeat"), KeyError), "candidates.jsonl:3: positive_heartbeat: missing"),
    "mistyped field": (_set((C, 0, "question"), 42), "candidates.jsonl:1: question: expected a string, got 42"),
    "duplicate candidate": (
        _set((C, 1, "candidate_id"), "c-er"),
        "candidates.jsonl:2: candidate_id: duplicate candidate id 'c-er' (first on line 1)",
    ),
    "duplicate trajectory": (
        lambda d: d["trajectories"].append(dict(d["trajectories"][0])),
        "trajectories.json:38: [1].trajectory_id: duplicate trajectory id 'T1'",
    ),
    "duplicate session": (
        _set(("trajectories", 0, "sessions", 1, "session_id"), "S001"),
        "trajectories.json:16: [0].sessions[1].session_id: duplicate session DAY1/S001",
    ),
    "unknown session": (
        _set((C, 0, "query", "session_id"), "S999"),
        "candidates.jsonl:1: query.session_id: no session DAY2/S999 in trajectory T1",
    ),
    "unknown trajectory": (
        _set((C, 0, "trajectory_id"), "T9"),
        "candidates.jsonl:1: trajectory_id: no trajectory 'T9'",
    ),
    "bad time format": (
        _set((C, 0, "query", "query_time"), "12:0:10"),
        "candidates.jsonl:1: query.query_time: not HH:MM:SS: '12:0:10'",
    ),
    "time outside session": (
        _set((C, 0, "query", "query_time"), "12:30:00"),
        "candidates.jsonl:1: query.query_time: 12:30:00 is outside session DAY2/S004 [12:00:00, 12:00:20]",
    ),
    "evidence after query": (
        _set((C, 1, "evidence_moments", 0, "end_time"), "15:00:11"),
        "candidates.jsonl:2: evidence_moments[0].end_time: evidence ends at DAY1 15:00:11, "
        "after the probe at DAY1 15:00:10 (causality)",
    ),
    "registration after probe": (
        _set((C, 3, "registration_event", "registration_time"), "10:00:07"),
        "candidates.jsonl:4: registration_event.registration_time: registered at DAY1 10:00:07, "
        "after the probe at DAY1 10:00:06 (causality)",
    ),
    "PRM registration same session": (
        lambda d: d[C][5]["registration_event"].update(session_id="S002", registration_time="15:00:00"),
        "candidates.jsonl:6: registration_event.session_id: a PRM registration must be in a session before DAY1/S002",
    ),
    "option outside A-D": (
        _set((C, 0, "choices", 3, "option_id"), "E"),
        "candidates.jsonl:1: choices[3].option_id: 'E' is not an option id (A-D)",
    ),
    "correct option not a choice": (
        _set((C, 0, "correct_option_id"), "F"),
        "candidates.jsonl:1: correct_option_id: 'F' is not among the choices ABCD",
    ),
    "EA option outside A-E": (
        _set(("ea", 0, "choices", 4, "option_id"), "F"),
        "ea_candidates.jsonl:1: choices[4].option_id: 'F' is not an option id (A-E)",
    ),
    "EA unavailable but answer not E": (
        _set(("ea", 1, "correct_option_id"), "A"),
        "ea_candidates.jsonl:2: correct_option_id: evidence is unavailable, so the correct option must be E",
    ),
    "EA availability wrong": (
        lambda d: d["ea"][0].update(evidence_available=False, correct_option_id="E"),
        "ea_candidates.jsonl:1: evidence_available: is false, "
        "but the evidence is within the 2 sessions before DAY2/S004",
    ),
    "EA built from a candidate that is not there": (
        _set(("ea", 0, "original_candidate_id"), "c-gone"),
        "ea_candidates.jsonl:1: original_candidate_id: names no candidate of candidates.jsonl: "
        "'c-gone' is missing",
    ),
    "window start >= end": (
        _set((C, 4, "ideal_response_window", "end_time"), "09:00:10"),
        "candidates.jsonl:5: ideal_response_window.start_time: start 09:00:10 is not before end 09:00:10",
    ),
    "empty TPG windows": (
        _set((C, 6, "ideal_response_windows"), []),
        "candidates.jsonl:7: ideal_response_windows: must not be empty",
    ),
    "ERA heartbeats across sessions": (
        lambda d: d[C][2]["negative_heartbeats"][0].update(session_id="S001", day_id="DAY1", query_time="10:00:05"),
        "candidates.jsonl:3: negative_heartbeats: ERA heartbeats must all be in the session",
    ),
    "session end before start": (
        _set(("trajectories", 0, "sessions", 0, "end_time"), "09:59:00"),
        "trajectories.json:11: [0].sessions[0].end_time: 09:59:00 is not after start_time 10:00:00",
    ),
    "overlapping sessions": (
        lambda d: d["trajectories"][0]["sessions"][1].update(start_time="10:00:10", end_time="10:00:30"),
        "trajectories.json:17: [0].sessions[1].start_time: session DAY1/S002 overlaps DAY1/S001",
    ),
    "bad day id": (
        _set(("trajectories", 0, "sessions", 0, "day_id"), "Day1"),
        "trajectories.json:8: [0].sessions[0].day_id: not DAYn: 'Day1'",
    ),
    "cross-session evidence in query session": (
        _set(
            (C, 0, "evidence_moments", 0),
            {
                "day_id": "DAY2",
                "session_id": "S004",
                "start_time": "12:00:01",
                "end_time": "12:00:02",
                "evidence_content": "x",
            },
        ),
        "candidates.jsonl:1: evidence_moments[0].session_id: "
        "cross-session evidence must come from an earlier session than DAY2/S004",
    ),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_rejected_with_its_place(name, tmp_path, videos, capsys):
    change, expected = BAD_INPUTS[name]
    root = make(tmp_path, videos, mutated(change))
    before = sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*"))
    assert apm_data(["validate", str(root)]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert sorted((p, p.stat().st_mtime_ns) for p in root.rglob("*")) == before  # nothing written


def test_malformed_json_names_the_line(tmp_path, videos):
    root = make(tmp_path, videos, base_release())
    lines = (root / "candidates.jsonl").read_text().splitlines()
    lines[3] = lines[3][:-1]
    (root / "candidates.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ReleaseError) as e:
        load_release(root)
    assert "candidates.jsonl:4: (syntax): malformed JSON" in str(e.value)
    (root / "trajectories.json").write_text('[{"trajectory_id": "T1",\n "sessions": [}]')
    with pytest.raises(ReleaseError) as e:
        load_release(root)
    assert "trajectories.json:2: (syntax): malformed JSON" in str(e.value)


@pytest.mark.parametrize(
    "damage,expected",
    [
        ("missing", "is missing"),
        ("empty", "is unusable: empty file"),
        ("garbage", "is unusable: unreadable"),
        ("short", "lasts 10.0 s, shorter than its session (20 s)"),
    ],
)
def test_bad_videos_are_rejected(tmp_path, videos, damage, expected):
    root = make(tmp_path, videos, base_release())
    video = root / "videos/T1/DAY1_S002.mp4"
    if damage == "missing":
        video.unlink()
    elif damage == "empty":
        video.write_bytes(b"")
    elif damage == "garbage":
        video.write_bytes(b"not a video at all" * 100)
    else:
        write_video(video, 10)
    with pytest.raises(ReleaseError) as e:
        load_release(root)
    assert f"trajectories.json:19: [0].sessions[1].video: video file {video} {expected}" in str(e.value)


def test_every_problem_is_listed_at_once(tmp_path, videos):
    def many(d):
        d["candidates"][0]["task_type"] = "XYZ"
        d["candidates"][1]["question"] = 1
        d["ea"][1]["correct_option_id"] = "A"

    root = make(tmp_path, videos, mutated(many))
    with pytest.raises(ReleaseError) as e:
        load_release(root)
    assert e.value.problems.report().count("\n") == 2
    assert str(e.value).startswith(f"{root}: 3 problems in the release")


def test_stats_counts_tasks_and_polarities(tmp_path, videos, capsys):
    root = make(tmp_path, videos, base_release())
    assert apm_data(["stats", str(root), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["candidates_per_task"]["ERA"] == 1 and stats["candidates_per_task"]["OCR"] == 0
    assert stats["instances_per_task_polarity"]["TPG/positive"] == 1
    assert stats["ea_candidates"] == {"evidence_available": 1, "evidence_unavailable": 1}
    assert stats["instances"] == 14


UNUSABLE_TEXT = {
    "bytes that are not UTF-8": (
        "candidates.jsonl",
        b'"Where was',
        b'"Where \xff was',
        "candidates.jsonl:1: (encoding): not UTF-8: byte 0xff at column",
    ),
    "nesting deeper than the parser recurses": (
        "trajectories.json",
        b'"kitchen"',
        b"[" * 5000 + b"]" * 5000,
        "trajectories.json:5: (syntax): nested deeper than 64 levels",
    ),
    "a number past the int-string limit": (
        "candidates.jsonl",
        b'"Where was the mug?"',
        b"9" * 5000,
        "candidates.jsonl:1: (syntax): a number with more than 4300 digits",
    ),
    "a day past any trajectory": (
        "trajectories.json",
        b'"DAY1"',
        b'"DAY' + b"9" * 5000 + b'"',
        "trajectories.json:8: [0].sessions[0].day_id: day number above 9999: 'DAY99999",
    ),
    "a lone surrogate": (
        "candidates.jsonl",
        b'"Where was',
        b'"Where \\ud800 was',
        "candidates.jsonl:1: question: holds a lone surrogate escape (not Unicode text)",
    ),
    "a key given twice": (
        "candidates.jsonl",
        b'"question": ',
        b'"question": "a", "question": ',
        "candidates.jsonl:1: question: appears twice in its object",
    ),
    "a newline in a reference": (
        "candidates.jsonl",
        b'"S004"',
        b'"S\\n004"',
        "candidates.jsonl:1: query.session_id: no session DAY2/S\\n004 in trajectory T1",
    ),
    "a NUL in a video path": (
        "trajectories.json",
        b'"videos/T1/DAY1_S001.mp4"',
        b'"videos/T1/\\u0000.mp4"',
        "trajectories.json:12: [0].sessions[0].video: 'videos/T1/\\x00.mp4' is not a relative path",
    ),
    "a video outside the release": (
        "trajectories.json",
        b'"videos/T1/DAY1_S001.mp4"',
        b'"../DAY1_S001.mp4"',
        "[0].sessions[0].video: '../DAY1_S001.mp4' is not a relative path inside the release",
    ),
    "a video name too long for the file system": (
        "trajectories.json",
        b'"videos/T1/DAY1_S001.mp4"',
        b'"videos/' + b"x" * 300 + b'.mp4"',
        "xxx.mp4 is unusable: File name too long",
    ),  # the middle of the long path is cut
}


@pytest.mark.parametrize("name", list(UNUSABLE_TEXT))
def test_unusable_text_is_one_problem_line_not_a_crash(name, tmp_path, videos, capsys):
    file, old, new, expected = UNUSABLE_TEXT[name]
    root = make(tmp_path, videos, base_release())
    data = (root / file).read_bytes()
    (root / file).write_bytes(data.replace(old, new, 1))
    assert apm_data(["validate", str(root)]) == 2
    header, *lines = capsys.readouterr().err.splitlines()
    assert header == f"error: {root}: {len(lines)} problem{'s' * (len(lines) > 1)} in the release"
    assert any(expected in line for line in lines), lines
    assert all(len(line) < 400 for line in lines)  # a pasted 5,000-character value loses its middle


@pytest.mark.parametrize("text", ["11:02:10\n", "١١:02:10", " 11:02:10"])
def test_times_are_exactly_hh_mm_ss_in_ascii_digits(text: str) -> None:
    from apm.data import clock

    with pytest.raises(clock.ClockError):
        clock.parse_hms(text)
    with pytest.raises(clock.ClockError):
        clock.parse_day("DAY1\n")
