"""Paired bootstrap comparison of two runs (one method each) on the instances both answered."""

from __future__ import annotations

import pandas as pd

from apm.reduce import bootstrap
from apm.reduce.load import METHOD, RunSet, one_identity, one_release
from apm.reduce.metrics import COUNTS
from apm.reduce.names import method_label
from apm.reduce.scores import Sample, evaluate, task_samples
from apm.reduce.units import ALL, STATS, candidate_units

Samples = dict[str, Sample]

COMPARE_COLUMNS = [
    "run_a", "run_b", "metric", "task", "value_a", "value_b", "diff", "ci_low", "ci_high", "p_value", "n",
]


def _only_method(run: RunSet) -> str:
    methods = run.records.loc[:, METHOD].astype("str").drop_duplicates()
    if len(methods) != 1:
        raise ValueError(f"--compare needs one method per run, got {len(methods)}")
    dataset, memory, backbone, config_hash = methods.iloc[0]
    return f"{method_label(memory, backbone)} [{dataset}, {config_hash}]"


def shared_keys(a: pd.DataFrame, b: pd.DataFrame) -> pd.Index:
    """Keys answered without a backbone error in both record sets."""
    return pd.Index(a.loc[a["error"].isna(), "key"]).intersection(pd.Index(b.loc[b["error"].isna(), "key"]))


def _split(s: Sample, prefix: str) -> Sample:
    n = len(prefix)
    return Sample(
        {c[n:]: v for c, v in s.point.items() if c.startswith(prefix)},
        {c[n:]: v for c, v in s.reps.items() if c.startswith(prefix)},
    )


def paired_samples(a: pd.DataFrame, b: pd.DataFrame, seed: int, reps: int) -> tuple[Samples, Samples]:
    """Per-task samples of both runs' units on their common candidates, drawn with the same counts."""
    ua, ub = a.droplevel(METHOD), b.droplevel(METHOD)
    common = ua.index.intersection(ub.index)
    joined = pd.concat([ua.loc[common, STATS].add_prefix("a:"), ub.loc[common, STATS].add_prefix("b:")], axis=1)
    both = task_samples(joined, seed, reps)
    out_a = {task: _split(s, "a:") for task, s in both.items()}
    out_b = {task: _split(s, "b:") for task, s in both.items()}
    return out_a, out_b


def compare_runs(a: RunSet, b: RunSet, seed: int = 0, reps: int = 1000) -> pd.DataFrame:
    """Each metric with an interval for runs a and b, ``diff`` = b − a with its paired interval and
    two-sided bootstrap p-value (NaN without replicates), restricted to instances both runs answered; refused
    (:class:`~apm.reduce.load.MixedReleases`, :class:`~apm.reduce.load.MixedIdentities`) for runs of two
    releases, or a run whose lines carry two identities."""
    label_a, label_b = _only_method(a), _only_method(b)
    one_release(pd.concat([a.records, b.records], ignore_index=True), "--compare: RUN_A and RUN_B")
    for side in (a, b):
        one_identity(side.records, side.memory)
    keys = shared_keys(a.records, b.records)
    units_a, units_b = [candidate_units(r.records[r.records["key"].isin(keys)], r.judgements) for r in (a, b)]
    samples_a, samples_b = paired_samples(units_a, units_b, seed=seed, reps=reps)
    found_b = {(e.metric, e.task): e for e in evaluate(samples_b)}
    rows = []
    for ea in evaluate(samples_a):
        eb = found_b.get((ea.metric, ea.task))
        if eb is None or ea.metric in COUNTS:
            continue
        diff = eb.reps - ea.reps
        rows.append((label_a, label_b, ea.metric, ea.task, ea.value, eb.value, eb.value - ea.value,
                     *bootstrap.percentile_interval(diff), bootstrap.two_sided_p(diff), int(ea.n)))
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)



def headline(compared: pd.DataFrame) -> str:
    """The comparison in one line: Overall of A → B, the paired difference B − A with its 95% interval
    and p-value, over how many shared candidates; without an Overall (the shared instances miss a
    capability), how many metrics were compared."""
    overall = compared[(compared["metric"] == "overall") & (compared["task"] == ALL)]
    if overall.empty:
        return f"B − A: no Overall (the shared instances do not cover every capability); {len(compared)} metrics"
    row = overall.iloc[0]
    interval = (f", 95% CI [{row['ci_low']:+.1f}, {row['ci_high']:+.1f}], p = {row['p_value']:.3g}"
                if pd.notna(row["ci_low"]) else " (no replicates: --bootstrap 0)")
    return (f"B − A: Overall {row['value_a']:.1f} → {row['value_b']:.1f}, {row['diff']:+.1f}{interval}, "
            f"{int(row['n'])} shared candidates ({row['run_a']} → {row['run_b']})")
