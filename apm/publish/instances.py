"""Per-instance tables worth opening: one row per instance, keyed and sorted by its stable ``key`` so
an instance lines up across methods, with what it asked (the question and options, or the probe's
checkpoint text, from the release), the prompt really sent (rebuilt from ``RUN_DIR/prompts/`` and
verified against ``prompt_sha256``), what came back and what was right, the gate, the judge's score
and justification, parse status and reason, latency, memory bytes and a strip of the frames shown."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import pandas as pd

from apm.data.model import Candidate, Release
from apm.publish.source import NOTE_FIELDS, Method, chosen_line, instance_lines, judge_notes
from apm.publish.thumbnails import Thumbnails
from apm.records.lines import Line
from apm.records.model import JudgementLine, named
from apm.records.prompts import reader, sent_text

COLUMNS = (
    "key",
    "task",
    "family",
    "probe_id",
    "polarity",
    "session",
    "probe_time",
    "question",
    "options",
    "checkpoint",
    "correct_option",
    "evidence_available",
    "answer",
    "decision",
    "correct",
    "gate_pass",
    "judge_score",
    "judge_status",
    "justification",
    "parse_status",
    "parse_error",
    "error",
    "output",
    "prompt",
    "ttft_s",
    "total_s",
    "memory_bytes",
    "n_frames",
    "frames",
    "prompt_version",
)
POINT_TEXT = (
    "proactive_response",
    "response_reason",
    "reason",
    "response_window_rationale",
    "reference_proactive_response",
    "silence_reason",
)
"""Fields of a heartbeat or window that say what the probe expects, in the order shown."""
POSITIVE_TEXT = ("reference_proactive_response", "response_window_rationale", "trigger_match_reason")
"""Candidate-level fields that say what a positive window expects (MPA, PRM)."""

Candidates = Mapping[tuple[str, str], Candidate]


def candidates_of(release: Release | None) -> dict[tuple[str, str], Candidate]:
    """Every candidate of a release (EA included) by (trajectory id, candidate id)."""
    return {} if release is None else {(c.trajectory_id, c.candidate_id): c for c in release.all_candidates}


def plain(value: Any) -> Any:
    """A table cell: pandas' missing values as None, numpy scalars as Python ones."""
    if isinstance(value, list | dict | str):
        return value
    if value is None or pd.isna(value):
        return None
    return value.item() if hasattr(value, "item") else value


def question(c: Candidate) -> str | None:
    """The question asked (MCQA, EA, ERA), else the registered request (RCR, PRM)."""
    registration = c.fields.get("registration_event") or {}
    return c.fields.get("question") or registration.get("registration_text")


def options(c: Candidate) -> str | None:
    """The options, one per line: ``A. chopping vegetables``."""
    return "\n".join(f"{o.get('option_id')}. {o.get('text')}" for o in c.fields.get("choices") or []) or None


def _nth(items: Any, i: int) -> Mapping[str, Any] | None:
    return items[i] if isinstance(items, list) and 0 <= i < len(items) else None


def probe_point(c: Candidate, probe_id: str) -> Mapping[str, Any] | None:
    """The heartbeat or window a probe id names (``pos``, ``neg<i>``, TPG ``pos<i>``; docs/records.md)."""
    f, suffix = c.fields, probe_id[3:] or "0"
    index = int(suffix) if suffix.isdigit() else -1
    if probe_id.startswith("neg"):
        return _nth(f.get("negative_heartbeats") or f.get("negative_or_silence_windows"), index)
    if not probe_id.startswith("pos"):
        return None
    if "positive_heartbeat" in f:
        return f["positive_heartbeat"]
    return _nth(f.get("ideal_response_windows") or [f.get("ideal_response_window")], index)


def checkpoint(c: Candidate, probe_id: str, polarity: str | None) -> str | None:
    """What the annotation expects at an adaptive probe: its window, then the response or the reason
    for silence; None for MCQA and EA."""
    point = probe_point(c, probe_id)
    if point is None:
        return None
    texts = [str(point[k]) for k in POINT_TEXT if point.get(k)]
    if polarity == "positive":
        texts += [str(c.fields[k]) for k in POSITIVE_TEXT if c.fields.get(k) and str(c.fields[k]) not in texts]
    if point.get("start_time"):
        texts.insert(0, f"window [{point['start_time']}, {point.get('end_time')})")
    return " — ".join(texts) or None


def wrong_or_failed(rec: Mapping[str, Any]) -> bool:
    """An instance worth a look by default: wrong, failing the gate, errored or unparseable."""
    return (
        plain(rec["correct"]) is False
        or plain(rec["gate_pass"]) is False
        or plain(rec["error"]) is not None
        or plain(rec["parse_status"]) == "failed"
    )


def asked(c: Candidate | None, rec: Mapping[str, Any]) -> dict[str, Any]:
    """The ``question``, ``options`` and ``checkpoint`` cells of a record (None without its candidate)."""
    if c is None:
        return dict.fromkeys(("question", "options", "checkpoint"))
    return {
        "question": question(c),
        "options": options(c),
        "checkpoint": checkpoint(c, str(rec["probe_id"]), plain(rec["polarity"])),
    }


def flat(line: Mapping[str, Any]) -> dict[str, Any]:
    """A record line's cells before the release and the judge add theirs: its fields, the latency's
    timings and its session."""
    latency = line.get("latency") or {}
    return {
        **line,
        "ttft_s": latency.get("ttft_s"),
        "total_s": latency.get("total_s"),
        "session": f"{line['day_id']}/{line['session_id']}",
    }


def instance_rows(
    m: Method, candidates: Candidates, thumbnails: Thumbnails | None, all_frames: bool = False
) -> list[list[Any]]:
    """The rows of :data:`COLUMNS`, sorted by key, each made as its record line is read
    (:func:`~apm.publish.source.instance_lines`: a method's frame lists are never held) (``prompt``: the
    text sent, or why it is not shown, :func:`apm.records.prompts.sent_text`); a strip only for wrong or
    failed instances (every instance with ``all_frames``) and only when the frames can be read."""
    judged = {j["key"]: j for j in m.judgements.to_dict("records")}
    notes = judge_notes(m)
    kept_text = lru_cache(maxsize=None)(reader(m.run_dir))  # a template's text is read once per run dir

    def row(line: Line) -> list[Any]:
        rec = flat(line)
        j = judged.get(rec["key"], {})
        note = notes.get(chosen_line(m.config_hash, j), {}) if j else {}
        frames = plain(rec.get("frames")) or []
        wanted = thumbnails is not None and frames and (all_frames or wrong_or_failed(rec))
        cells = {
            **rec,
            **asked(candidates.get((str(rec["trajectory_id"]), str(rec["candidate_id"]))), rec),
            "judge_score": j.get("score"),
            "judge_status": j.get("status"),
            "justification": note.get("justification"),
            "prompt": sent_text(rec, kept_text),
            "n_frames": len(frames),
            "frames": (
                thumbnails.strip(str(rec["trajectory_id"]), frames) if wanted and thumbnails is not None else None
            ),
        }
        return [plain(cells.get(c)) for c in COLUMNS]

    return instance_lines(m, row)


def column(rows: list[list[Any]], name: str) -> list[Any]:
    """One column of :data:`COLUMNS` rows."""
    at = COLUMNS.index(name)
    return [r[at] for r in rows]


def run_summary(rows: list[list[Any]]) -> dict[str, Any]:
    """What the run stage left on record, from its instance rows: instances, errors, parse failures and
    repairs, peak memory, and the strips made."""
    parse, memory = column(rows, "parse_status"), [b for b in column(rows, "memory_bytes") if b is not None]
    return {
        "instances": len(rows),
        "errors": sum(e is not None for e in column(rows, "error")),
        "parse_failed": parse.count("failed"),
        "parse_repaired": parse.count("repaired"),
        "memory_bytes_max": float(max(memory)) if memory else None,
        "thumbnails": sum(f is not None for f in column(rows, "frames")),
    }


JUDGEMENT_COLUMNS = (
    *named(JudgementLine, "key", "judge", "judge_model", "rubric_version", "status", "failure", "score"),
    *NOTE_FIELDS,
)
"""The judgements table's columns, as the judgement line model names them."""


def judgement_rows(m: Method) -> list[list[Any]]:
    """The selected judgement of each judged instance, sorted by key, with the judge's text (checks
    and issues as JSON)."""
    rows, notes = [], judge_notes(m)
    for j in sorted(m.judgements.to_dict("records"), key=lambda j: j["key"]):
        note = notes.get(chosen_line(m.config_hash, j), {})
        cells = {**j, **{k: v if isinstance(v, str | None) else json.dumps(v) for k, v in note.items()}}
        rows.append([plain(cells.get(c)) for c in JUDGEMENT_COLUMNS])
    return rows
