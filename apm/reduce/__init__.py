"""Scores, the paper's tables and figures from run records (issue 6; contract: docs/scores.md).

Stages: :mod:`load` (JSONL → DataFrames) → :mod:`units` (per-candidate sufficient statistics) →
:mod:`metrics` (pure estimators) + :mod:`bootstrap` → :mod:`scores` (long ``scores.csv``) →
:mod:`tables`, :mod:`figures`; :mod:`compare` pairs two runs; ``apm-reduce`` is :mod:`apm.cli.reduce`.
"""

from apm.reduce.compare import compare_runs
from apm.reduce.load import (
    RunSet,
    UnmatchedPreference,
    check_preference,
    load_judgements,
    load_memory,
    load_records,
    load_runs,
)
from apm.reduce.scores import SCORE_COLUMNS, read_scores, score_table
from apm.reduce.tables import write_tables

__all__ = [
    "RunSet", "SCORE_COLUMNS", "UnmatchedPreference", "check_preference", "compare_runs", "load_judgements",
    "load_memory", "load_records", "load_runs", "read_scores", "score_table", "write_tables",
]
