"""What a publish reads: per method (config hash), its records, judgements and scores from the JSONL
of its run directory (the source of truth), its ``config.json`` and the judges' text. The scores are
computed from the scoring columns of every method at once; the records' detail (frames, prompt,
output) is streamed one method at a time (:func:`instance_lines`), so a publish holds one method's
table, never the sweep's records."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from apm.records.lines import Line, read_lines
from apm.records.model import JudgementLine, named
from apm.records.rundir import RunDir
from apm.records.select import REVISION, STAMP, LineId, line_id, row_id
from apm.reduce import load_runs, score_table
from apm.reduce.units import unit_views

T = TypeVar("T")
JudgeNotes = dict[LineId, dict[str, Any]]
"""The free text of judgement lines, by :data:`~apm.records.select.LineId`."""
NOTE_FIELDS = named(JudgementLine, "justification", "criterion_checks", "critical_issues")


@dataclass(frozen=True)
class Method:
    """One method's inputs: the scoring columns of its latest records (the detail is streamed by
    :func:`instance_lines`), the selected judgements, its rows of the score table."""

    config_hash: str
    run_dir: Path
    run: dict[str, Any]
    """The ``run`` block of its records: names, config choices and overrides, capabilities."""
    records: pd.DataFrame
    judgements: pd.DataFrame
    scores: pd.DataFrame
    saved: dict[str, Any]
    """The run dir's ``config.json`` (``{}`` for a run dir the runner did not write)."""
    unjudged: int
    """Its gate-passing adaptive probes without an ok judgement (the reduction's candidate units)."""


def sweep_root(run_dir: Path) -> Path:
    """The root of the sweep a run dir belongs to: the ``output_root`` its ``config.json`` records, while
    the run dir is still below it; else (moved, copied, or not the runner's) the run dir itself."""
    run_dir = run_dir.resolve()
    root = (saved_config(run_dir).get("config") or {}).get("output_root")
    return Path(root) if isinstance(root, str) and run_dir.is_relative_to(root) else run_dir


def saved_config(run_dir: Path) -> dict[str, Any]:
    """The run dir's ``config.json``, or ``{}`` when it has none or it cannot be read."""
    try:
        saved = json.loads(RunDir(run_dir).config.read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def judge_notes(m: Method) -> JudgeNotes:
    """Justification, criterion checks and critical issues of the method's usable judgement lines, by the
    line they come from; of lines the rule cannot tell apart (:mod:`apm.records.select`), the one read
    last, as in the reducer."""
    notes: JudgeNotes = {}
    for path in RunDir(m.run_dir).files("judgements"):
        for line in read_lines(path, "judgements"):
            if line_id(line)[0] == m.config_hash:
                notes[line_id(line)] = {f: line.get(f) for f in NOTE_FIELDS}
    return notes


def chosen_line(config_hash: str, judgement: Mapping[str, Any]) -> LineId:
    """The line behind a selected judgement (a row of :attr:`Method.judgements` as a dict)."""
    return row_id(config_hash, judgement["key"], judgement[REVISION], judgement[STAMP])


def instance_lines(m: Method, shrink: Callable[[Line], T]) -> list[T]:
    """``shrink`` of the method's latest record line of each key, with every field (frames, prompt,
    output), in key order: the lines are read one at a time from its run dir (the one place a publish
    reads the records' detail) and each winner is shrunk at once, so no line is held. The winner is
    the line :attr:`Method.records` holds (:mod:`apm.records.select`); of exact equals, the one read last
    (the reducer's rule)."""
    wanted = {
        str(k): row_id(m.config_hash, k, r, w)
        for k, r, w in zip(m.records["key"], m.records[REVISION], m.records[STAMP])
    }
    found: dict[str, T] = {}
    for path in RunDir(m.run_dir).files("records"):
        for line in read_lines(path, "records"):
            if wanted.get(line["key"]) == line_id(line):
                found[line["key"]] = shrink(line)
    return [found[key] for key in sorted(found)]


def run_blocks(run_dir: Path, hashes: set[str]) -> dict[str, dict[str, Any]]:
    """The ``run`` block of each method, from its first usable record line (usually the file's first)."""
    found: dict[str, dict[str, Any]] = {}
    for path in RunDir(run_dir).files("records"):
        for line in read_lines(path, "records"):
            found.setdefault(line["run"]["config_hash"], line["run"])
            if hashes <= found.keys():
                return found
    return found


def _of(df: pd.DataFrame, config_hash: str) -> pd.DataFrame:
    return df[df["config_hash"].astype("str") == config_hash].reset_index(drop=True)


def read_methods(run_dir: Path, judge: str | None, rubric: str | None, seed: int, reps: int) -> list[Method]:
    """The methods of one run dir, read as ``apm-reduce`` reads them (latest line per key wins)."""
    runs = load_runs([run_dir], judge, rubric)
    if runs.records.empty:
        return []
    units = unit_views(runs.records, runs.judgements)
    scores = score_table(runs.records, runs.judgements, runs.memory, seed, reps, runs.plans, units)
    unjudged = units.unjudged_by_method()
    hashes = set(runs.records["config_hash"].astype("str"))
    blocks, saved = run_blocks(run_dir, hashes), saved_config(run_dir)
    return [
        Method(
            h,
            run_dir,
            blocks[h],
            _of(runs.records, h),
            _of(runs.judgements, h),
            _of(scores, h),
            saved,
            unjudged.get(h, 0),
        )
        for h in sorted(hashes)
    ]
