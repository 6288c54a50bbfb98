"""Every metric of every method, with bootstrap intervals, as the long ``scores.csv`` table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from apm.data.tasks import EA, TASKS
from apm.reduce import bootstrap
from apm.reduce.load import METHOD
from apm.reduce.metrics import MEANS, POOLED, STORAGE, Metric, task_metrics
from apm.reduce.units import ALL, candidate_units, trajectory_units

SCORE_COLUMNS = ["dataset", "memory", "backbone", "judge", "metric", "task", "value", "n", "ci_low", "ci_high"]
TASK_ORDER = TASKS + (EA,)

Method = tuple[str, str, str]


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
    """One metric's value, sample size and bootstrap replicate values (empty: no interval)."""

    metric: str
    task: str
    value: float
    n: float
    reps: np.ndarray

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


def estimate(metric: Metric, task: str, s: Sample) -> Estimate:
    """Evaluate ``metric`` on a sample (its replicates only when it has an interval)."""
    n = float(sum(s.point[c][0] for c in metric.n))
    reps = metric.value(s.reps) if metric.interval else np.empty(0)
    return Estimate(metric.name, task, float(metric.value(s.point)[0]), n, reps)


def evaluate(samples: Mapping[str, Sample]) -> list[Estimate]:
    """All task, pooled and averaged metrics of one method, given its per-task samples."""
    out = [estimate(m, task, s) for task, s in samples.items() for m in task_metrics(task)]
    for pool in POOLED:
        parts = [s for task, s in samples.items() if pool.tasks is None or task in pool.tasks]
        if parts:
            pooled = sum(parts[1:], parts[0])
            out += [estimate(m, pool.label, pooled) for m in pool.metrics]
    out = [e for e in out if e.n > 0 and np.isfinite(e.value)]
    found = {(e.metric, e.task): e for e in out}
    for mean in MEANS:
        parts = [found.get((mean.of, part)) for part in mean.parts]
        if all(p is not None for p in parts):
            e = Estimate(
                mean.metric,
                mean.label,
                float(np.mean([p.value for p in parts])),
                float(sum(p.n for p in parts)),
                np.mean([p.reps for p in parts], axis=0),
            )
            found[(e.metric, e.task)] = e
            out.append(e)
    return out


def task_samples(units: pd.DataFrame, seed: int, reps: int) -> dict[str, Sample]:
    """One method's candidate units (index level ``task``) as per-task samples, in paper order."""
    by_task = dict(iter(units.groupby(level="task", observed=True, sort=False)))
    return {
        task: sample(by_task[task].to_numpy(dtype="float64"), list(units.columns), task, seed, reps)
        for task in TASK_ORDER
        if task in by_task
    }


def storage_estimates(trajectories: pd.DataFrame, seed: int, reps: int) -> list[Estimate]:
    """Eq. (2) storage per hour and Table 10's peak mean (with intervals) and max, one method."""
    s = sample(trajectories.to_numpy(dtype="float64"), list(trajectories.columns), "storage", seed, reps)
    peak = trajectories["peak"]
    peak_max = Estimate("peak_storage_bytes_max", ALL, float(peak.max()), float(len(peak)), np.empty(0))
    return [estimate(m, ALL, s) for m in STORAGE] + [peak_max]


def judge_names(records: pd.DataFrame, judgements: pd.DataFrame) -> dict[Method, str]:
    """Per method, the judge model(s) whose judgements were used ('+'-joined; '' if none)."""
    if judgements.empty:
        return {}
    method_of = records.loc[:, METHOD + ["config_hash"]].astype("str").drop_duplicates("config_hash")
    used = judgements.loc[:, ["config_hash", "judge"]].astype("str").merge(method_of, on="config_hash")
    names = used.groupby(METHOD)["judge"].agg(lambda j: "+".join(sorted(set(j))))
    return {tuple(k): v for k, v in names.items()}


def check_one_config_per_method(records: pd.DataFrame) -> None:
    """Refuse two configs (hashes) sharing a (dataset, memory, backbone): their scores would mix."""
    hashes = records.loc[:, METHOD + ["config_hash"]].astype("str").drop_duplicates()
    clash = hashes[hashes.duplicated(METHOD, keep=False)]
    if len(clash):
        raise ValueError(
            "several config hashes for one (dataset, memory, backbone); reduce them separately:\n"
            + clash.to_string(index=False)
        )


def read_scores(path: str | Path) -> pd.DataFrame:
    """Read a ``scores.csv`` back: names such as ``none`` or ``NA`` stay strings, empty CIs are NaN."""
    numeric = {c: [""] for c in ("value", "ci_low", "ci_high")}
    return pd.read_csv(path, keep_default_na=False, na_values=numeric)


def _rows(method: Method, judge: str, estimates: Sequence[Estimate]) -> list[tuple]:
    return [(*method, judge, e.metric, e.task, e.value, e.n, *e.interval()) for e in estimates]


def score_table(
    records: pd.DataFrame, judgements: pd.DataFrame, memory: pd.DataFrame, seed: int = 0, reps: int = 1000
) -> pd.DataFrame:
    """The long ``scores.csv`` table (:data:`SCORE_COLUMNS`) for every method in the inputs."""
    check_one_config_per_method(records)
    judges = judge_names(records, judgements)
    rows: list[tuple] = []
    units = candidate_units(records, judgements)
    for method, group in units.groupby(level=METHOD, observed=True, sort=True):
        key = tuple(map(str, method))
        rows += _rows(key, judges.get(key, ""), evaluate(task_samples(group, seed, reps)))
    storage = trajectory_units(memory)
    for method, group in storage.groupby(level=METHOD, observed=True, sort=True):
        key = tuple(map(str, method))
        rows += _rows(key, judges.get(key, ""), storage_estimates(group, seed, reps))
    table = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    return table.astype({"n": "int64"})
