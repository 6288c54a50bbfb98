"""The paper's metrics as pure functions of unit-statistic sums (see :mod:`apm.reduce.units`).

Every estimator maps column sums (arrays: shape (1,) for the point estimate, (B,) for bootstrap
replicates) to metric values, so the same definition serves the score and its confidence interval.
docs/scores.md is the contract these implement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from apm.data.tasks import ADAPTIVE, EA, FAMILIES, MCQA_TASKS, TASKS
from apm.reduce.units import ALL

Sums = Mapping[str, np.ndarray]
Estimator = Callable[[Sums], np.ndarray]


@dataclass(frozen=True)
class Metric:
    """A named estimator; ``n`` names the sums reported as its sample size; counts get no interval.

    ``judged``: the value needs judge scores, so it is withheld (NaN) while any gate-passing probe
    in its sample is unjudged. ``answered``: also reported on answered instances only, as
    ``<name>_answered`` (the view that leaves errored instances out).
    """

    name: str
    value: Estimator
    n: tuple[str, ...]
    interval: bool = True
    judged: bool = False
    answered: bool = True


def ratio(num: str, den: str, scale: float = 1.0) -> Estimator:
    """``scale · Σnum / Σden`` (NaN where the denominator is 0)."""

    def estimate(s: Sums) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return scale * s[num] / np.where(s[den] > 0, s[den], np.nan)

    return estimate


def balanced(first: Estimator, second: Estimator) -> Estimator:
    """Mean of two rates, or the one that exists (as Eq. (1) treats a missing polarity)."""

    def estimate(s: Sums) -> np.ndarray:
        return _nanmean(np.stack([first(s), second(s)]))

    return estimate


def both(first: Estimator, second: Estimator) -> Estimator:
    """Mean of two rates, NaN unless both exist (a balance of one side is no balance)."""

    def estimate(s: Sums) -> np.ndarray:
        return (first(s) + second(s)) / 2.0

    return estimate


def _nanmean(values: np.ndarray) -> np.ndarray:
    """Mean over axis 0 ignoring NaN; NaN (without a warning) where all are NaN."""
    present = ~np.isnan(values)
    total = np.where(present, values, 0.0).sum(axis=0)
    count = present.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def count(column: str) -> Estimator:
    """The plain sum of a count column."""
    return lambda s: s[column]


TASK_SCORE = Metric("task_score", ratio("score", "scored"), ("scored",), judged=True)
POSITIVE_RATE = Metric("decision_positive_rate", ratio("pos_dec", "pos_n", 100.0), ("pos_n",))
NEGATIVE_RATE = Metric("decision_negative_rate", ratio("neg_dec", "neg_n", 100.0), ("neg_n",))
DECISION_BA = Metric("decision_ba", balanced(POSITIVE_RATE.value, NEGATIVE_RATE.value), ("pos_n", "neg_n"))
GATE_PASS = Metric(
    "gate_pass_balanced",
    balanced(ratio("pos_gate", "pos_n", 100.0), ratio("neg_gate", "neg_n", 100.0)),
    ("pos_n", "neg_n"),
)
RESPONSE_QUALITY = Metric("response_quality", ratio("rq", "rq_has"), ("rq_has",), judged=True)
JUDGE_FAILURES = Metric("judge_failures", count("judge_fail"), ("n_inst",), interval=False, answered=False)
EA_ACCURACY = Metric("ea_accuracy", ratio("ea_ok", "ea_n", 100.0), ("ea_n",))
EU_ACCURACY = Metric("eu_accuracy", ratio("eu_ok", "eu_n", 100.0), ("eu_n",))
EA_BALANCED = Metric("ea_balanced", both(EA_ACCURACY.value, EU_ACCURACY.value), ("ea_n", "eu_n"))
EA_ORIGINAL = Metric("ea_original_accuracy", ratio("orig_ok", "orig_n", 100.0), ("orig_n",))
TTFT = Metric("ttft_s", ratio("ttft_sum", "ttft_n"), ("ttft_n",), answered=False)
LATENCY_TOTAL = Metric("latency_total_s", ratio("total_sum", "total_n"), ("total_n",), answered=False)
RTF = Metric("rtf", ratio("rtf_sum", "rtf_n"), ("rtf_n",), answered=False)
FORMAT_FAILURES = Metric("format_failures", count("fmt_fail"), ("n_inst",), interval=False, answered=False)
FORMAT_FAILURE_RATE = Metric("format_failure_rate", ratio("fmt_fail", "n_inst", 100.0), ("n_inst",))
ERRORS = Metric("errors", count("errors"), ("n_inst",), interval=False, answered=False)
STORAGE_PER_HOUR = Metric(
    "storage_bytes_per_hour", ratio("per_hour", "trajectories"), ("trajectories",), answered=False
)
PEAK_STORAGE_MEAN = Metric("peak_storage_bytes_mean", ratio("peak", "trajectories"), ("trajectories",), answered=False)
PEAK_FAST_WEIGHTS_MEAN = Metric(
    "peak_fast_weight_bytes_mean", ratio("fast_peak", "trajectories"), ("trajectories",), answered=False
)
"""B.4's fast weights, apart from per-video storage: the mean trajectory-peak ``fast_weight_bytes``."""

TIMED = frozenset({TTFT.name, LATENCY_TOTAL.name, RTF.name})
"""Latency means: over isolated-mode records only; a method without any keeps its pooled row, as NaN ("–")."""
COUNTS = frozenset({JUDGE_FAILURES.name, FORMAT_FAILURES.name, ERRORS.name})
"""Metrics that are plain counts: no interval, nothing to compare."""

_EVERY_TASK = (TTFT, LATENCY_TOTAL, RTF, FORMAT_FAILURES, FORMAT_FAILURE_RATE, ERRORS)
_DECISION = (POSITIVE_RATE, NEGATIVE_RATE, DECISION_BA)


def task_metrics(task: str) -> tuple[Metric, ...]:
    """The metrics reported for one task."""
    if task in MCQA_TASKS:
        return (TASK_SCORE,) + _EVERY_TASK
    if task in ADAPTIVE:
        return (TASK_SCORE,) + _DECISION + (GATE_PASS, RESPONSE_QUALITY, JUDGE_FAILURES) + _EVERY_TASK
    if task == EA:
        return (EA_ACCURACY, EU_ACCURACY, EA_BALANCED, EA_ORIGINAL) + _EVERY_TASK
    raise ValueError(f"unknown task {task!r}")


@dataclass(frozen=True)
class Pooled:
    """Metrics over instances pooled across ``tasks``, reported as task ``label``."""

    label: str
    tasks: tuple[str, ...]
    metrics: tuple[Metric, ...]


POOLED = (Pooled("adaptive", ADAPTIVE, _DECISION + (JUDGE_FAILURES,)), Pooled(ALL, TASKS, _EVERY_TASK))
"""``all`` is the paper's population: the 12 tasks' probes (5,371 on the release); EA instances, a set of
their own, are reported under task ``EA`` only and never pooled into it (docs/scores.md, "Populations")."""
STORAGE = (STORAGE_PER_HOUR, PEAK_STORAGE_MEAN)


@dataclass(frozen=True)
class MeanOf:
    """``metric`` for ``label`` = unweighted mean of ``of`` over ``parts`` (defined only if all exist;
    withheld, NaN, if any part is)."""

    metric: str
    label: str
    of: str
    parts: tuple[str, ...]


CAPABILITIES = {"cross_session": "CS Und.", "perception": "Perception", "adaptive": "Adaptive"}
"""Capability families in the paper's order, with Table 3's column names."""

MEANS = tuple(
    MeanOf("capability_score", family, "task_score", FAMILIES[family]) for family in CAPABILITIES
) + (
    MeanOf("overall", ALL, "capability_score", tuple(CAPABILITIES)),
    MeanOf("response_quality", "adaptive", "response_quality", ADAPTIVE),
)

ANSWERED_SUFFIX = "_answered"
"""Metric-name suffix of the answered-only view (docs/scores.md, "Two accounting views")."""
"""Evaluated in order: an entry may average earlier entries (overall averages capabilities)."""
