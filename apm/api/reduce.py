"""``apm.reduce_runs``: ``scores.csv``, the paper's tables and figures (and a paired comparison) from run
dirs, exactly as ``apm-reduce`` writes them (``apm-reduce`` parses its arguments and calls this)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from apm.records.atomic import claim_output, replaced_output, write_json_atomically
from apm.records.rundir import find_runs
from apm.reduce.compare import compare_runs, headline
from apm.reduce.figures import write_figures
from apm.reduce.load import WORKERS, RunSet, check_preference, load_runs, one_identity, one_release
from apm.reduce.manifest import reduce_manifest
from apm.reduce.report_index import skipped, write_report_index
from apm.reduce.scores import judge_note, score_table
from apm.reduce.tables import coverage_gaps, latency_gaps, method_rows, write_tables
from apm.reduce.units import unit_views

OWNER = "apm-reduce"
"""Who a report folder belongs to (its marker): the API's report and the command's are one kind, so
either replaces the other."""

Path_ = str | Path

log = logging.getLogger("apm.reduce")


class Unjudged(ValueError):
    """Gate-passing adaptive probes without a judgement, and ``allow_unjudged`` not given."""


class Incomplete(ValueError):
    """``complete``: some method's records do not cover its plan (each named by a warning)."""


@dataclass(frozen=True)
class ReduceResult:
    """What a reduction wrote into ``out``: the score table (``scores.csv``; None for a comparison alone),
    the table and figure files, ``compare.csv`` when asked, and the warnings it gave."""

    out: Path
    scores: pd.DataFrame | None
    records: int
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    compare: Path | None
    warnings: tuple[str, ...]
    """Coverage gaps, then the paper's tables and figures it skipped (and why) and latency columns left empty."""
    headline: str | None = None
    """The paired comparison in one line (:func:`~apm.reduce.compare.headline`), when asked."""

    @property
    def scores_csv(self) -> Path | None:
        return self.out / "scores.csv" if self.scores is not None else None


def coverage_warnings(scores: pd.DataFrame) -> list[str]:
    """One line per method whose records do not cover its plan, or that has no plan to compare with."""
    labels = method_rows(scores).drop_duplicates("config_hash").set_index("config_hash")["method"].astype(str)
    gaps = coverage_gaps(scores)
    unplanned = scores.loc[scores["n_planned"].isna(), "config_hash"].astype(str).unique()
    return [f"{labels.get(h, h)} [{h}]: {gap}" for h, gap in sorted(gaps.items())] + [
        f"{labels.get(h, h)} [{h}]: coverage unknown (no jobs/*/plan.json with its run dir's config.json)"
        for h in sorted(unplanned)
    ]


def reduce_runs(
    runs: Sequence[Path_] = (),
    out: Path_ = "report",
    *,
    judge: str | None = None,
    rubric: str | None = None,
    seed: int = 0,
    bootstrap: int = 1000,
    compare: tuple[Path_, Path_] | None = None,
    allow_unjudged: bool = False,
    complete: bool = False,
    figures: bool = True,
    warn: Callable[[str], None] = log.warning,
) -> ReduceResult:
    """Reduce the runs at or below ``runs`` into the report folder ``out`` (new, empty, or an earlier
    report: replaced whole, atomically; nothing half-written). ``judge``/``rubric``: prefer those
    judgements; ``bootstrap`` replicates (0: no intervals) drawn from ``seed``; ``compare``: a paired
    bootstrap B − A into ``compare.csv``. Gate-passing probes without a judgement raise :class:`Unjudged`
    unless ``allow_unjudged``; ``complete``: a method not covering its plan raises :class:`Incomplete`.
    Each note and coverage line goes to ``warn`` as it is found."""
    if not runs and not compare:
        raise ValueError("give run dirs, a comparison (two run dirs), or both")
    claim_output(out, OWNER)
    if note := find_runs([p for p in runs if os.path.exists(p)]).note():
        warn(f"note: {note}")
    loaded = load_runs(runs, judge, rubric, workers=WORKERS) if runs else None
    if loaded is not None:
        one_release(loaded.records)
        one_identity(loaded.records, loaded.memory)
        check_preference(loaded.judgements, judge, rubric)
    units = unit_views(loaded.records, loaded.judgements) if loaded is not None else None
    if units is not None and units.unjudged and not allow_unjudged:
        raise Unjudged(
            f"{units.unjudged} gate-passing adaptive probe(s) have no judgement (none, a failed one, or "
            "one that does not verify); run apm-judge on these run dirs first, it asks them again (or "
            "allow unjudged probes, --allow-unjudged, to show – for the affected scores)"
        )
    scores = (
        None
        if loaded is None
        else score_table(loaded.records, loaded.judgements, loaded.memory, seed, bootstrap, loaded.plans, units)
    )
    gaps = [] if scores is None else coverage_warnings(scores)
    for line in gaps:
        warn(line)
    if gaps and complete:
        raise Incomplete(f"{len(gaps)} method(s) do not cover their plan")
    with replaced_output(out, OWNER) as stage:  # a kill or a full disk: the previous report
        if compare:
            _compare(compare, stage, judge, rubric, seed, bootstrap)
        tables, drawn = _write_report(stage, loaded, scores, runs, seed, bootstrap, figures)
        said = [] if scores is None else skipped(tables, drawn if figures else None) + latency_gaps(scores, tables)
        for line in said:
            warn(line)
    final = Path(out).expanduser().resolve()
    return ReduceResult(
        final,
        scores,
        0 if loaded is None else len(loaded.records),
        tuple(final / p.relative_to(stage) for p in tables),
        tuple(final / p.relative_to(stage) for p in drawn),
        final / "compare.csv" if compare else None,
        tuple(gaps + said),
        headline(pd.read_csv(final / "compare.csv")) if compare else None,
    )


def _write_report(
    stage: Path,
    runs: RunSet | None,
    scores: pd.DataFrame | None,
    inputs: Sequence[Path_],
    seed: int,
    bootstrap: int,
    figures: bool,
) -> tuple[list[Path], list[Path]]:
    """``scores.csv``, the tables, the figures, the manifest and the index (of those and any ``compare.csv``)
    into ``stage``."""
    if runs is None or scores is None:
        return [], []
    scores.to_csv(stage / "scores.csv", index=False)
    tables = write_tables(scores, stage / "tables", judge_note(runs.judgements))
    drawn = write_figures(scores, stage / "figures", runs.memory) if figures else []
    write_json_atomically(stage / "manifest.json", reduce_manifest(inputs, runs, seed, bootstrap))
    write_report_index(stage, tables, drawn)
    return tables, drawn


def _compare(
    pair: tuple[Path_, Path_], stage: Path, judge: str | None, rubric: str | None, seed: int, bootstrap: int
) -> None:
    a, b = (load_runs([p], judge, rubric, workers=WORKERS) for p in pair)
    compare_runs(a, b, seed, bootstrap).to_csv(stage / "compare.csv", index=False)
