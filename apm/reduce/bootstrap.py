"""Seeded, vectorised bootstrap over units (candidates or trajectories) and percentile intervals.

A replicate resamples a task's units with replacement; its column sums are ``counts @ matrix`` where
``counts`` holds how often each unit was drawn, so a replicate never touches instance rows. Each
task's generator is seeded by (seed, task label) alone: every method, and both sides of a paired
comparison, see the same draws for a task of the same size, and replicate b of a capability score
averages replicate b of its tasks.
"""

from __future__ import annotations

import zlib

import numpy as np

LEVEL = 0.95
_CELLS = 1 << 22
"""Draws held in memory at once (replicates × units), bounding memory on very large tasks."""


def task_rng(seed: int, label: str) -> np.random.Generator:
    """The generator for one task (or pooled label): depends on the seed and label only."""
    return np.random.default_rng([seed, zlib.crc32(label.encode())])


def replicate_sums(matrix: np.ndarray, reps: int, rng: np.random.Generator) -> np.ndarray:
    """Column sums of ``reps`` resamples (with replacement) of the rows of ``matrix``: (reps, k)."""
    n, k = matrix.shape
    out = np.zeros((reps, k))
    if n == 0:
        return out
    block = max(1, _CELLS // n)
    for start in range(0, reps, block):
        b = min(block, reps - start)
        draws = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
        out[start : start + b] = counts @ matrix
    return out


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the finite replicate values; NaNs when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("nan"), float("nan")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)


def two_sided_p(differences: np.ndarray) -> float:
    """Bootstrap two-sided p-value-ish: twice the smaller tail fraction of differences around 0."""
    finite = differences[np.isfinite(differences)]
    if finite.size == 0:
        return float("nan")
    tail = min(np.mean(finite <= 0.0), np.mean(finite >= 0.0))
    return float(min(1.0, 2.0 * tail))
