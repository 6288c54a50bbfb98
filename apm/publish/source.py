"""What a publish reads: per method (config hash), its records, judgements and scores from the JSONL
of its run directory (the source of truth), its ``config.json`` and the judges' text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from apm.records.lines import read_lines
from apm.records.model import JudgementLine, named
from apm.records.rundir import RunDir
from apm.records.select import REVISION, STAMP, LineId, line_id, row_id
from apm.reduce import load_runs, score_table
from apm.reduce.units import unit_views

JudgeNotes = dict[LineId, dict[str, Any]]
"""The free text of judgement lines, by :data:`~apm.records.select.LineId`."""
NOTE_FIELDS = named(JudgementLine, "justification", "criterion_checks", "critical_issues")


@dataclass(frozen=True)
class Method:
    """One method's inputs: its latest records, the selected judgements, its rows of the score table."""

    config_hash: str
    run_dir: Path
    run: dict[str, Any]
    """The ``run`` block of its records: names, config choices and overrides, capabilities."""
    records: pd.DataFrame
    judgements: pd.DataFrame
    scores: pd.DataFrame
    saved: dict[str, Any]
    """The run dir's ``config.json`` (``{}`` for a run dir the runner did not write)."""
    notes: JudgeNotes
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


def judge_notes(run_dir: Path) -> JudgeNotes:
    """Justification, criterion checks and critical issues of every usable judgement line of a run dir;
    of lines the rule cannot tell apart (:mod:`apm.records.select`), the one read last, as in the reducer."""
    notes: JudgeNotes = {}
    for path in RunDir(run_dir).files("judgements"):
        for line in read_lines(path, "judgements"):
            notes[line_id(line)] = {f: line.get(f) for f in NOTE_FIELDS}
    return notes


def chosen_line(config_hash: str, judgement: Mapping[str, Any]) -> LineId:
    """The line behind a selected judgement (a row of :attr:`Method.judgements` as a dict)."""
    return row_id(config_hash, judgement["key"], judgement[REVISION], judgement[STAMP])


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
    runs = load_runs([run_dir], judge, rubric, detail=True)
    if runs.records.empty:
        return []
    units = unit_views(runs.records, runs.judgements)
    scores = score_table(runs.records, runs.judgements, runs.memory, seed, reps, runs.plans, units)
    unjudged = units.unjudged_by_method()
    hashes = set(runs.records["config_hash"].astype("str"))
    blocks, saved, notes = run_blocks(run_dir, hashes), saved_config(run_dir), judge_notes(run_dir)
    return [
        Method(h, run_dir, blocks[h], _of(runs.records, h), _of(runs.judgements, h), _of(scores, h), saved, notes,
               unjudged.get(h, 0))
        for h in sorted(hashes)
    ]
