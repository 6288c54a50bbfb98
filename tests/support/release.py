"""A small hand-written release (one trajectory, four sessions, every annotation format) for tests
that need exact control over each field; the synthetic generator covers realistic content."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

SESSIONS = [
    ("DAY1", "S001", "10:00:00", "10:00:20"),
    ("DAY1", "S002", "15:00:00", "15:00:20"),
    ("DAY2", "S003", "09:00:00", "09:00:20"),
    ("DAY2", "S004", "12:00:00", "12:00:20"),
]


def _choices(n: int = 4) -> list[dict[str, str]]:
    return [{"option_id": o, "text": f"option {o}"} for o in "ABCDE"[:n]]


def _pt(day: str, sess: str, t: str, **extra: Any) -> dict[str, Any]:
    return {"day_id": day, "session_id": sess, "query_time": t, **extra}


def _span(day: str, sess: str, a: str, b: str, **extra: Any) -> dict[str, Any]:
    return {"day_id": day, "session_id": sess, "start_time": a, "end_time": b, **extra}


def _ev(day: str, sess: str, a: str, b: str) -> dict[str, Any]:
    return _span(day, sess, a, b, evidence_content="the mug is on the shelf")


def _reg(day: str, sess: str, t: str) -> dict[str, Any]:
    return {
        "day_id": day,
        "session_id": sess,
        "registration_time": t,
        "registration_text": "remind me when the kettle boils",
    }


def base_release() -> dict[str, Any]:
    """The valid release as plain data: ``{"trajectories": [...], "candidates": [...], "ea": [...]}``."""
    ids = {"trajectory_id": "T1"}
    mcqa = {"question": "Where was the mug?", "choices": _choices(), "correct_option_id": "B"}
    candidates = [
        {
            "task_type": "ER",
            **ids,
            "candidate_id": "c-er",
            **mcqa,
            "query": _pt("DAY2", "S004", "12:00:10"),
            "evidence_moments": [_ev("DAY1", "S001", "10:00:02", "10:00:05")],
        },
        {
            "task_type": "ACR",
            **ids,
            "candidate_id": "c-acr",
            **mcqa,
            "query": _pt("DAY1", "S002", "15:00:10"),
            "evidence_moments": [_ev("DAY1", "S002", "15:00:08", "15:00:10")],
        },
        {
            "task_type": "ERA",
            **ids,
            "candidate_id": "c-era",
            **mcqa,
            "answer_evidence_moments": [_ev("DAY1", "S002", "15:00:10", "15:00:12")],
            "positive_heartbeat": _pt("DAY1", "S002", "15:00:12", response_reason="now visible"),
            "negative_heartbeats": [_pt("DAY1", "S002", "15:00:05", silence_reason="not yet")],
            "ideal_response_window": _span("DAY1", "S002", "15:00:12", "15:00:14"),
        },
        {
            "task_type": "RCR",
            **ids,
            "candidate_id": "c-rcr",
            "registration_event": _reg("DAY1", "S001", "10:00:03"),
            "positive_heartbeat": _pt(
                "DAY1", "S001", "10:00:15", proactive_response="the kettle boils", reason="steam"
            ),
            "negative_heartbeats": [_pt("DAY1", "S001", "10:00:06", silence_reason="cold")],
            "ideal_response_window": _span("DAY1", "S001", "10:00:15", "10:00:16"),
        },
        {
            "task_type": "MPA",
            **ids,
            "candidate_id": "c-mpa",
            "evidence_moments": [_ev("DAY1", "S001", "10:00:02", "10:00:05")],
            "response_window_rationale": "same activity",
            "reference_proactive_response": "use the blue mug",
            "ideal_response_window": _span("DAY2", "S003", "09:00:10", "09:00:14"),
            "negative_or_silence_windows": [_span("DAY2", "S003", "09:00:02", "09:00:06", silence_reason="idle")],
        },
        {
            "task_type": "PRM",
            **ids,
            "candidate_id": "c-prm",
            "registration_event": _reg("DAY1", "S001", "10:00:04"),
            "trigger_match_reason": "kettle visible",
            "reference_proactive_response": "the kettle",
            "ideal_response_window": _span("DAY1", "S002", "15:00:15", "15:00:17"),
            "negative_or_silence_windows": [_span("DAY1", "S002", "15:00:01", "15:00:05", silence_reason="no kettle")],
        },
        {
            "task_type": "TPG",
            **ids,
            "candidate_id": "c-tpg",
            "evidence_moments": [_ev("DAY1", "S002", "15:00:01", "15:00:05")],
            "memory_relevance": "same dish",
            "ideal_response_windows": [
                _span(
                    "DAY2",
                    "S004",
                    "12:00:05",
                    "12:00:08",
                    response_window_rationale="resumes",
                    reference_proactive_response="add salt",
                )
            ],
            "negative_or_silence_windows": [_span("DAY2", "S004", "12:00:10", "12:00:15", silence_reason="done")],
        },
    ]
    ea = [
        {
            **ids,
            "candidate_id": "ea-1",
            "question": "q",
            "choices": _choices(5),
            "correct_option_id": "B",
            "query": _pt("DAY2", "S004", "12:00:05"),
            "evidence_moments": [_ev("DAY1", "S002", "15:00:02", "15:00:04")],
            "evidence_available": True,
            "original_candidate_id": "c-er",
        },
        {
            **ids,
            "candidate_id": "ea-2",
            "question": "q",
            "choices": _choices(5),
            "correct_option_id": "E",
            "query": _pt("DAY2", "S004", "12:00:05"),
            "evidence_moments": [_ev("DAY1", "S001", "10:00:02", "10:00:04")],
            "evidence_available": False,
        },
    ]
    trajectories = [
        {
            "trajectory_id": "T1",
            "source": "handmade",
            "title": "kitchen",
            "sessions": [
                {"day_id": d, "session_id": s, "start_time": a, "end_time": b, "video": f"videos/T1/{d}_{s}.mp4"}
                for d, s, a, b in SESSIONS
            ],
        }
    ]
    return {"trajectories": trajectories, "candidates": candidates, "ea": ea}


def write_video(path: Path, seconds: float, fps: int = 2, size: tuple[int, int] = (32, 24)) -> None:
    """A real H.264 file of ``seconds`` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.time_base = Fraction(1, fps)
        for i in range(int(seconds * fps)):
            img = np.full((size[1], size[0], 3), (i * 7) % 255, np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def write_release(root: Path, data: dict[str, Any], videos: bool = True, video_seconds: float = 20) -> Path:
    """Write ``data`` (as from :func:`base_release`) in the release format."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "trajectories.json").write_text(json.dumps(data["trajectories"], indent=2))
    (root / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in data["candidates"]))
    (root / "ea_candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in data["ea"]))
    if videos:
        for t in data["trajectories"]:
            for s in t["sessions"]:
                if not (root / s["video"]).exists():
                    write_video(root / s["video"], video_seconds)
    return root


def mutated(change) -> dict[str, Any]:
    """A deep copy of the base release with ``change(data)`` applied."""
    data = copy.deepcopy(base_release())
    change(data)
    return data
