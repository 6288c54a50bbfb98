"""Capability scores and Overall reproduce the paper's Table 4 from its own task scores."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from apm.data.tasks import TASKS
from apm.reduce.scores import evaluate, sample
from apm.reduce.units import STATS

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "apm-bench-paper.md"
ROW = re.compile(r"^(?P<name>.+?) (?P<values>(?:\d+\.\d+ ){12}\d+\.\d+)")
KNOWN = {  # two rows, so the check runs without shared/: 12 task scores, then Overall
    "SimpleStream": "27.52 28.52 25.57 56.44 35.90 73.49 46.41 50.89 30.22 26.54 32.11 22.64 37.58",
    "Gemini 3.6 Flash": "73.70 71.81 62.60 67.33 42.05 87.95 59.48 47.73 73.62 26.52 61.80 25.58 60.21",
}


def table4_rows() -> list[tuple[str, list[float]]]:
    """(method, 12 task scores + Overall) for every parseable row of the spec's Table 4."""
    if not SPEC.exists():
        return [(name, [float(v) for v in values.split()]) for name, values in KNOWN.items()]
    text = SPEC.read_text()
    start = text.index("Model / Method Cross-session")
    block = text[start : text.index("\n\n", start)]
    rows = [ROW.match(line) for line in block.splitlines()]
    return [(m["name"], [float(v) for v in m["values"].split()]) for m in rows if m]


def overall_from(task_scores: list[float]) -> float:
    """Overall computed by apm.reduce from one candidate per task scoring the given values."""
    samples = {}
    for task, score in zip(TASKS, task_scores):
        unit = pd.Series(0.0, index=STATS)
        unit[["score", "scored"]] = [score, 1.0]
        samples[task] = sample(unit.to_numpy()[None, :], STATS, task, seed=0, reps=0)
    found = {(e.metric, e.task): e.value for e in evaluate(samples)}
    return found[("overall", "all")]


def test_spec_table_parses() -> None:
    rows = table4_rows()
    assert len(rows) >= (21 if SPEC.exists() else 2)
    assert {"SimpleStream", "Gemini 3.6 Flash"} <= {name for name, _ in rows}


@pytest.mark.parametrize(("name", "values"), table4_rows(), ids=lambda v: v if isinstance(v, str) else "")
def test_overall_matches_table4(name: str, values: list[float]) -> None:
    assert overall_from(values[:12]) == pytest.approx(values[12], abs=0.005 + 1e-9)
