"""Every metric of every method, with bootstrap intervals, as the long ``scores.csv`` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from apm.data.tasks import EA, TASKS
from apm.reduce import bootstrap
from apm.reduce.coverage import UNKNOWN, Coverage, PlanFile, coverage_by_method
from apm.reduce.load import CONFIG, METHOD
from apm.reduce.metrics import (
    ANSWERED_SUFFIX,
    MEANS,
    PEAK_FAST_WEIGHTS_MEAN,
    POOLED,
    STORAGE,
    TIMED,
    MeanOf,
    Metric,
    task_metrics,
)
from apm.reduce.units import ALL, UnitViews, trajectory_units, unit_views

SCORE_COLUMNS = [
    *METHOD, *CONFIG, "judge", "metric", "task", "value", "n", "n_error", "n_unparsed", "n_unjudged",
    "ci_low", "ci_high", "n_planned", "coverage", "coverage_gap",
]
COUNT_COLUMNS = ["n", "n_error", "n_unparsed", "n_unjudged", "n_planned"]
TASK_ORDER = TASKS + (EA,)

ANSWERED = frozenset(
    {m.name for task in TASK_ORDER for m in task_metrics(task) if m.answered}
    | {m.name for pool in POOLED for m in pool.metrics if m.answered}
    | {mean.metric for mean in MEANS}
)
"""Metrics also reported on answered instances only (``<metric>_answered``)."""


@dataclass(frozen=True)
class Sample:
    """Column sums of a set of units: over all of them (``point``) and per bootstrap replicate."""

    point: dict[str, np.ndarray]
    reps: dict[str, np.ndarray]

    def __add__(self, other: Sample) -> Sample:
        return Sample(
            {c: v + other.point[c] for c, v in self.point.items()},
            {c: v + other.reps[c] for c, v in self.reps.items()},
        )


@dataclass(frozen=True)
class Estimate:
    """One metric's value, sample size, bootstrap replicate values (empty: no interval) and the
    instances of its sample that errored, failed to parse, or wait for a judgement."""

    metric: str
    task: str
    value: float
    n: float
    reps: np.ndarray
    n_error: float | None = None
    n_unparsed: float | None = None
    n_unjudged: float | None = None

    def interval(self) -> tuple[float, float]:
        return bootstrap.percentile_interval(self.reps) if self.reps.size else (float("nan"),) * 2


def sample(matrix: np.ndarray, columns: Sequence[str], label: str, seed: int, reps: int) -> Sample:
    """Point and replicate column sums of unit rows ``matrix``, drawn with ``label``'s generator."""
    drawn = bootstrap.replicate_sums(matrix, reps, bootstrap.task_rng(seed, label))
    total = matrix.sum(axis=0)
    return Sample(
        {c: total[i : i + 1] for i, c in enumerate(columns)},
        {c: drawn[:, i] for i, c in enumerate(columns)},
    )


def _point(s: Sample, column: str) -> float | None:
    return float(s.point[column][0]) if column in s.point else None


def estimate(metric: Metric, task: str, s: Sample) -> Estimate:
    """Evaluate ``metric`` on a sample (its replicates only when it has an interval); a judged
    metric whose sample has unjudged probes is withheld: NaN, never a score missing its judgements."""
    n = float(sum(s.point[c][0] for c in metric.n))
    reps = metric.value(s.reps) if metric.interval else np.empty(0)
    value = float(metric.value(s.point)[0])
    unjudged = _point(s, "unjudged")
    if metric.judged and unjudged:
        value, reps = float("nan"), np.full_like(reps, np.nan)
    return Estimate(metric.name, task, value, n, reps, _point(s, "errors"), _point(s, "fmt_fail"), unjudged)


def _withheld(e: Estimate) -> bool:
    return bool(e.n_unjudged) and not np.isfinite(e.value)


def _untimed(e: Estimate) -> bool:
    """A method's pooled latency without an isolated record: kept as NaN, so every table prints "–"."""
    return e.task == ALL and e.metric in TIMED and e.n == 0


def _mean(mean: MeanOf, parts: Sequence[Estimate]) -> Estimate:
    """Unweighted mean of estimates, with summed sample sizes and counts."""

    def total(field: str) -> float | None:
        values = [getattr(p, field) for p in parts]
        return None if any(v is None for v in values) else float(sum(values))

    return Estimate(
        mean.metric, mean.label, float(np.mean([p.value for p in parts])), float(sum(p.n for p in parts)),
        np.mean([p.reps for p in parts], axis=0), total("n_error"), total("n_unparsed"), total("n_unjudged"),
    )


def evaluate(samples: Mapping[str, Sample]) -> list[Estimate]:
    """All task, pooled and averaged metrics of one method, given its per-task samples.

    Metrics without data (n = 0, or undefined) are left out; withheld ones (unjudged) are kept as NaN
    and make every mean over them NaN.
    """
    out = [estimate(m, task, s) for task, s in samples.items() for m in task_metrics(task)]
    for pool in POOLED:
        parts = [s for task, s in samples.items() if task in pool.tasks]
        if parts:
            pooled = sum(parts[1:], parts[0])
            out += [estimate(m, pool.label, pooled) for m in pool.metrics]
    out = [e for e in out if (e.n > 0 and np.isfinite(e.value)) or _withheld(e) or _untimed(e)]
    found = {(e.metric, e.task): e for e in out}
    for mean in MEANS:
        found_parts = [found.get((mean.of, part)) for part in mean.parts]
        if all(p is not None for p in found_parts):
            e = _mean(mean, [p for p in found_parts if p is not None])
            found[(e.metric, e.task)] = e
            out.append(e)
    return out


def answered_view(estimates: Sequence[Estimate]) -> list[Estimate]:
    """Estimates computed on answered instances, renamed ``<metric>_answered`` (:data:`ANSWERED`)."""
    return [replace(e, metric=e.metric + ANSWERED_SUFFIX) for e in estimates if e.metric in ANSWERED]


def task_samples(units: pd.DataFrame, seed: int, reps: int) -> dict[str, Sample]:
    """One method's candidate units (index level ``task``) as per-task samples, in paper order; units
    are drawn in the order of their keys, so the intervals do not depend on the order records were
    written in (instances finish in any order)."""
    by_task = dict(iter(units.groupby(level="task", observed=True, sort=False)))
    return {
        task: sample(by_task[task].sort_index().to_numpy(dtype="float64"), list(units.columns), task, seed, reps)
        for task in TASK_ORDER
        if task in by_task
    }


def storage_estimates(trajectories: pd.DataFrame, seed: int, reps: int) -> list[Estimate]:
    """Eq. (2) storage per hour and Table 10's peak mean (with intervals) and max, one method; for a
    method with fast weights, their peak mean and max too, apart (B.4)."""
    ordered = trajectories.sort_index()  # drawn in key order, whatever order the lines were written in
    s = sample(ordered.to_numpy(dtype="float64"), list(ordered.columns), "storage", seed, reps)
    estimates = [estimate(m, ALL, s) for m in STORAGE] + [_max("peak_storage_bytes_max", trajectories["peak"])]
    if trajectories["fast_peak"].gt(0).any():
        estimates += [estimate(PEAK_FAST_WEIGHTS_MEAN, ALL, s),
                      _max("peak_fast_weight_bytes_max", trajectories["fast_peak"])]
    return estimates


def _max(metric: str, peaks: pd.Series) -> Estimate:
    """The largest of the trajectories' peaks (no interval)."""
    return Estimate(metric, ALL, float(peaks.max()), float(len(peaks)), np.empty(0))


def judge_names(judgements: pd.DataFrame) -> dict[str, str]:
    """Per config hash, the judge(s) whose ok judgements were used ('+'-joined; '' if none)."""
    used = judgements[judgements["status"].astype("str") == "ok"]
    if used.empty:
        return {}
    names = used.astype({"config_hash": "str", "judge": "str"}).groupby("config_hash")["judge"]
    return {h: "+".join(sorted(set(j))) for h, j in names}


def judge_note(judgements: pd.DataFrame) -> str:
    """Which judge(s) and rubric(s) produced the ok judgements used, for every table caption."""
    used = judgements[judgements["status"].astype("str") == "ok"]
    if used.empty:
        return "Judge: none (no adaptive probe is judged)."
    model = used["judge_model"].astype("str").where(used["judge_model"].notna(), "")
    pairs = sorted(set(zip(used["judge"].astype("str"), model, used["rubric_version"].astype("str"))))
    shown = "; ".join(f"{j} ({m}), rubric {r}" if m and m != j else f"{j}, rubric {r}" for j, m, r in pairs)
    return f"Judge: {shown}."


def method_info(records: pd.DataFrame) -> pd.DataFrame:
    """One row per config hash: the method's display names, config choices and variants."""
    cols = [c for c in METHOD if c != "config_hash"] + CONFIG
    info = records.loc[:, ["config_hash", *cols]].astype("str").drop_duplicates("config_hash")
    return info.set_index("config_hash")


def read_scores(path: str | Path) -> pd.DataFrame:
    """Read a ``scores.csv`` back: names such as ``none`` or ``NA`` stay strings, empty CIs are NaN."""
    numeric = {c: [""] for c in ("value", "ci_low", "ci_high", "coverage", *COUNT_COLUMNS)}
    return pd.read_csv(path, keep_default_na=False, na_values=numeric)


def _rows(config: pd.Series, judge: str, covered: Coverage, estimates: Sequence[Estimate]) -> list[tuple]:
    head = [config[c] for c in METHOD[:-1]] + [config.name] + [config[c] for c in CONFIG]
    tail = (covered.planned, covered.fraction, covered.note)
    return [
        (*head, judge, e.metric, e.task, e.value, e.n, e.n_error, e.n_unparsed, e.n_unjudged, *e.interval(), *tail)
        for e in estimates
    ]


def score_table(
    records: pd.DataFrame, judgements: pd.DataFrame, memory: pd.DataFrame, seed: int = 0, reps: int = 1000,
    plans: Sequence[PlanFile] = (), units: UnitViews | None = None,
) -> pd.DataFrame:
    """The long ``scores.csv`` table (:data:`SCORE_COLUMNS`) for every method in the inputs.

    Every metric in the paper's accounting (every instance counts), and the answered-only view of
    the scores as ``<metric>_answered``. Methods are config hashes; each row carries its method's
    coverage of the ``plans`` (``n_planned``, ``coverage``, ``coverage_gap``: empty without a plan).
    ``units``: the records' :func:`~apm.reduce.units.unit_views`, when the caller has built them already.
    """
    info = method_info(records)
    judges = judge_names(judgements)
    covered = coverage_by_method(plans, records, memory)
    built = units or unit_views(records, judgements)
    views = ((built.every, list), (built.answered, answered_view))
    rows: list[tuple] = []
    for unit_rows, view in views:
        for method, group in unit_rows.groupby(level="config_hash", observed=True, sort=True):
            rows += _rows(info.loc[str(method)], judges.get(str(method), ""), covered.get(str(method), UNKNOWN),
                          view(evaluate(task_samples(group, seed, reps))))
    storage = trajectory_units(memory)
    for method, group in storage.groupby(level="config_hash", observed=True, sort=True):
        if str(method) in info.index:
            rows += _rows(info.loc[str(method)], judges.get(str(method), ""), covered.get(str(method), UNKNOWN),
                          storage_estimates(group, seed, reps))
    table = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    return table.astype({c: "Int64" for c in COUNT_COLUMNS})
